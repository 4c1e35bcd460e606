// Package audit keeps the SQL audit cookbook (docs/audit.md) honest: its
// tests parse the cookbook, run every query against a database seeded with
// realistic deliveries, retries, replays, conflicts, ledger postings and a
// purged body, and check the answers. The audit surface itself is SQL: the
// views and functions of migration 00103, documented in docs/schema.md.
//
// The package has no code of its own; it must not be imported.
package audit
