// Package admin holds the operator's tools behind the worker's admin
// subcommands: selecting envelopes with a Filter, replaying them (Replay,
// DryRun), listing and showing them (List, Show), and the inbox's health at a
// glance (Stats). Every function takes a pool, returns plain structs with
// snake_case JSON tags, and prints nothing, so the CLI stays thin and tests
// call the same code.
//
// Replay is the only function here that writes. It resets envelopes to
// pending, writes an envelope_replay audit row per envelope and inserts the
// River job, in one transaction per batch, and never gives an envelope a
// second live job. DryRun, List, Show and Stats run in read-only
// transactions: they change nothing.
//
// Time comes from the database: relative bounds such as "24h ago" are
// resolved once per call against the database's now().
//
// Its statements on the envelope tables are envelope's (envelope.Selection,
// Summaries, LockForReplay, RecordReplays, LoadDetail, CountBySource, ...):
// admin holds the policy (Filter and its validation, batches, limits, the
// results' shape). An envelope's ledger rows it reads through ledger.ByEnvelope
// and ledger.Entries.
//
// It may import envelope, ledger, durations, labels, tracing and the River and pgx libraries; it must not import
// handlers, worker, ingest or cmd (its tests do run the real worker, to check
// what a replay leads to).
package admin
