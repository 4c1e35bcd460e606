// Package retention owns how long envelopes are kept: it drops the bodies of
// processed envelopes after one window and deletes the remaining rows (the
// tombstones) after a longer one, as a River periodic job (PurgeWorker) or a
// one-off call (Purge, used by `worker purge`).
//
// Two windows, because the delivery id outlives the body: GitHub and Shopify
// sign no timestamp, so a stored delivery id is their only defence against a
// replayed request. A tombstone keeps source, delivery_id, status,
// body_sha256 and the timestamps, so ingest's INSERT ... ON CONFLICT
// (source, delivery_id) still sees it: a redelivery with the same body counts
// as a duplicate, one with a different body as a conflict.
//
// What it never touches: pending and failed envelopes (they may still be
// processed or replayed) and envelopes referenced by a ledger transaction
// (the ledger is append-only and its evidence is kept whole: body and row).
//
// It owns the policy (the windows, the batches, the order of the phases,
// the report); the statements are envelope's (envelope.DropPartitions,
// envelope.DropBodies), which owns the envelope tables.
//
// All time comes from the database's now(). It imports pgx and River, and of
// this module internal/durations and internal/envelope (the purge
// statements, and the job states its purge job shares with the processing
// job).
package retention
