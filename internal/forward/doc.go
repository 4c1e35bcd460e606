// Package forward sends verified deliveries on to internal HTTP endpoints,
// configured per source (a Destination each, decoded by config): Handler, the
// handlers.Handler that POSTs one envelope to one destination (outbound
// client, Standard Webhooks signing, Retry-After, status classes mapped to
// the handlers error contract), and Router, the handlers.Router that
// decorates another Router with each source's routes and adds their results
// to the envelope's. cmd/worker assembles it over the handlers.Registry
// with FromSources and config.Config.Destinations.
//
// In mode besides the decorated Router's handler (the built-in one) runs
// first and the forwards only once it succeeded, so an envelope the built-in
// handler is not ready for (a refund ahead of its payment, snoozed and tried
// again for hours) is not forwarded on every attempt; in mode instead only
// the forwards run. Delivery is still at least once: a forward that
// succeeded is sent again when the rest of the attempt (a later destination,
// the commit) fails and the envelope is retried, or when it is replayed.
// Every request of one envelope carries the same Idempotency-Key and
// webhook-id, "<source>:<delivery id>", for the receiver to deduplicate on.
//
// The package may import envelope, handlers, labels, provider,
// tracing, pgx, OpenTelemetry and the standard library; it must not import
// config (config decodes into forwardspec, its leaf package),
// worker, ingest or cmd, and handlers must not import it.
package forward
