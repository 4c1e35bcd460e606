package ingest_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/ingest"
	"github.com/inboxhq/inbox/internal/labels"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/provider"
)

// While the delivery being stored has waited past ShedAfter (its insert held
// at a lock on the dedup keys) but not twice it, a new delivery queues: one
// slow commit is a blip, and the delivery makes its deadline. Past twice
// ShedAfter a new delivery is refused at once with 503, Retry-After and
// status overloaded, counted with reason store_behind, instead of queueing
// behind it for its deadline; nothing of it is stored, and the server says
// it is shedding. Once the lock goes, the waiting deliveries are stored and
// the refused one's resend is too.
func TestStoreBehindRefusesNewDeliveriesAtOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	var mu sync.Mutex
	reasons := map[labels.IngestOutcome][]string{}
	logs := &syncBuffer{}
	logger := slogJSON(logs)
	rc, err := envelope.NewInsertClient(pool, logger)
	require.NoError(t, err)
	store := envelope.NewStore(pool, rc)
	// A limit of a second: the blip's window (1-2 s of queue age) is wide
	// enough for a slow machine to send into it.
	const limit = time.Second
	srv, err := ingest.New(sourcesOf(t, loadConfig(t)), store, logger, ingest.Options{
		StoreTimeout: 20 * time.Second, ShedAfter: limit,
		Observe: func(_ string, o labels.IngestOutcome, reason string, _ time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			reasons[o] = append(reasons[o], reason)
		},
	})
	require.NoError(t, err)
	b := &bundle{pool: pool, url: newServer(t, srv), logs: logs}
	ctx := context.Background()
	tx := pgtest.Tx(t, pool)
	_, err = tx.Exec(ctx, "LOCK TABLE envelope_key IN EXCLUSIVE MODE")
	require.NoError(t, err)

	source, _ := sample(provider.Standard, "msg_held")
	sendAsync := func(id string) <-chan int {
		_, d := sample(provider.Standard, id)
		req, err := d.Request(ctx, b.url+"/webhooks/"+source)
		require.NoError(t, err)
		code := make(chan int, 1)
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				code <- 0
				return
			}
			resp.Body.Close()
			code <- resp.StatusCode
		}()
		return code
	}
	held := sendAsync("msg_held")
	pgtest.Eventually(t, 10*time.Second, "the first delivery to wait past ShedAfter", func() (bool, string) {
		age := store.QueueAge()
		return age > limit, fmt.Sprintf("store queue age %s", age)
	})
	require.False(t, srv.Shedding())
	queued := sendAsync("msg_queued")
	pgtest.Eventually(t, 10*time.Second, "the second delivery let through in a blip", func() (bool, string) {
		select {
		case code := <-queued:
			return false, fmt.Sprintf("answered %d at once: it should have queued", code)
		default:
		}
		return srv.StoreBlips() == 1, fmt.Sprintf("%d let through, store queue age %s", srv.StoreBlips(), store.QueueAge())
	})
	pgtest.Eventually(t, 10*time.Second, "the first delivery to wait past twice ShedAfter", func() (bool, string) {
		age := store.QueueAge()
		return age > 2*limit, fmt.Sprintf("store queue age %s", age)
	})
	require.Len(t, queued, 0, "a delivery sent while the age was between ShedAfter and twice it queues: not refused")

	_, second := sample(provider.Standard, "msg_refused")
	r := b.send(t, source, second)
	require.Equal(t, http.StatusServiceUnavailable, r.code, r.raw)
	require.Equal(t, "5", r.header.Get("Retry-After"))
	require.Equal(t, "overloaded", r.Status)
	require.Contains(t, r.Error, "storage is behind")
	require.Len(t, held, 0, "the first delivery is still waiting: the refusal did not wait for it")
	require.True(t, srv.Shedding())
	mu.Lock()
	require.Equal(t, []string{string(labels.RefusedStoreBehind)}, reasons[labels.Overloaded])
	mu.Unlock()
	require.Contains(t, logs.String(), `"reason":"store_behind"`)

	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, http.StatusAccepted, <-held)
	require.Equal(t, http.StatusAccepted, <-queued)
	require.EqualValues(t, 1, srv.StoreBlips(), "only the queued delivery was let through in a blip")
	require.Zero(t, store.QueueAge(), "nothing waits once the first is answered")
	second.SignedAt = time.Now()
	r = b.send(t, source, second)
	require.Equal(t, http.StatusAccepted, r.code, r.raw)
	env, jobs, _ := b.stored(t)
	require.Equal(t, [2]int{3, 3}, [2]int{env, jobs})
}
