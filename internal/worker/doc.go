// Package worker processes envelopes as River jobs: it loads the envelope,
// dispatches it to the handler for its (provider, event type), and commits the
// handler's effects, the envelope's final status and the River job's
// completion in one transaction. It holds the one place where a handler's
// error becomes River's action (outcome).
//
// It may import envelope, handlers and ledger; it must not import ingest.
package worker
