// Package ingest serves the webhook endpoints: it verifies each delivery,
// stores it with its processing job in one transaction, and answers only
// after COMMIT. writeError is the one place that maps errors to HTTP statuses.
//
// Its options are its own (Source, Options): ingestconfig builds them from
// the sources file. It may import provider and envelope; it must not import
// config, worker or handlers.
package ingest
