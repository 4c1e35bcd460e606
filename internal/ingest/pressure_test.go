package ingest_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/ingest"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/provider"
)

// pressureRig serves ingest with a 50 ms pressure target and interval,
// a 20 s store deadline, shedAfter and surge (Options.PressureSurge), and
// listens on envelope.PressureChannel as a worker does; ctx ends with the
// test.
func pressureRig(t *testing.T, url string, pool *pgxpool.Pool, shedAfter time.Duration, surge float64) (*bundle, context.Context, *pgx.Conn) {
	t.Helper()
	b := serve(t, pool, ingest.Options{
		StoreTimeout: 20 * time.Second, ShedAfter: shedAfter,
		PressureTarget: 50 * time.Millisecond, PressureInterval: 50 * time.Millisecond,
		PressureSurge: surge,
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	listener, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { listener.Close(context.Background()) })
	_, err = listener.Exec(ctx, "LISTEN "+pgx.Identifier{envelope.PressureChannel}.Sanitize())
	require.NoError(t, err)
	return b, ctx, listener
}

// held is a delivery whose store waits at a lock on the dedup keys.
type held struct {
	ctx      context.Context
	tx       pgx.Tx
	answered <-chan int
}

// holdADelivery takes an exclusive lock on envelope_key and sends a
// Standard Webhooks delivery id in the background: its insert waits.
func holdADelivery(t *testing.T, ctx context.Context, b *bundle, id string) held {
	t.Helper()
	tx := pgtest.Tx(t, b.pool)
	_, err := tx.Exec(ctx, "LOCK TABLE envelope_key IN EXCLUSIVE MODE")
	require.NoError(t, err)
	source, d := sample(provider.Standard, id)
	return held{ctx: ctx, tx: tx, answered: sendInBackground(t, b.url+"/webhooks/"+source, d)}
}

// stored lets the held delivery go and checks that it is then accepted.
func (h held) stored(t *testing.T) {
	t.Helper()
	require.NoError(t, h.tx.Rollback(h.ctx))
	select {
	case code := <-h.answered:
		require.Equal(t, http.StatusAccepted, code)
	case <-time.After(20 * time.Second):
		t.Fatal("the held delivery was never answered")
	}
}

// While a delivery being stored waits past the pressure target (its insert
// held at a lock on the dedup keys), ingest notifies
// envelope.PressureChannel, where workers listen (worker.Yield), and says
// so on its gauge; it refuses nothing for it. Idle before, and once the
// lock goes and the delivery is stored, the gauge is back at 0.
func TestStorePressureNotifiesWorkers(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := pgtest.OpenPool(t, url)
	b, ctx, listener := pressureRig(t, url, pool, -1, -1) // surges: TestStoreSurgeTellsWorkers

	var mu sync.Mutex
	var states []bool
	state := func() []bool {
		mu.Lock()
		defer mu.Unlock()
		return append([]bool(nil), states...)
	}
	go b.srv.RunPressure(ctx, func(on bool) {
		mu.Lock()
		defer mu.Unlock()
		states = append(states, on)
	})
	pgtest.Eventually(t, 10*time.Second, "a few checks while idle", func() (bool, string) {
		return len(state()) >= 3, ""
	})
	require.NotContains(t, state(), true, "no pressure while nothing is stored")

	release := holdADelivery(t, ctx, b, "msg_held_for_pressure")
	answered := release.answered

	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	n, err := listener.WaitForNotification(wctx)
	require.NoError(t, err, "a notification while the delivery is held")
	require.Equal(t, envelope.PressureChannel, n.Channel)
	require.Empty(t, n.Payload, "plain pressure: nothing was refused")
	require.Contains(t, state(), true, "the gauge says pressure")
	require.Len(t, answered, 0, "the held delivery waits: pressure refuses nothing")
	require.Zero(t, b.srv.PressureSurges(), "--pressure-surge negative: never a surge")

	release.stored(t)
	pgtest.Eventually(t, 10*time.Second, "the gauge back at 0 once the queue is empty", func() (bool, string) {
		s := state()
		return !s[len(s)-1], ""
	})
}

// Once a delivery is refused because the store is behind (--shed-after),
// the next pressure notification says so (envelope.PressureRefusing):
// workers yield then even when they keep up. Before it, while the held
// delivery only waits, the notifications are plain pressure.
func TestStoreRefusalsTellWorkers(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := pgtest.OpenPool(t, url)
	b, ctx, listener := pressureRig(t, url, pool, 300*time.Millisecond, -1)
	go b.srv.RunPressure(ctx, nil)

	release := holdADelivery(t, ctx, b, "msg_held_before_refusals")
	next := func() string {
		t.Helper()
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		defer wcancel()
		n, err := listener.WaitForNotification(wctx)
		require.NoError(t, err)
		return n.Payload
	}
	require.Empty(t, next(), "the held delivery only waits: plain pressure")
	pgtest.Eventually(t, 10*time.Second, "the store queue past --shed-after", func() (bool, string) {
		return b.store.QueueAge() > 300*time.Millisecond, ""
	})
	source, refused := sample(provider.Standard, "msg_refused_store_behind")
	require.Equal(t, http.StatusServiceUnavailable, b.send(t, source, refused).code)
	told := false
	for deadline := time.Now().Add(10 * time.Second); !told && time.Now().Before(deadline); {
		p := next()
		told = p == envelope.PressureRefusing
		if !told {
			require.Empty(t, p, "a notification is plain pressure or says deliveries are refused")
		}
	}
	require.True(t, told, "within 10 s of the refusal, a notification said deliveries are refused")
	release.stored(t)
}

// Under pressure, a burst offered far over the calm rate (here from idle)
// is a surge, and the notifications say so (envelope.PressureSurge):
// workers then yield at once, even those keeping up. The deliveries only
// wait, and are all stored once the store is free.
func TestStoreSurgeTellsWorkers(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := pgtest.OpenPool(t, url)
	b, ctx, listener := pressureRig(t, url, pool, -1, 0) // the default surge ratio
	go b.srv.RunPressure(ctx, nil)

	release := holdADelivery(t, ctx, b, "msg_held_before_surge")
	var burst []<-chan int
	for i := range 20 {
		source, d := sample(provider.Standard, fmt.Sprintf("msg_surge_%02d", i))
		burst = append(burst, sendInBackground(t, b.url+"/webhooks/"+source, d))
	}
	told := false
	for deadline := time.Now().Add(10 * time.Second); !told && time.Now().Before(deadline); {
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := listener.WaitForNotification(wctx)
		wcancel()
		require.NoError(t, err)
		told = n.Payload == envelope.PressureSurge
		if !told {
			require.Empty(t, n.Payload, "nothing refused: plain pressure or a surge")
		}
	}
	require.True(t, told, "within 10 s of the burst, a notification said the load surged")
	// The held delivery keeps the pressure standing, so the surge never
	// ends meanwhile: begun once, however many checks find it.
	for range 3 {
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := listener.WaitForNotification(wctx)
		wcancel()
		require.NoError(t, err)
		require.Equal(t, envelope.PressureSurge, n.Payload, "the surge lasts while the pressure does")
	}
	require.Equal(t, int64(1), b.srv.PressureSurges(), "one surge begun, counted once")
	release.stored(t)
	for i, answered := range burst {
		require.Equal(t, http.StatusAccepted, <-answered, "delivery %d of the burst", i)
	}
	require.Equal(t, 21, pgtest.Count(t, pool, `SELECT count(*) FROM envelope`))
}
