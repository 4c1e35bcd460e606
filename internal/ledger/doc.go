// Package ledger owns the double-entry ledger: accounts, transactions, their
// entries and the balances they add up to, and idempotent posting of payments
// and refunds into it.
//
// Amounts are integers in a currency's minor units (ISO 4217 exponent: cents
// for USD, yen for JPY, fils for KWD), never floats. An entry's amount is
// signed: debits positive, credits negative, so every transaction sums to zero
// per currency. The database enforces that at COMMIT and refuses to update or
// delete posted rows; this package never tries to.
//
// Post runs inside a transaction the caller owns, so a posting commits or rolls
// back together with whatever else the caller writes (the envelope's status,
// the job's completion). It is idempotent twice over: once per envelope and
// once per business idempotency key.
//
// The package imports pgx, OpenTelemetry's API (its spans, when tracing is
// on: tracing.go) and the standard library only, and nothing of this module.
package ledger
