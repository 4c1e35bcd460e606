// Package backfill recovers events a provider never delivered, from the
// provider's own log: Stripe's events API (GET /v1/events, 30 days) and
// GitHub's log of a hook's deliveries. Shopify keeps no such log.
//
// A Stripe event with no envelope is stored through the envelope store's
// Insert, the one ingest uses: same dedup key (the event id), its processing
// job enqueued in the same transaction, so a webhook of the same event
// arriving before, during or after is a plain duplicate and nothing is
// processed twice. A failed GitHub delivery with no envelope is redelivered
// by GitHub on request, and arrives through ingest's verified path.
//
// Every run (the CLI's and the periodic reconcile's) writes one
// backfill_run row: who, the window, how many events were listed, found
// missing and stored, and how it ended. The provider clients honour 429 and
// Retry-After with bounded retries, keep to a request rate, bound every
// request with a timeout, resume pagination from the last cursor after a
// failed page, and never log or return an API key or token.
//
// It imports config, envelope and provider; it must not import ingest,
// worker or handlers.
package backfill
