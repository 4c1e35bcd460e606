package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDrillTwoIngestsTwoWorkers: two ingest and two worker processes on one
// database, every delivery sent four times at once, two copies to each
// ingest, so duplicates race each other across processes (and business
// duplicates, one payment under two delivery ids, race across workers).
// Exactly one copy of each delivery may get 202, the others 200; each
// envelope is finished once, by one of the workers.
func TestDrillTwoIngestsTwoWorkers(t *testing.T) {
	t.Parallel()
	d := newDrill(t, "two_ingests_two_workers")
	n := scaled(t, 150, 2000)

	ing1, url1 := d.startIngest("127.0.0.1:0")
	ing2, url2 := d.startIngest("127.0.0.1:0")
	w1, w2 := d.startWorker(), d.startWorker()
	l := newLoad(d, drillDeliveries("tw", n), func(copy, attempt int) string {
		if (copy+attempt)%2 == 0 {
			return url1
		}
		return url2
	})
	l.copies = 4
	l.senders = scaled(t, 16, 32)
	l.wait(l.start(5 * time.Minute))

	f := d.verify(l, scaledDuration(t, 2*time.Minute, 5*time.Minute))
	l.mu.Lock()
	for i, c := range l.accepted {
		if c != 1 {
			t.Errorf("delivery %s got %d 202s, want 1", l.items[i].id(), c)
		}
	}
	l.mu.Unlock()
	// Which worker finished what (both are expected to have some, not
	// required: River hands jobs to whichever fetches first).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := d.pool.Query(ctx, `SELECT worker, count(*) FROM envelope_attempt
		WHERE outcome IN ('done', 'ignored', 'failed') GROUP BY 1 ORDER BY 1`)
	require.NoError(t, err)
	workers := 0
	for rows.Next() {
		var name string
		var c int64
		require.NoError(t, rows.Scan(&name, &c))
		workers++
		f.set(fmt.Sprintf("finished_by_worker_%d", workers), c)
	}
	require.NoError(t, rows.Err())
	f.set("copies", l.copies)
	for _, p := range []*proc{ing1, ing2, w1, w2} {
		require.NoError(t, p.stop(30*time.Second), "%s exits 0 on SIGTERM", p.name)
	}
	d.report(f)
}
