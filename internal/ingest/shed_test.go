package ingest_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/ingest"
	"github.com/inboxhq/inbox/internal/labels"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/provider"
	"github.com/inboxhq/inbox/internal/webhooktest"
)

// While the delivery being stored has waited past ShedAfter (its insert held
// at a lock on the dedup keys), a new delivery is refused at once with 503,
// Retry-After and status overloaded, counted with reason store_behind,
// instead of queueing behind it for its deadline; nothing of it is stored.
// Once the lock goes, the waiting delivery is stored and the refused one's
// resend is too.
func TestStoreBehindRefusesNewDeliveriesAtOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	var mu sync.Mutex
	reasons := map[labels.IngestOutcome][]string{}
	b := serve(t, pool, ingest.Options{
		StoreTimeout: 20 * time.Second, ShedAfter: 200 * time.Millisecond,
		Observe: func(_ string, o labels.IngestOutcome, reason string, _ time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			reasons[o] = append(reasons[o], reason)
		},
	})
	ctx := context.Background()
	tx := pgtest.Tx(t, pool)
	_, err := tx.Exec(ctx, "LOCK TABLE envelope_key IN EXCLUSIVE MODE")
	require.NoError(t, err)

	source, first := sample(provider.Standard, "msg_held")
	held := sendInBackground(t, b.url+"/webhooks/"+source, first)
	pgtest.Eventually(t, 10*time.Second, "the first delivery to wait past ShedAfter", func() (bool, string) {
		age := b.store.QueueAge()
		return age > 200*time.Millisecond, fmt.Sprintf("store queue age %s", age)
	})

	_, second := sample(provider.Standard, "msg_refused")
	r := b.send(t, source, second)
	require.Equal(t, http.StatusServiceUnavailable, r.code, r.raw)
	require.Equal(t, "5", r.header.Get("Retry-After"))
	require.Equal(t, "overloaded", r.Status)
	require.Contains(t, r.Error, "storage is behind")
	require.Len(t, held, 0, "the first delivery is still waiting: the refusal did not wait for it")
	mu.Lock()
	require.Equal(t, []string{string(labels.RefusedStoreBehind)}, reasons[labels.Overloaded])
	mu.Unlock()
	require.Contains(t, b.logs.String(), `"reason":"store_behind"`)

	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, http.StatusAccepted, <-held)
	require.Zero(t, b.store.QueueAge(), "nothing waits once the first is answered")
	second.SignedAt = time.Now()
	r = b.send(t, source, second)
	require.Equal(t, http.StatusAccepted, r.code, r.raw)
	env, jobs, _ := b.stored(t)
	require.Equal(t, [2]int{2, 2}, [2]int{env, jobs})
}

// sendInBackground sends d to url from a goroutine; the channel receives
// its answer's status code (0: no answer).
func sendInBackground(t *testing.T, url string, d webhooktest.Delivery) <-chan int {
	t.Helper()
	req, err := d.Request(context.Background(), url)
	require.NoError(t, err)
	answered := make(chan int, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- 0
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	return answered
}

// Over capacity, the queue is held short: while nothing was refused, a
// delivery finding the store queue older than ShedAfterOverload but under
// ShedAfter waits its turn (a blip); once one was refused past ShedAfter,
// a delivery finding it past ShedAfterOverload is refused at once,
// store_behind, though under ShedAfter; a second with none refused puts
// ShedAfter back. Nothing acknowledged is lost, and every refused
// delivery's resend is stored. Each hold begun is counted once, however
// often refusals renew it.
//
// Each held delivery waits on a key of its own that an open transaction
// inserted, so each has a store transaction of its own (the store runs
// two at once), and releasing the oldest leaves a younger one as the
// queue's age, under ShedAfter.
func TestOverloadHoldsTheStoreQueueShort(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	// The second delivery is sent once the first waited half of after:
	// when the first is released, the second's age is about after/2,
	// between the two limits.
	const after, overload = time.Second, 10 * time.Millisecond
	b := serve(t, pool, ingest.Options{StoreTimeout: 20 * time.Second, ShedAfter: after, ShedAfterOverload: overload})
	require.Equal(t, after, b.srv.ShedLimit())
	ctx := context.Background()
	source, _ := sample(provider.Standard, "msg_overload_0")
	url := b.url + "/webhooks/" + source
	waitAge := func(min time.Duration) {
		pgtest.Eventually(t, 10*time.Second, "the store queue older than "+min.String(), func() (bool, string) {
			age := b.store.QueueAge()
			return age > min, fmt.Sprintf("store queue age %s", age)
		})
	}
	holdKey := func(id string) pgx.Tx {
		tx := pgtest.Tx(t, pool)
		_, err := tx.Exec(ctx, "INSERT INTO envelope_key (delivery_id, source, envelope_id) VALUES ($1, $2, 0)", id, source)
		require.NoError(t, err)
		return tx
	}

	tx1, tx2 := holdKey("msg_overload_1"), holdKey("msg_overload_2")
	_, d1 := sample(provider.Standard, "msg_overload_1")
	held1 := sendInBackground(t, url, d1)
	waitAge(after / 2)
	_, d2 := sample(provider.Standard, "msg_overload_2")
	held2 := sendInBackground(t, url, d2)
	waitAge(after)
	require.Len(t, held2, 0, "past overload but nothing refused yet: the second delivery waits its turn")
	_, d3 := sample(provider.Standard, "msg_overload_3")
	r := b.send(t, source, d3)
	require.Equal(t, http.StatusServiceUnavailable, r.code, r.raw)
	require.Equal(t, overload, b.srv.ShedLimit(), "refusing: the shorter limit")
	require.Equal(t, int64(1), b.srv.OverloadHolds())

	require.NoError(t, tx1.Rollback(ctx))
	require.Equal(t, http.StatusAccepted, <-held1)
	waitAge(overload)
	_, d4 := sample(provider.Standard, "msg_overload_4")
	r = b.send(t, source, d4)
	require.Equal(t, http.StatusServiceUnavailable, r.code, r.raw)
	require.Equal(t, "overloaded", r.Status)
	require.Less(t, b.store.QueueAge(), after, "refused under --shed-after: for the shorter limit")
	require.Len(t, held2, 0)
	require.Equal(t, int64(1), b.srv.OverloadHolds(), "the hold renewed, not another")

	require.NoError(t, tx2.Rollback(ctx))
	require.Equal(t, http.StatusAccepted, <-held2)
	pgtest.Eventually(t, 10*time.Second, "--shed-after back a second after the last refusal", func() (bool, string) {
		l := b.srv.ShedLimit()
		return l == after, "limit " + l.String()
	})
	for _, d := range []webhooktest.Delivery{d3, d4} {
		d.SignedAt = time.Now()
		r = b.send(t, source, d)
		require.Equal(t, http.StatusAccepted, r.code, r.raw)
	}
	env, jobs, _ := b.stored(t)
	require.Equal(t, [2]int{4, 4}, [2]int{env, jobs})
}
