package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// TestDrillPartitions: envelopes stored across partition boundaries under
// load, then their partitions dropped under load.
//
// The drill's cluster is re-partitioned into 1-second partitions for the
// load's minute (the layout allows any whole seconds; the worker makes days
// or hours), so deliveries, their provider retries and their workers' jobs
// cross a boundary every second. Phase A sends half the deliveries, paced
// across many boundaries, and waits until they are processed. Phase B sends
// the other half while every partition holding phase A is dropped, oldest
// first, as retention drops them (envelope_partition_drop: a lock wait of
// 500 ms, retried when busy). Then the usual invariants, phase A's
// deliveries checked through the ledger postings that outlive their
// envelopes: 0 lost, 0 doubled, every business key posted once.
func TestDrillPartitions(t *testing.T) {
	t.Parallel()
	d := newDrill(t, "partitions")
	n := scaled(t, 200, 2000)
	half := n / 2 / 10 * 10 // whole groups of ten (a payment with its refund and resend)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// Today's and the next days' partitions are empty: drop them, and lay
	// out 1-second ones from now on for a minute, then whole hours.
	_, err := d.pool.Exec(ctx, `SELECT envelope_partition_drop(name, 'infinity') FROM envelope_partition WHERE dropped_at IS NULL ORDER BY upper_id`)
	require.NoError(t, err)
	for _, q := range []string{
		// from the hour's start to 2 s from now, then 1-second partitions for a minute,
		// then the rest of the next hour
		`SELECT envelope_partition_create(date_trunc('hour', clock_timestamp()), date_trunc('second', clock_timestamp()) + interval '2 s')`,
		`SELECT count(envelope_partition_create(t, t + interval '1 s'))
		   FROM (SELECT max(upper_at) AS s FROM envelope_partition WHERE dropped_at IS NULL) m, generate_series(m.s, m.s + interval '59 s', interval '1 s') t`,
		`SELECT envelope_partition_create(max(upper_at), date_trunc('hour', max(upper_at)) + interval '2 hours') FROM envelope_partition WHERE dropped_at IS NULL`,
	} {
		_, err := d.pool.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	parts, err := d.scalar(`SELECT count(*) FROM envelope_partition WHERE dropped_at IS NULL`)
	require.NoError(t, err)
	require.Equal(t, int64(62), parts)

	_, url := d.startIngest("127.0.0.1:0")
	w := d.startWorker()
	l := newLoad(d, drillDeliveries("pt", n), func(int, int) string { return url })
	l.senders = 8
	l.rate = float64(half) / 8 // phase A over about 8 s: 8 boundaries or more

	l.runRange(ctx, 0, half)
	require.Equal(t, int64(half), l.acked.Load(), "phase A acknowledged")
	d.waitProcessed(int64(half)-1, 2*time.Minute)
	d.waitDrained(2 * time.Minute)
	crossed, err := d.scalar(`SELECT count(DISTINCT tableoid) FROM envelope`)
	require.NoError(t, err)
	require.GreaterOrEqual(t, crossed, int64(6), "phase A spread over partitions")
	// Phase B starts in a partition of its own.
	var bStart time.Time
	require.NoError(t, d.pool.QueryRow(ctx, `SELECT min(upper_at) FROM envelope_partition
		WHERE dropped_at IS NULL AND upper_at > clock_timestamp()`).Scan(&bStart))
	eventually(t, 10*time.Second, "the database's clock past phase B's partition start", func(ctx context.Context) (bool, string) {
		var past bool
		if err := d.pool.QueryRow(ctx, `SELECT clock_timestamp() >= $1`, bStart).Scan(&past); err != nil {
			return false, err.Error()
		}
		return past, "not yet"
	})

	loadB := make(chan struct{})
	go func() {
		defer close(loadB)
		l.runRange(ctx, half, n)
	}()
	outcomes := map[string]int{}
	var dropped int64
	for {
		var name string
		var upper time.Time
		err := d.pool.QueryRow(ctx, `SELECT name, upper_at FROM envelope_partition WHERE dropped_at IS NULL ORDER BY upper_id LIMIT 1`).Scan(&name, &upper)
		require.NoError(t, err)
		if upper.After(bStart) {
			break
		}
		var outcome string
		var envelopes int64
		err = d.pool.QueryRow(ctx, `SELECT outcome, envelopes FROM envelope_partition_drop($1, $2)`, name, bStart).Scan(&outcome, &envelopes)
		if err != nil && isLockTimeout(err) {
			outcomes["busy"]++
			continue
		}
		require.NoError(t, err, "drop %s", name)
		require.Equal(t, "dropped", outcome, "partition %s", name)
		outcomes[outcome]++
		dropped += envelopes
	}
	<-loadB
	for i := range half {
		l.retired[i] = true
	}
	left, err := d.scalar(`SELECT count(*) FROM envelope WHERE id < envelope_id_at($1)`, bStart)
	require.NoError(t, err)
	require.Zero(t, left, "phase A's envelopes are gone")
	require.Equal(t, int64(half), dropped, "every phase A envelope was in a dropped partition")

	f := d.verify(l, 2*time.Minute)
	f.set("partitions_crossed", crossed)
	f.set("partitions_dropped", outcomes["dropped"])
	f.set("drops_busy", outcomes["busy"])
	require.NoError(t, w.stop(30*time.Second))
	d.report(f)
}

// isLockTimeout reports whether err is PostgreSQL's lock_not_available
// (a lock_timeout expired).
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}
