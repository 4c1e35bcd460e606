package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxhq/inbox/internal/cli"
	"github.com/inboxhq/inbox/internal/durations"
	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/pg"
	"github.com/inboxhq/inbox/internal/retention"
)

const purgeUsage = `usage: worker purge [flags]

Applies the retention policy once. Drops each day's envelopes whole (with
their attempts, duplicates and conflicts) once they were stored longer ago
than --delete-after, and each day's bodies whole once stored longer ago than
--body-after; failed envelopes keep a copy of their body until their day
goes, and a day holding a pending envelope is kept. Bodies held in envelope
rows (stored before migration 00200) go in batches. Reads DATABASE_URL.

`

// runPurge applies the retention policy once (what the periodic
// purge_envelopes job does) and prints its report. The flags read the same
// environment variables as run's periodic purge, so `worker purge --dry-run`
// previews exactly what the running workers will do.
func runPurge(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return adminCommand[retention.Config, retention.Report]{
		name:     "purge",
		usage:    purgeUsage,
		jsonHelp: "print the report as JSON",
		pool:     pg.Options{MaxConns: 2, ApplicationName: "inbox-purge"},
		flags: func(fs *cli.Flags) func([]string) (retention.Config, error) {
			bodyAfter := fs.Duration("body-after", "WORKER_PURGE_BODY_AFTER", retention.DefaultBodyAfter,
				"drop the bodies of envelopes stored longer ago than this, a day at a time (failed envelopes keep theirs); bodies held in rows: of done/ignored envelopes processed longer ago")
			deleteAfter := fs.Duration("delete-after", "WORKER_PURGE_DELETE_AFTER", retention.DefaultDeleteAfter,
				"drop the days of envelopes (tombstones) stored longer ago than this, with their attempts, replays, conflicts and duplicates; at least --body-after")
			batchSize := fs.Int("batch-size", "WORKER_PURGE_BATCH_SIZE", retention.DefaultBatchSize, "envelopes changed per transaction")
			dryRun := fs.Bool("dry-run", false, "count what would change, change nothing")
			return func([]string) (retention.Config, error) {
				// Zero means "the default" to retention.Config; typed on
				// the command line it is a mistake. The rest is the
				// library's to check.
				switch {
				case *bodyAfter == 0:
					return retention.Config{}, fmt.Errorf("--body-after must be positive, got %s", *bodyAfter)
				case *deleteAfter == 0:
					return retention.Config{}, fmt.Errorf("--delete-after must be positive, got %s", *deleteAfter)
				case *batchSize == 0:
					return retention.Config{}, fmt.Errorf("--batch-size must be positive, got %d", *batchSize)
				}
				return retention.Config{BodyAfter: *bodyAfter, DeleteAfter: *deleteAfter, BatchSize: *batchSize, DryRun: *dryRun}.WithDefaults()
			}
		},
		exec: func(ctx context.Context, pool *pgxpool.Pool, cfg retention.Config) (retention.Report, error) {
			rep, err := retention.Purge(ctx, pool, cfg)
			switch {
			case err == nil:
				return rep, nil
			case errors.Is(err, retention.ErrInvalidConfig):
				return rep, cli.UsageError{Err: fmt.Errorf("purge: %w", err)}
			case rep.Now.IsZero():
				return rep, fmt.Errorf("purge: %w", err) // nothing happened: no report
			default:
				// A purge cut short still committed its batches: they are
				// reported, then it fails.
				return rep, fmt.Errorf("purge stopped early (the batches reported above are committed; run it again to finish): %w", err)
			}
		},
		partial: func(rep retention.Report) bool { return !rep.Now.IsZero() },
		json: func(cfg retention.Config, rep retention.Report) any {
			return purgeOutput{BodyAfter: cfg.BodyAfter.String(), DeleteAfter: cfg.DeleteAfter.String(), BatchSize: cfg.BatchSize, Report: rep}
		},
		text: printPurgeReport,
	}.run(ctx, args, getenv, stdout, stderr)
}

// purgeOutput is the JSON report: the configuration applied and the counts.
type purgeOutput struct {
	BodyAfter   string `json:"body_after"`
	DeleteAfter string `json:"delete_after"`
	BatchSize   int    `json:"batch_size"`
	retention.Report
}

func printPurgeReport(w io.Writer, cfg retention.Config, rep retention.Report) error {
	ts := func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }
	verb := func(did, would string) string {
		if rep.DryRun {
			return would
		}
		return did
	}
	kv := newKeyValues(w)
	if rep.DryRun {
		kv.line("dry run: nothing was changed; counts are what a purge would change now")
	}
	kv.add("bodies "+verb("dropped", "to drop"), "%d\tdone/ignored, processed before %s (body-after %s)", rep.BodiesDropped, ts(rep.BodyCutoff), durations.Format(cfg.BodyAfter))
	for _, p := range rep.BodyPartitions {
		what := cli.Count(p.Envelopes, "done or ignored envelope", "done or ignored envelopes")
		if p.Outcome == envelope.PartitionHeld {
			what = cli.Count(p.Envelopes, "pending envelope holds", "pending envelopes hold") + " it: process or replay them"
		}
		kv.add("  bodies of "+p.Name, "%s\t%s, stored before %s", p.Outcome, what, ts(p.UpperAt))
	}
	kv.add("envelopes "+verb("deleted", "to delete"), "%d\tin partitions stored before %s (delete-after %s), with their attempts, duplicates, conflicts, replays", rep.EnvelopesDeleted, ts(rep.DeleteCutoff), durations.Format(cfg.DeleteAfter))
	for _, p := range rep.Partitions {
		what := cli.Count(p.Envelopes, "envelope", "envelopes")
		if p.Outcome == envelope.PartitionHeld {
			what = cli.Count(p.Envelopes, "pending envelope holds", "pending envelopes hold") + " it and every newer one: process or replay them"
		}
		kv.add("  partition "+p.Name, "%s\t%s, stored before %s", p.Outcome, what, ts(p.UpperAt))
	}
	kv.add("keys swept", "%d\tdedup keys of deleted envelopes", rep.KeysSwept)
	kv.add("batches", "%d\tof up to %d bodies, one transaction each", rep.Batches, cfg.BatchSize)
	return kv.flush()
}
