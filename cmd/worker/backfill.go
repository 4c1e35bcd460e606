package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxhq/inbox/internal/admin"
	"github.com/inboxhq/inbox/internal/backfill"
	"github.com/inboxhq/inbox/internal/cli"
	"github.com/inboxhq/inbox/internal/config"
	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/provider"
	"github.com/inboxhq/inbox/internal/retention"
)

const backfillUsage = `usage: worker backfill --source NAME --since DURATION|TIME [--dry-run] [flags]

Recover events the provider never delivered, from its own log.

  stripe  lists the account's events (GET /v1/events; Stripe keeps 30 days)
          created since then and stores each one that has no envelope, with
          its processing job, exactly as ingest stores a webhook: the same
          dedup key (the event id), so a webhook of the same event, earlier,
          concurrent or later, is a plain duplicate and nothing is processed
          twice. Stored envelopes have origin 'backfill' and this run's id.
  github  lists the hook's deliveries (GitHub keeps 3 days) and asks GitHub
          to redeliver each event that has no envelope, whatever GitHub saw
          (one answered 2xx with no envelope is reported apart: something
          other than ingest answered the hook's URL); the redelivery
          arrives through ingest, verified.
  shopify has no delivery log: it cannot be backfilled.

The source needs a backfill section in the sources file (api_key for
Stripe; token, repo and hook_id for GitHub): see docs/operations.md. Every
run, dry runs included, writes a backfill_run row (who, window, listed,
found, stored, status). A run that stops (the provider's API kept failing,
Ctrl-C) keeps what it stored; --resume ID carries on from its last page.

examples:
  worker backfill --source stripe --since 96h --dry-run
  worker backfill --source stripe --since 2026-11-27T18:00:00Z
  worker backfill --source stripe --resume 12

flags:
`

func runBackfill(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return adminCommand[backfill.Request, backfill.Result]{
		name:  "backfill",
		usage: backfillUsage,
		flags: func(fs *cli.Flags) func([]string) (backfill.Request, error) {
			cfgPath := fs.String("config", "INBOX_CONFIG", "", "sources YAML file (the one ingest reads)")
			sourceName := fs.String("source", "", "", "the source to backfill (required)")
			sinceFlag := fs.String("since", "", "", "window start: a duration meaning that long ago (96h, 7d) or an RFC 3339 time (required unless --resume)")
			dryRun := fs.Bool("dry-run", false, "list what is missing; store (or redeliver) nothing")
			actor := fs.String("actor", "", "", "who: stored in backfill_run (default: the OS user)")
			resume := fs.Int("resume", "", 0, "continue this backfill_run (same window, same Stripe accounts; give --dry-run again for a dry run) from its last recorded page")
			deleteAfter := fs.Duration("purge-delete-after", "WORKER_PURGE_DELETE_AFTER", retention.DefaultDeleteAfter, "the workers' --purge-delete-after: a --since older than that is refused (deleted envelopes look never delivered)")
			force := fs.Bool("force", false, "run a --since older than --purge-delete-after anyway (events whose envelopes were purged are stored and processed again)")
			return func([]string) (backfill.Request, error) {
				return backfillRequest(backfillFlags{cfgPath: *cfgPath, source: *sourceName, since: *sinceFlag, dryRun: *dryRun,
					actor: *actor, resume: *resume, deleteAfter: *deleteAfter, force: *force}, getenv, stderr)
			}
		},
		exec: func(ctx context.Context, pool *pgxpool.Pool, req backfill.Request) (backfill.Result, error) {
			client, err := envelope.NewInsertClient(pool, adminLogger(stderr))
			if err != nil {
				return backfill.Result{}, err
			}
			// No logger: the summary and the error say it all, once.
			runner := &backfill.Runner{Store: envelope.NewStore(pool, client)}
			prog := &backfillProgress{w: stderr, every: 2 * time.Second}
			req.ProgressFunc = prog.update
			res, err := runner.Run(ctx, req)
			prog.finish()
			switch {
			case err == nil || res.RunID == 0 || res.Status == backfill.StatusDone:
				return res, err
			case res.Provider == provider.GitHub:
				// A GitHub run is not resumed: a new one lists the deliveries
				// again and redelivers only what still has no envelope.
				return res, fmt.Errorf("%w (what is reported above was redelivered; run again with: worker backfill --source %s --since %s)", err, res.Source, res.Since.UTC().Format(time.RFC3339))
			default:
				dry := ""
				if res.DryRun {
					dry = " --dry-run"
				}
				return res, fmt.Errorf("%w (what is reported above is stored; continue with: worker backfill --source %s --resume %d%s)", err, res.Source, res.RunID, dry)
			}
		},
		// A run that has its backfill_run row reports it, also when it failed.
		partial: func(res backfill.Result) bool { return res.RunID != 0 },
		text:    func(w io.Writer, _ backfill.Request, res backfill.Result) error { return printBackfill(w, res) },
	}.run(ctx, args, getenv, stdout, stderr)
}

// backfillFlags are backfill's flags, as given.
type backfillFlags struct {
	cfgPath, source, since, actor string
	dryRun, force                 bool
	resume                        int
	deleteAfter                   time.Duration
}

// backfillRequest turns the flags into the request, checked (the source's
// own abilities by backfill.Request.Validate). A sources file that does
// not load is an inputError.
func backfillRequest(fl backfillFlags, getenv func(string) string, stderr io.Writer) (backfill.Request, error) {
	var req backfill.Request
	switch {
	case fl.source == "":
		return req, errors.New("--source is required")
	case fl.cfgPath == "":
		return req, errors.New("--config (or INBOX_CONFIG) is required: the source's provider and API credentials are there")
	case (fl.since == "") == (fl.resume == 0):
		return req, errors.New("give --since (a new run) or --resume ID (an earlier one), not both")
	case fl.resume < 0:
		return req, fmt.Errorf("--resume %d: want a backfill_run id", fl.resume)
	}
	if fl.since != "" {
		b, err := admin.ParseBound(fl.since)
		if err != nil {
			return req, fmt.Errorf("--since: %w", err)
		}
		req.Since = b.At
		if b.Ago > 0 {
			req.Since = time.Now().Add(-b.Ago)
		}
		if !req.Since.Before(time.Now()) {
			return req, fmt.Errorf("--since %s is not in the past", fl.since)
		}
		if horizon := time.Now().Add(-fl.deleteAfter); req.Since.Before(horizon) {
			if !fl.force {
				return req, fmt.Errorf("--since %s is older than the purge's delete horizon (--purge-delete-after %s, %s): envelopes processed before it may be deleted, and their events would look never delivered and be stored and processed again; give a later --since, or --force", fl.since, fl.deleteAfter, fmtTime(horizon))
			}
			fmt.Fprintf(stderr, "warning: --since is older than the purge's delete horizon %s (--force): events whose envelopes were purged are stored and processed again\n", fmtTime(horizon))
		}
	}
	req.DryRun, req.Resume, req.Actor = fl.dryRun, int64(fl.resume), cmp.Or(fl.actor, currentActor(getenv))
	if strings.TrimSpace(req.Actor) == "" {
		return req, errors.New("cannot tell who you are: pass --actor")
	}
	cfg, err := config.Load(fl.cfgPath, getenv)
	if err != nil {
		return req, inputError{err}
	}
	if req.Source = cfg.Sources[fl.source]; req.Source == nil {
		return req, fmt.Errorf("no source %q in %s (sources: %s)", fl.source, fl.cfgPath, strings.Join(cfg.Names(), ", "))
	}
	if err := req.Validate(); err != nil {
		return req, err
	}
	switch {
	case req.Since.IsZero():
	case req.Source.Provider == provider.Stripe && time.Since(req.Since) > 30*24*time.Hour:
		fmt.Fprintln(stderr, "note: Stripe keeps events for 30 days: older ones cannot be listed")
	case req.Source.Provider == provider.GitHub && time.Since(req.Since) > 3*24*time.Hour:
		fmt.Fprintln(stderr, "note: GitHub keeps a hook's deliveries for 3 days: older ones cannot be listed or redelivered")
	}
	return req, nil
}

// backfillProgress prints a line per page, at most one per interval.
type backfillProgress struct {
	w     io.Writer
	every time.Duration
	last  time.Time
	pend  *backfill.Progress
}

func (p *backfillProgress) update(pr backfill.Progress) {
	if time.Since(p.last) < p.every {
		p.pend = &pr
		return
	}
	p.print(pr)
}

func (p *backfillProgress) print(pr backfill.Progress) {
	p.last, p.pend = time.Now(), nil
	at := "-"
	if !pr.Oldest.IsZero() {
		at = fmtTime(pr.Oldest)
	}
	fmt.Fprintf(p.w, "backfill: page %d, back to %s: listed %d, missing %d, stored %d\n", pr.Pages, at, pr.Listed, pr.Found, pr.Stored)
}

func (p *backfillProgress) finish() {
	if p.pend != nil {
		p.print(*p.pend)
	}
}

func printBackfill(w io.Writer, res backfill.Result) error {
	kv := newKeyValues(w)
	if res.DryRun {
		kv.add("dry run:", "nothing stored or redelivered")
	}
	kv.add("run id", "%d", res.RunID)
	kv.add("source", "%s (%s)", res.Source, res.Provider)
	kv.add("window", "%s to %s", fmtTime(res.Since), fmtTime(res.Until))
	kv.add("listed", "%d", res.Listed)
	kv.add("missing", "%d (no envelope)", res.Found)
	if res.Found > 0 {
		kv.add("never delivered", "%d (older than the provider's retry window)", res.NeverDelivered)
		if res.Retrying > 0 {
			kv.add("not yet delivered", "%d (within the provider's retry window: it may still be retrying them; a late webhook is a duplicate)", res.Retrying)
		}
	}
	switch {
	case res.DryRun:
	case res.Provider == provider.GitHub:
		if res.AckedMissing > 0 {
			kv.add("answered 2xx", "%d of the missing: GitHub saw them answered 2xx but no envelope holds them (is the hook's URL ingest's?)", res.AckedMissing)
		}
		kv.add("redelivered", "%d (they arrive through ingest)", res.Stored)
	default:
		kv.add("stored", "%d", res.Stored)
		if res.Raced > 0 {
			kv.add("raced", "%d (their webhook arrived first: stored once)", res.Raced)
		}
	}
	if res.Refused > 0 {
		kv.add("refused", "%d (livemode disagrees with the API key's mode: not stored)", res.Refused)
	}
	for _, wn := range res.Warnings {
		kv.add("WARNING", "%s", wn)
	}
	kv.add("status", "%s", res.Status)
	kv.add("duration", "%s", res.Duration.Round(time.Millisecond))
	if err := kv.flush(); err != nil {
		return err
	}
	if len(res.Missing) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := newTable(w)
	fmt.Fprintln(tw, "MISSING\tTYPE\tCREATED\tACCOUNT\tENVELOPE")
	for _, m := range res.Missing {
		env := "-"
		switch {
		case m.EnvelopeID != 0 && m.Raced:
			env = fmt.Sprintf("%d (webhook)", m.EnvelopeID)
		case m.EnvelopeID != 0:
			env = fmt.Sprint(m.EnvelopeID)
		case m.DeliveryID != 0 && !res.DryRun:
			env = fmt.Sprintf("redelivered (delivery %d)", m.DeliveryID)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.ID, m.Type, fmtTime(m.Created), cmp.Or(m.Account, "-"), env)
	}
	if len(res.Missing) < res.Found {
		fmt.Fprintf(tw, "... and %d more\t\t\t\t\n", res.Found-len(res.Missing))
	}
	return tw.Flush()
}
