package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxhq/inbox/internal/admin"
	"github.com/inboxhq/inbox/internal/cli"
)

const resolveUsage = `usage: worker envelopes resolve --reason TEXT [flags] [ID...]
       worker envelopes unresolve --reason TEXT [flags] [ID...]

Resolve closes failed envelopes that no replay can fix (the stored body is
immutable: an unknown_currency payment fails on every replay): each one named
by id, or every failed envelope the filter flags select, becomes resolved,
with an envelope_resolution row (actor, reason, selection, batch id, time).
Nothing else changes: not the body, the attempts, the result or the ledger.
A resolved envelope leaves the failed counts (worker stats, inbox_envelopes,
the console's Failures page) and is final for retention; list them with
--status resolved. Unresolve makes resolved envelopes failed again. Envelopes
in another status are left alone. --dry-run counts and shows the first 10.

examples:
  worker envelopes resolve --reason "INC-42: refunded by hand" 1234
  worker envelopes resolve --reason "FX rate never added" --cause unknown_currency --since 7d --dry-run
  worker envelopes unresolve --reason "resolved by mistake" 1234

flags:
`

func runResolve(undo bool) func(context.Context, []string, func(string) string, io.Writer, io.Writer) error {
	name, verb := "envelopes resolve", "resolved"
	if undo {
		name, verb = "envelopes unresolve", "unresolved"
	}
	return func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
		return adminCommand[admin.ResolveRequest, admin.ResolveResult]{
			name:       name,
			usage:      resolveUsage,
			positional: true,
			flags: func(fs *cli.Flags) func([]string) (admin.ResolveRequest, error) {
				ff := addFilterFlags(fs)
				reason := fs.String("reason", "", "", "why: stored with every envelope changed (required, except with --dry-run)")
				actor := fs.String("actor", "", "", "who: stored with every envelope changed (default: the OS user)")
				dryRun := fs.Bool("dry-run", false, "print how many envelopes match and the first 10; change nothing")
				limit := fs.Int("limit", "", 0, "change at most this many envelopes (0: no cap)")
				return func(pos []string) (admin.ResolveRequest, error) {
					f, err := ff.filter(pos)
					if err != nil {
						return admin.ResolveRequest{}, err
					}
					who := *actor
					if who == "" {
						who = currentActor(getenv)
					}
					req := admin.ResolveRequest{Filter: f, Actor: who, Reason: *reason, Undo: undo, Limit: *limit, DryRun: *dryRun}
					return req, req.Validate()
				}
			},
			exec: func(ctx context.Context, pool *pgxpool.Pool, req admin.ResolveRequest) (admin.ResolveResult, error) {
				return admin.Resolve(ctx, pool, req)
			},
			partial: func(res admin.ResolveResult) bool { return res.Changed > 0 && !res.DryRun },
			json:    func(_ admin.ResolveRequest, res admin.ResolveResult) any { return res },
			text: func(w io.Writer, req admin.ResolveRequest, res admin.ResolveResult) error {
				kv := newKeyValues(w)
				from := "failed"
				if req.Undo {
					from = "resolved"
				}
				if res.DryRun {
					kv.add("dry run:", "nothing changed")
					kv.add("matched", "%d %s", res.Matched, from)
					kv.add("would be "+verb, "%d", res.Changed)
					if err := kv.flush(); err != nil {
						return err
					}
					if len(res.Sample) > 0 {
						fmt.Fprintf(w, "\nfirst %d by id:\n", len(res.Sample))
						return writeSummaries(w, res.Sample)
					}
					return nil
				}
				kv.add("batch id", "%s", res.BatchID)
				kv.add("matched", "%d %s", res.Matched, from)
				kv.add(verb, "%d", res.Changed)
				if len(res.IDs) > 0 {
					more := ""
					if res.Changed > len(res.IDs) {
						more = fmt.Sprintf(" (and %d more)", res.Changed-len(res.IDs))
					}
					kv.add("ids", "%s%s", admin.JoinIDs(res.IDs, " "), more)
				}
				if res.LimitReached {
					kv.add("limit", "reached (--limit %d): run again for more", req.Limit)
				}
				kv.add("duration", "%s", res.Duration.Round(time.Millisecond))
				return kv.flush()
			},
		}.run(ctx, args, getenv, stdout, stderr)
	}
}
