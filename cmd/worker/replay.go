package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/inboxhq/inbox/internal/admin"
	"github.com/inboxhq/inbox/internal/cli"
	"github.com/inboxhq/inbox/internal/durations"
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
  worker replay --reason "FX table fixed" --status failed --cause unknown_currency --dry-run
  worker replay --reason "m_1 re-enabled" --status failed --field data.merchant_id=m_1

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
	// Raw: the bar's carriage return and erase-line must reach the terminal
	// as controls; the bar holds nothing but numbers and this program's words.
	bar := newProgress(cli.Raw(stderr), time.Now())
	req.ProgressFunc = bar.update
	res, err := admin.Replay(ctx, pool, client, req)
	bar.finish()
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

// progress shows a replay's progress on stderr: on a terminal one line
// redrawn after each batch, fitted to the terminal's width (read at each
// redraw, so a resized window is followed); elsewhere (a log file, CI, a
// pipe) a plain line every progressEvery, and a last one at the end, so
// nothing but newline-terminated lines is written.
type progress struct {
	w        io.Writer
	start    time.Time
	terminal bool
	width    func() int // the terminal's columns; 0 if unknown
	last     time.Time  // of the last plain line
	drawn    bool
	pr       admin.Progress
}

// progressEvery is how often a replay off a terminal prints its progress.
const progressEvery = 5 * time.Second

func newProgress(w io.Writer, start time.Time) *progress {
	p := &progress{w: w, start: start, last: start}
	if f, ok := w.(interface{ Fd() uintptr }); ok && term.IsTerminal(int(f.Fd())) {
		p.terminal = true
		p.width = func() int {
			cols, _, err := term.GetSize(int(f.Fd()))
			if err != nil {
				return 0
			}
			return cols
		}
	}
	return p
}

func (p *progress) update(pr admin.Progress) {
	p.pr, p.drawn = pr, true
	now := time.Now()
	if p.terminal {
		fmt.Fprint(p.w, "\r"+renderProgress(pr, p.width(), now.Sub(p.start))+"\x1b[K")
		return
	}
	if now.Sub(p.last) >= progressEvery {
		p.last = now
		fmt.Fprintln(p.w, progressLine(pr, now.Sub(p.start)))
	}
}

// finish ends the bar's line on a terminal, so later output starts on a
// fresh one; elsewhere it prints the final count.
func (p *progress) finish() {
	switch {
	case !p.drawn:
	case p.terminal:
		fmt.Fprintln(p.w)
	default:
		fmt.Fprintln(p.w, progressLine(p.pr, time.Since(p.start)))
	}
}

// progressLine is the plain form: "replay: 1500/3000 (50%) replayed 1490 skipped 10 eta 2s".
func progressLine(pr admin.Progress, elapsed time.Duration) string {
	frac := fraction(pr)
	return fmt.Sprintf("replay: %d/%d (%.0f%%) replayed %d skipped %d eta %s",
		pr.Scanned, pr.Total, frac*100, pr.Replayed, pr.Skipped, eta(frac, elapsed))
}

func fraction(pr admin.Progress) float64 {
	frac := 1.0
	if pr.Total > 0 {
		frac = float64(pr.Scanned) / float64(pr.Total)
	}
	return min(max(frac, 0), 1)
}

// eta extrapolates the time left from the rate so far: "-" when done or
// unknown, "<1s" rather than a rounded "0s" while work is left.
func eta(frac float64, elapsed time.Duration) string {
	if frac <= 0 || frac >= 1 {
		return "-"
	}
	left := time.Duration(float64(elapsed) * (1 - frac) / frac)
	if left < time.Second {
		return "<1s"
	}
	return durations.Format(left.Round(time.Second))
}

// renderProgress draws "[=====     ]  50% 1500/3000 replayed 1490 skipped 10 eta 3s"
// in at most cols-1 columns (the last column would wrap some terminals):
// the bar takes what the text leaves, up to 30 cells, and is dropped below
// 5; the text is cut if even that does not fit. cols 0 (unknown) is 80.
func renderProgress(pr admin.Progress, cols int, elapsed time.Duration) string {
	if cols <= 0 {
		cols = 80
	}
	frac := fraction(pr)
	text := fmt.Sprintf("%3.0f%% %d/%d replayed %d skipped %d eta %s",
		frac*100, pr.Scanned, pr.Total, pr.Replayed, pr.Skipped, eta(frac, elapsed))
	room := cols - 1
	width := min(30, room-len(text)-3) // "[" + bar + "] "
	if width < 5 {
		if len(text) > room {
			text = text[:max(room, 0)]
		}
		return text
	}
	filled := int(frac * float64(width))
	return "[" + strings.Repeat("=", filled) + strings.Repeat(" ", width-filled) + "] " + text
}
