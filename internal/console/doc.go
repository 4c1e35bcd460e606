// Package console is the operator console: web pages, served by the worker's
// admin listener at /console/, to find any envelope, see everything that
// happened to it, group failures by cause and replay with a reason.
//
// Every page is rendered on the server from html/template with one
// stylesheet and no script, so it needs no build step and runs under a
// strict Content-Security-Policy (default-src 'none'). Pages:
//
//	/console/overview          worker stats: per-source counts, the oldest pending
//	                           envelope, failed envelopes by cause (admin.GetStats)
//	/console/search?q=         an envelope id or delivery id: jumps to the envelope
//	/console/envelopes         the list: admin.FilterInput's filters as query
//	                           parameters, newest first, paged by id cursor
//	/console/envelopes/{id}    one envelope: admin.Show, duplicates, and each
//	                           conflicting delivery diffed against the stored body
//	/console/failures          failures by cause: failed now, and failed or
//	                           retried attempts per hour (envelope.Failures)
//	/console/replay            GET: the dry run of a filter or ids (admin.DryRun)
//	                           and the form; POST: starts admin.Replay, pinned to
//	                           what the dry run showed (its max id, its clock for
//	                           relative bounds, at most its count)
//	/console/replays           replay runs: this process's, with progress, and
//	                           every run recorded in envelope_replay
//	/console/replays/{run}     one run: progress, Stop (POST .../stop), and at the
//	                           end what became of its envelopes
//	/console/jobs/{id}         the envelope a River job processes (River UI's
//	                           job pages show {"envelope_id": N}; this is the way back)
//
// Each page says the CLI command and the SQL it corresponds to: the console
// adds no action the CLI lacks.
//
// Security: the console changes data (replay), so the worker serves it only
// behind the same guard as River UI (basic auth, one login per operator with
// --admin-users, login throttling, net/http's cross-origin protection, no
// framing); the signed-in user is the replay's actor. A cross-site request
// that is not a top-level navigation is refused, so another site cannot
// embed a page or run searches with the browser's credentials. Every state-changing request also carries a token bound to that
// user (an HMAC under a per-process key), checked before anything runs;
// pages set Content-Security-Policy, frame-ancestors 'none' and no-store.
// Headers are shown as stored (ingest replaced signature values by
// "[redacted]"), and any header whose name looks like a credential is
// redacted again on display.
//
// Imports: admin (the library every console action calls), envelope,
// labels. Nothing imports console but cmd/worker.
package console
