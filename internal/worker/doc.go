// Package worker processes envelopes as River jobs: it loads the envelope,
// dispatches it to the handler for its (provider, event type), and commits the
// handler's effects, the envelope's final status and the River job's
// completion in one transaction. It holds the one place where an attempt's
// result (not found, lost race, already final, done, ignored, or the
// handler's error) becomes River's action and the envelope's status: decide,
// a pure function of the result and the attempt's bounds (its attempt
// number, River's and the source's max_attempts, the envelope's age, the
// policy). Exhaustion is decided there and nowhere else: the job's
// max_attempts, set at insert (envelope.ProcessJob), is River's backstop.
//
// It may import envelope, handlers and ledger; it must not import ingest.
package worker
