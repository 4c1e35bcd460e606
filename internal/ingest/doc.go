// Package ingest serves the webhook endpoints: it verifies each delivery,
// stores it with its processing job in one transaction, and answers only
// after COMMIT. writeError is the one place that maps errors to HTTP statuses.
//
// It may import config, provider and envelope; it must not import worker or
// handlers.
package ingest
