package retention_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/inboxhq/inbox/internal/retention"
)

// A worker process registers PurgeWorker and the periodic job; River's leader
// inserts one purge an hour (and one at start), whichever process runs it.
func ExamplePeriodicJob() {
	ctx := context.Background()
	pool, err := openPool(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &retention.PurgeWorker{Pool: pool, Logger: slog.Default(), JobTimeout: time.Minute})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:       map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}},
		Workers:      workers,
		PeriodicJobs: []*river.PeriodicJob{retention.PeriodicJob(time.Hour, retention.PurgeArgs{BodyAfter: 30 * 24 * time.Hour, DeleteAfter: 90 * 24 * time.Hour})},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = client.Start(ctx)
}

// A one-off dry run: what would the default policy change now?
func ExamplePurge() {
	ctx := context.Background()
	pool, err := openPool(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	rep, err := retention.Purge(ctx, pool, retention.Config{DryRun: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("would drop %d bodies and delete %d envelopes\n", rep.BodiesDropped, rep.EnvelopesDeleted)
}

func openPool(ctx context.Context) (*pgxpool.Pool, error) {
	return pgxpool.New(ctx, "postgres://localhost/inbox")
}
