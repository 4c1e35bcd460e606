package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/inboxhq/inbox/internal/admin"
	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/tracing"
)

const replayUsage = `usage: worker replay --reason TEXT [flags] [ID...]

Process envelopes again: the ones named by id, or every envelope the filter
flags select. Envelopes go back to pending and get a new processing job, in
batches of one transaction each, with an envelope_replay audit row per
envelope (actor, reason, filter, batch id, prior status, job id). An envelope
whose job is still waiting or running is skipped as "already queued", so it
is safe to run twice. Handlers are idempotent: replaying a done payment
records a no-op, never a second posting.

Ctrl-C stops the run: the batch in flight rolls back, committed ones stay, and
the summary says how many were replayed (exit status 1).

examples:
  worker replay --reason "INC-42: handler fixed" 1234 1235
  worker replay --reason "INC-42" --source stripe --status failed --since 24h --dry-run
  worker replay --reason "INC-42" --source stripe --status failed --since 24h --limit 1000

flags:
`

func runReplay(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlags("worker replay", replayUsage, getenv, stderr)
	ff := addFilterFlags(fs)
	reason := fs.String("reason", "", "", "why: stored with every replayed envelope (required, except with --dry-run)")
	actor := fs.String("actor", "", "", "who: stored with every replayed envelope (default: the OS user)")
	dryRun := fs.Bool("dry-run", false, "print how many envelopes match and the first 10; change nothing")
	batchSize := fs.Int("batch-size", "", admin.DefaultBatchSize, fmt.Sprintf("envelopes per transaction (1 to %d)", admin.MaxBatchSize))
	limit := fs.Int("limit", "", 0, "replay at most this many envelopes (0: no cap)")
	asJSON := fs.Bool("json", false, "print one JSON document")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return usageError{err}
	}
	ids, err := parseIDs(pos)
	if err != nil {
		return usageError{err}
	}
	f, err := ff.filter(ids)
	if err != nil {
		return usageError{err}
	}
	if f.IsEmpty() {
		return usageError{errors.New("replay: name envelope ids or select with at least one filter flag (--source, --status, --event-type, --since, --until, --delivery-id)")}
	}
	if *batchSize < 1 || *batchSize > admin.MaxBatchSize {
		return usageError{fmt.Errorf("--batch-size %d: want 1 to %d", *batchSize, admin.MaxBatchSize)}
	}
	if *limit < 0 {
		return usageError{fmt.Errorf("--limit %d: must not be negative", *limit)}
	}
	if !*dryRun && strings.TrimSpace(*reason) == "" {
		return usageError{errors.New("replay: --reason is required (it is stored with every replayed envelope)")}
	}
	who := *actor
	if who == "" {
		who = currentActor(getenv)
	}
	if !*dryRun && strings.TrimSpace(who) == "" {
		return usageError{errors.New("replay: cannot tell who you are: pass --actor")}
	}

	stopTracing, err := tracing.Setup(ctx, "inbox-admin", getenv, adminLogger(stderr))
	if err != nil {
		return usageError{err}
	}
	defer tracing.Flush(stopTracing, adminLogger(stderr))
	pool, err := openPool(ctx, getenv)
	if err != nil {
		return err
	}
	defer pool.Close()

	if *dryRun {
		res, err := admin.DryRun(ctx, pool, f, *limit)
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(stdout, struct {
				DryRun bool `json:"dry_run"`
				admin.DryRunResult
			}{true, res})
		}
		tw := newTable(stdout)
		fmt.Fprintln(tw, "dry run:\tnothing changed")
		fmt.Fprintf(tw, "matched\t%d\n", res.Matched)
		fmt.Fprintf(tw, "already queued\t%d (would be skipped)\n", res.AlreadyQueued)
		fmt.Fprintf(tw, "would replay\t%d\n", res.WouldReplay)
		if err := tw.Flush(); err != nil {
			return err
		}
		if len(res.Sample) > 0 {
			fmt.Fprintf(stdout, "\nfirst %d by id:\n", len(res.Sample))
			return writeSummaries(stdout, res.Sample)
		}
		return nil
	}

	client, err := envelope.NewInsertClient(pool, adminLogger(stderr))
	if err != nil {
		return err
	}
	req := admin.ReplayRequest{Filter: f, Actor: who, Reason: *reason, BatchSize: *batchSize, Limit: *limit}
	var bar *progressBar
	if isTerminal(stderr) {
		bar = &progressBar{w: stderr, width: 30, start: time.Now()}
		req.ProgressFunc = bar.update
	}
	res, err := admin.Replay(ctx, pool, client, req)
	if bar != nil {
		bar.finish()
	}
	if err != nil && res.Batches == 0 && !res.Interrupted {
		return err // nothing committed: no summary to print
	}
	if *asJSON {
		if jerr := writeJSON(stdout, struct {
			DryRun bool `json:"dry_run"`
			admin.ReplayResult
		}{false, res}); jerr != nil && err == nil {
			err = jerr
		}
		return err
	}
	tw := newTable(stdout)
	fmt.Fprintf(tw, "batch id\t%s\n", res.BatchID)
	fmt.Fprintf(tw, "matched\t%d\n", res.Matched)
	fmt.Fprintf(tw, "replayed\t%d\n", res.Replayed)
	fmt.Fprintf(tw, "skipped\t%d (already queued)\n", res.Skipped)
	fmt.Fprintf(tw, "batches\t%d\n", res.Batches)
	fmt.Fprintf(tw, "duration\t%s\n", res.Duration.Round(time.Millisecond))
	if res.Skipped > 0 {
		s := make([]string, len(res.SkippedIDs))
		for i, id := range res.SkippedIDs {
			s[i] = strconv.FormatInt(id, 10)
		}
		more := ""
		if res.Skipped > len(res.SkippedIDs) {
			more = fmt.Sprintf(" (and %d more)", res.Skipped-len(res.SkippedIDs))
		}
		fmt.Fprintf(tw, "skipped ids\t%s%s\n", strings.Join(s, " "), more)
	}
	if res.LimitReached {
		fmt.Fprintf(tw, "limit\treached (--limit %d): run again to replay more\n", *limit)
	}
	if res.Interrupted {
		fmt.Fprintf(tw, "interrupted\tyes: %d replayed before it, the batch in flight rolled back\n", res.Replayed)
	}
	if ferr := tw.Flush(); ferr != nil && err == nil {
		err = ferr
	}
	return err
}

// isTerminal reports whether w is a character device (a terminal), without
// golang.org/x/term.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progressBar redraws one line on a terminal after each batch.
type progressBar struct {
	w     io.Writer
	width int
	start time.Time
	drawn bool
}

func (p *progressBar) update(pr admin.Progress) {
	p.drawn = true
	fmt.Fprint(p.w, "\r"+renderProgress(pr, p.width, time.Since(p.start))+"\x1b[K")
}

// finish ends the bar's line, so later output starts on a fresh one.
func (p *progressBar) finish() {
	if p.drawn {
		fmt.Fprintln(p.w)
	}
}

// renderProgress draws "[=====     ]  50% 1500/3000 replayed 1490 skipped 10 eta 3s".
func renderProgress(pr admin.Progress, width int, elapsed time.Duration) string {
	frac := 1.0
	if pr.Total > 0 {
		frac = float64(pr.Scanned) / float64(pr.Total)
	}
	frac = min(max(frac, 0), 1)
	filled := int(frac * float64(width))
	eta := "-"
	if pr.Scanned > 0 && frac < 1 {
		left := time.Duration(float64(elapsed) * (1 - frac) / frac)
		eta = left.Round(time.Second).String()
	}
	return fmt.Sprintf("[%s%s] %3.0f%% %d/%d replayed %d skipped %d eta %s",
		strings.Repeat("=", filled), strings.Repeat(" ", width-filled), frac*100,
		pr.Scanned, pr.Total, pr.Replayed, pr.Skipped, eta)
}
