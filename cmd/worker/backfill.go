package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/inboxhq/inbox/internal/admin"
	"github.com/inboxhq/inbox/internal/backfill"
	"github.com/inboxhq/inbox/internal/config"
	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/provider"
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
          to redeliver each event whose every attempt failed and that has no
          envelope: the redelivery arrives through ingest, verified.
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
	fs := newFlags("worker backfill", backfillUsage, getenv, stderr)
	cfgPath := fs.String("config", "INBOX_CONFIG", "", "sources YAML file (the one ingest reads)")
	sourceName := fs.String("source", "", "", "the source to backfill (required)")
	sinceFlag := fs.String("since", "", "", "window start: a duration meaning that long ago (96h, 7d) or an RFC 3339 time (required unless --resume)")
	dryRun := fs.Bool("dry-run", false, "list what is missing; store (or redeliver) nothing")
	actor := fs.String("actor", "", "", "who: stored in backfill_run (default: the OS user)")
	resume := fs.Int("resume", "", 0, "continue this backfill_run (same window) from its last recorded page")
	asJSON := fs.Bool("json", false, "print one JSON document")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("backfill: unexpected argument %q", fs.Arg(0))}
	}
	if *sourceName == "" {
		return usageError{errors.New("backfill: --source is required")}
	}
	if *cfgPath == "" {
		return usageError{errors.New("backfill: --config (or INBOX_CONFIG) is required: the source's provider and API credentials are there")}
	}
	if (*sinceFlag == "") == (*resume == 0) {
		return usageError{errors.New("backfill: give --since (a new run) or --resume ID (an earlier one), not both")}
	}
	if *resume < 0 {
		return usageError{fmt.Errorf("backfill: --resume %d: want a backfill_run id", *resume)}
	}
	var since time.Time
	if *sinceFlag != "" {
		b, err := admin.ParseBound(*sinceFlag)
		if err != nil {
			return usageError{fmt.Errorf("backfill: --since: %w", err)}
		}
		since = b.At
		if b.Ago > 0 {
			since = time.Now().Add(-b.Ago)
		}
		if !since.Before(time.Now()) {
			return usageError{fmt.Errorf("backfill: --since %s is not in the past", *sinceFlag)}
		}
	}
	who := *actor
	if who == "" {
		who = currentActor(getenv)
	}
	if strings.TrimSpace(who) == "" {
		return usageError{errors.New("backfill: cannot tell who you are: pass --actor")}
	}
	cfg, err := config.Load(*cfgPath, getenv)
	if err != nil {
		return err
	}
	src := cfg.Sources[*sourceName]
	switch {
	case src == nil:
		return usageError{fmt.Errorf("backfill: no source %q in %s (sources: %s)", *sourceName, *cfgPath, strings.Join(cfg.Names(), ", "))}
	case src.Provider == provider.Shopify:
		return usageError{fmt.Errorf("backfill: source %q is a Shopify source: %w", src.Name, config.ErrNoDeliveryLog)}
	case !config.BackfillSupported(src.Provider):
		return usageError{fmt.Errorf("backfill: source %q: provider %s keeps no event log to list; only stripe and github sources can be backfilled", src.Name, src.Provider)}
	case src.Backfill == nil:
		return usageError{fmt.Errorf("backfill: source %q has no backfill section in %s: add api_key (stripe) or token, repo and hook_id (github); see docs/operations.md", src.Name, *cfgPath)}
	}
	switch {
	case since.IsZero():
	case src.Provider == provider.Stripe && time.Since(since) > 30*24*time.Hour:
		fmt.Fprintln(stderr, "note: Stripe keeps events for 30 days: older ones cannot be listed")
	case src.Provider == provider.GitHub && time.Since(since) > 3*24*time.Hour:
		fmt.Fprintln(stderr, "note: GitHub keeps a hook's deliveries for 3 days: older ones cannot be listed or redelivered")
	}

	pool, err := openPool(ctx, getenv)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := envelope.NewInsertClient(pool, adminLogger(stderr))
	if err != nil {
		return err
	}
	// No logger: the summary and the error say it all, once.
	runner := &backfill.Runner{Store: envelope.NewStore(pool, client)}
	prog := &backfillProgress{w: stderr, every: 2 * time.Second}
	res, err := runner.Run(ctx, backfill.Request{
		Source: src, Since: since, DryRun: *dryRun, Actor: who, Resume: int64(*resume), ProgressFunc: prog.update,
	})
	prog.finish()
	if res.RunID == 0 {
		if err != nil && errors.Is(err, backfill.ErrUnsupported) {
			return usageError{err}
		}
		return err
	}
	if *asJSON {
		if jerr := writeJSON(stdout, res); jerr != nil && err == nil {
			err = jerr
		}
		return err
	}
	if perr := printBackfill(stdout, res); perr != nil && err == nil {
		err = perr
	}
	if err != nil && res.Status != backfill.StatusDone {
		return fmt.Errorf("%w (what is reported above is stored; continue with: worker backfill --source %s --resume %d)", err, res.Source, res.RunID)
	}
	return err
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
	tw := newTable(w)
	if res.DryRun {
		fmt.Fprintln(tw, "dry run:\tnothing stored or redelivered")
	}
	fmt.Fprintf(tw, "run id\t%d\n", res.RunID)
	fmt.Fprintf(tw, "source\t%s (%s)\n", res.Source, res.Provider)
	fmt.Fprintf(tw, "window\t%s to %s\n", fmtTime(res.Since), fmtTime(res.Until))
	fmt.Fprintf(tw, "listed\t%d\n", res.Listed)
	fmt.Fprintf(tw, "missing\t%d (never delivered)\n", res.Found)
	switch {
	case res.DryRun:
	case res.Provider == provider.GitHub:
		fmt.Fprintf(tw, "redelivered\t%d (they arrive through ingest)\n", res.Stored)
	default:
		fmt.Fprintf(tw, "stored\t%d\n", res.Stored)
		if res.Raced > 0 {
			fmt.Fprintf(tw, "raced\t%d (their webhook arrived first: stored once)\n", res.Raced)
		}
	}
	fmt.Fprintf(tw, "status\t%s\n", res.Status)
	fmt.Fprintf(tw, "duration\t%s\n", res.Duration.Round(time.Millisecond))
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(res.Missing) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = newTable(w)
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
