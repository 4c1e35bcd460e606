package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
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

// replayRequest is a replay or, with dryRun, its dry run.
type replayRequest struct {
	dryRun bool
	admin.ReplayRequest
}

// replayResult is what a replay or its dry run did.
type replayResult struct {
	dryRun bool
	dry    admin.DryRunResult
	run    admin.ReplayResult
}

func runReplay(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return adminCommand[replayRequest, replayResult]{
		name:       "replay",
		usage:      replayUsage,
		positional: true,
		flags: func(fs *cli.Flags) func([]string) (replayRequest, error) {
			ff := addFilterFlags(fs)
			reason := fs.String("reason", "", "", "why: stored with every replayed envelope (required, except with --dry-run)")
			actor := fs.String("actor", "", "", "who: stored with every replayed envelope (default: the OS user)")
			dryRun := fs.Bool("dry-run", false, "print how many envelopes match and the first 10; change nothing")
			batchSize := fs.Int("batch-size", "", admin.DefaultBatchSize, fmt.Sprintf("envelopes per transaction (1 to %d)", admin.MaxBatchSize))
			limit := fs.Int("limit", "", 0, "replay at most this many envelopes (0: no cap)")
			return func(pos []string) (replayRequest, error) {
				f, err := ff.filter(pos)
				if err != nil {
					return replayRequest{}, err
				}
				if *batchSize == 0 { // 0 is the library's default; typed, a mistake
					return replayRequest{}, fmt.Errorf("--batch-size 0: want 1 to %d", admin.MaxBatchSize)
				}
				who := *actor
				if who == "" {
					who = currentActor(getenv)
				}
				req := replayRequest{dryRun: *dryRun, ReplayRequest: admin.ReplayRequest{
					Filter: f, Actor: who, Reason: *reason, BatchSize: *batchSize, Limit: *limit}}
				if req.dryRun {
					return req, req.ValidateSelection()
				}
				return req, req.Validate()
			}
		},
		exec: func(ctx context.Context, pool *pgxpool.Pool, req replayRequest) (replayResult, error) {
			res := replayResult{dryRun: req.dryRun}
			stopTracing, err := tracing.Setup(ctx, "inbox-admin", getenv, adminLogger(stderr))
			if err != nil {
				return res, cli.UsageError{Err: err}
			}
			defer tracing.Flush(stopTracing, adminLogger(stderr))
			if req.dryRun {
				res.dry, err = admin.DryRun(ctx, pool, req.Filter, req.Limit)
				return res, err
			}
			client, err := envelope.NewInsertClient(pool, adminLogger(stderr))
			if err != nil {
				return res, err
			}
			// Raw: the bar's carriage return and erase-line must reach the
			// terminal as controls; the bar holds nothing but numbers and
			// this program's words.
			bar := newProgress(cli.Raw(stderr), time.Now())
			req.ProgressFunc = bar.update
			res.run, err = admin.Replay(ctx, pool, client, req.ReplayRequest)
			bar.finish()
			return res, err
		},
		// A run that committed batches, or was interrupted, reports them.
		partial: func(res replayResult) bool { return !res.dryRun && (res.run.Batches > 0 || res.run.Interrupted) },
		json: func(_ replayRequest, res replayResult) any {
			if res.dryRun {
				return struct {
					DryRun bool `json:"dry_run"`
					admin.DryRunResult
				}{true, res.dry}
			}
			return struct {
				DryRun bool `json:"dry_run"`
				admin.ReplayResult
			}{false, res.run}
		},
		text: writeReplay,
	}.run(ctx, args, getenv, stdout, stderr)
}

func writeReplay(w io.Writer, req replayRequest, res replayResult) error {
	kv := newKeyValues(w)
	if res.dryRun {
		d := res.dry
		kv.add("dry run:", "nothing changed")
		kv.add("matched", "%d", d.Matched)
		if s := byStatus(d.ByStatus); s != "" {
			kv.add("by status", "%s", s)
		}
		kv.add("already queued", "%d (would be skipped)", d.AlreadyQueued)
		kv.add("would replay", "%d", d.WouldReplay)
		if d.MaxID > 0 {
			kv.add("newest match", "%d (--max-id %d replays only what this dry run saw)", d.MaxID, d.MaxID)
		}
		if err := kv.flush(); err != nil {
			return err
		}
		if len(d.Sample) > 0 {
			fmt.Fprintf(w, "\nfirst %d by id:\n", len(d.Sample))
			return writeSummaries(w, d.Sample)
		}
		return nil
	}
	r := res.run
	kv.add("batch id", "%s", r.BatchID)
	kv.add("matched", "%d", r.Matched)
	kv.add("replayed", "%d", r.Replayed)
	kv.add("skipped", "%d (already queued)", r.Skipped)
	kv.add("batches", "%d", r.Batches)
	kv.add("duration", "%s", r.Duration.Round(time.Millisecond))
	if r.Skipped > 0 {
		more := ""
		if r.Skipped > len(r.SkippedIDs) {
			more = fmt.Sprintf(" (and %d more)", r.Skipped-len(r.SkippedIDs))
		}
		kv.add("skipped ids", "%s%s", admin.JoinIDs(r.SkippedIDs, " "), more)
	}
	if r.LimitReached {
		kv.add("limit", "reached (--limit %d): run again to replay more", req.Limit)
	}
	if r.Interrupted {
		kv.add("interrupted", "yes: %d replayed before it, the batch in flight rolled back", r.Replayed)
	}
	return kv.flush()
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

// byStatus renders counts by status as "failed 4, done 2", in the
// statuses' order; "" when there are none.
func byStatus(m map[envelope.Status]int) string {
	var parts []string
	for _, st := range envelope.Statuses() {
		if n := m[st]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", st, n))
		}
	}
	return strings.Join(parts, ", ")
}
