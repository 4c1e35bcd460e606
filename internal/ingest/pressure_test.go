package ingest_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/ingest"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/provider"
)

// While a delivery being stored waits past the pressure target (its insert
// held at a lock on the dedup keys), ingest notifies
// envelope.PressureChannel, where workers listen (worker.Yield), and says
// so on its gauge; it refuses nothing for it. Idle before, and once the
// lock goes and the delivery is stored, the gauge is back at 0.
func TestStorePressureNotifiesWorkers(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := pgtest.OpenPool(t, url)
	b := serve(t, pool, ingest.Options{
		StoreTimeout: 20 * time.Second, ShedAfter: -1,
		PressureTarget: 50 * time.Millisecond, PressureInterval: 50 * time.Millisecond,
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	listener, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { listener.Close(context.Background()) })
	_, err = listener.Exec(ctx, "LISTEN "+pgx.Identifier{envelope.PressureChannel}.Sanitize())
	require.NoError(t, err)

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

	tx := pgtest.Tx(t, pool)
	_, err = tx.Exec(ctx, "LOCK TABLE envelope_key IN EXCLUSIVE MODE")
	require.NoError(t, err)
	source, held := sample(provider.Standard, "msg_held_for_pressure")
	answered := sendInBackground(t, b.url+"/webhooks/"+source, held)

	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	n, err := listener.WaitForNotification(wctx)
	require.NoError(t, err, "a notification while the delivery is held")
	require.Equal(t, envelope.PressureChannel, n.Channel)
	require.Contains(t, state(), true, "the gauge says pressure")
	require.Len(t, answered, 0, "the held delivery waits: pressure refuses nothing")

	require.NoError(t, tx.Rollback(ctx))
	select {
	case code := <-answered:
		require.Equal(t, http.StatusAccepted, code)
	case <-time.After(20 * time.Second):
		t.Fatal("the held delivery was never answered")
	}
	pgtest.Eventually(t, 10*time.Second, "the gauge back at 0 once the queue is empty", func() (bool, string) {
		s := state()
		return !s[len(s)-1], ""
	})
}
