// Package handlers owns event handlers: a Registry from (provider, event type)
// to the Handler that applies an envelope's effects, the built-in payment
// handlers that post Stripe, Standard Webhooks and Shopify payments and refunds
// to the ledger, and the error types by which a handler says whether a failure
// is permanent, not ready yet, or worth a plain retry.
//
// A handler runs inside the worker's transaction: its ledger postings, the
// envelope's result and status and the job's completion commit together or
// not at all. Handlers never begin, commit or roll back. Everything a
// handler works with is a value of its Run: the transaction, the envelope,
// the ledger.Writer bound to the transaction (the worker's account cache
// and, for a batch, its deferred ledger statement) and the source's
// configured account.
//
// The worker finds an envelope's handler through a Router, with Resolve. The
// Registry is the plain Router, keyed by (provider, event type) alone;
// per-source forwarding decorates it in package forward, and cmd/worker
// assembles the chain from the sources file. Resolve wraps the handler in
// the Middleware every envelope gets whichever route it took: Recover, then
// ShopifyEventOnce.
//
// The package may import envelope, labels, ledger, provider, pgx and the
// standard library; it must not import config, forward, worker, ingest or
// cmd.
//
// # Built-in handlers
//
//	stripe    payment_intent.succeeded  payment: data.object.amount_received
//	stripe    charge.refunded           refund: the new part of the charge's refunded amount (amount_refunded,
//	                                    less what a partial capture released before API version basil);
//	                                    a never-captured charge (cancelled authorization) is a no-op
//	stripe    charge.refund.updated,    refund_reversal of a Refund whose status is "failed"
//	          refund.updated, refund.failed
//	standard  payment.succeeded         payment: data.amount_minor
//	standard  payment.refunded          refund: data.amount_minor, data.refund_id
//	shopify   orders/paid               payment: total_price (decimal string)
//	shopify   refunds/create            refund: "refund" transactions that succeeded or are pending
//	github    *                         recorded, no ledger effect
//
// The merchant is the payload's (Stripe Connect "account", Standard
// data.merchant_id, Shopify X-Shopify-Shop-Domain header), else the source's
// configured account_id (Run.Account), else the envelope's source name.
// A Stripe refund or reversal is posted for its payment's merchant. Business
// keys, unique across the ledger, are:
//
//	stripe:payment:<payment_intent id>
//	stripe:refund:<charge id>:<refunded amount>:<event id>
//	stripe:refund_failed:<refund id>
//	standard:<merchant>:payment:<payment_id>
//	standard:<merchant>:refund:<refund_id>
//	shopify:order:<order id>    (Shopify ids are global; the shop header is unsigned)
//	shopify:refund:<refund id>  (a zero-total order is a no-op)
//
// Stripe states amounts in its own smallest unit, which differs from ISO 4217
// minor units for a few currencies (ISK is two-decimal at Stripe, MGA
// zero-decimal); the Stripe handlers convert, so ledger amounts are always ISO
// minor units. Currency codes are uppercased (ASCII only) before lookup.
package handlers
