package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/inboxhq/inbox/internal/cli"
	"github.com/inboxhq/inbox/internal/durations"
	"github.com/inboxhq/inbox/internal/pg"
	"github.com/inboxhq/inbox/internal/retention"
)

// runPurge applies the retention policy once (what the periodic
// purge_envelopes job does) and prints its report. The flags read the same
// environment variables as run's periodic purge, so `worker purge --dry-run`
// previews exactly what the running workers will do.
func runPurge(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("worker purge", getenv, stderr)
	bodyAfter := fs.Duration("body-after", "WORKER_PURGE_BODY_AFTER", retention.DefaultBodyAfter,
		"drop the body and payload of done/ignored envelopes processed longer ago than this")
	deleteAfter := fs.Duration("delete-after", "WORKER_PURGE_DELETE_AFTER", retention.DefaultDeleteAfter,
		"delete done/ignored envelope rows (tombstones) processed longer ago than this, with their attempts, replays, conflicts and duplicates; at least --body-after")
	batchSize := fs.Int("batch-size", "WORKER_PURGE_BATCH_SIZE", retention.DefaultBatchSize, "envelopes changed per transaction")
	dryRun := fs.Bool("dry-run", false, "count what would change, change nothing")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: worker purge [flags]

Drops the bodies of old done/ignored envelopes and deletes older tombstones,
in batches. Never touches pending or failed envelopes, nor envelopes a ledger
transaction references. Reads DATABASE_URL.

`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("purge: unexpected argument %q", fs.Arg(0))}
	}
	// Zero means "the default" to retention.Config; on the command line it is
	// a mistake, so refuse it here.
	switch {
	case *bodyAfter <= 0:
		return usageError{fmt.Errorf("purge: --body-after must be positive, got %s", *bodyAfter)}
	case *deleteAfter <= 0:
		return usageError{fmt.Errorf("purge: --delete-after must be positive, got %s", *deleteAfter)}
	case *batchSize <= 0:
		return usageError{fmt.Errorf("purge: --batch-size must be positive, got %d", *batchSize)}
	}
	cfg, err := retention.Config{BodyAfter: *bodyAfter, DeleteAfter: *deleteAfter, BatchSize: *batchSize, DryRun: *dryRun}.WithDefaults()
	if err != nil {
		return usageError{fmt.Errorf("purge: %w", err)}
	}

	pool, err := pg.Open(ctx, getenv("DATABASE_URL"), pg.Options{MaxConns: 2, ApplicationName: "inbox-purge"})
	if err != nil {
		return err
	}
	defer pool.Close()
	rep, err := retention.Purge(ctx, pool, cfg)
	if err != nil && errors.Is(err, retention.ErrInvalidConfig) {
		return usageError{fmt.Errorf("purge: %w", err)}
	}
	if err != nil && rep.Now.IsZero() {
		return fmt.Errorf("purge: %w", err) // nothing happened: no report
	}
	// A purge cut short still committed its batches: report them, then fail.
	if perr := printPurgeReport(stdout, cfg, rep, *asJSON); perr != nil {
		return perr
	}
	if err != nil {
		return fmt.Errorf("purge stopped early (the batches reported above are committed; run it again to finish): %w", err)
	}
	return nil
}

// purgeOutput is the JSON report: the configuration applied and the counts.
type purgeOutput struct {
	BodyAfter   string `json:"body_after"`
	DeleteAfter string `json:"delete_after"`
	BatchSize   int    `json:"batch_size"`
	retention.Report
}

func printPurgeReport(w io.Writer, cfg retention.Config, rep retention.Report, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(purgeOutput{
			BodyAfter: cfg.BodyAfter.String(), DeleteAfter: cfg.DeleteAfter.String(), BatchSize: cfg.BatchSize, Report: rep,
		})
	}
	ts := func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }
	verb := func(did, would string) string {
		if rep.DryRun {
			return would
		}
		return did
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if rep.DryRun {
		fmt.Fprintln(tw, "dry run: nothing was changed; counts are what a purge would change now")
	}
	fmt.Fprintf(tw, "bodies %s\t%d\tdone/ignored, processed before %s (body-after %s)\n", verb("dropped", "to drop"), rep.BodiesDropped, ts(rep.BodyCutoff), durations.Format(cfg.BodyAfter))
	fmt.Fprintf(tw, "envelopes %s\t%d\tdone/ignored, processed before %s (delete-after %s)\n", verb("deleted", "to delete"), rep.EnvelopesDeleted, ts(rep.DeleteCutoff), durations.Format(cfg.DeleteAfter))
	fmt.Fprintf(tw, "  attempts\t%d\n", rep.AttemptsDeleted)
	fmt.Fprintf(tw, "  replays\t%d\n", rep.ReplaysDeleted)
	fmt.Fprintf(tw, "  conflicts\t%d\n", rep.ConflictsDeleted)
	fmt.Fprintf(tw, "  duplicates\t%d\n", rep.DuplicatesDeleted)
	fmt.Fprintf(tw, "batches\t%d\tof up to %d envelopes, one transaction each\n", rep.Batches, cfg.BatchSize)
	return tw.Flush()
}
