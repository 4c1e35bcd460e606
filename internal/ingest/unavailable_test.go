package ingest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/ingest"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/provider"
)

// The database ends or cancels ingest's statement mid-request (an operator's
// pg_terminate_backend or pg_cancel_backend, a server shutting down, a
// statement timeout): the delivery is not acknowledged, the answer is 503
// with Retry-After (not 500, which providers count toward disabling the
// endpoint), nothing is stored, and the sender's retry is stored.
func TestSessionEndedOrCancelledMidRequestIs503(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, fn, id string }{
		{"terminated", "pg_terminate_backend", "msg_terminated"},
		{"cancelled", "pg_cancel_backend", "msg_cancelled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			b := serve(t, pool, ingest.Options{StoreTimeout: 20 * time.Second})
			ctx := context.Background()
			// Hold the insert at a lock, so it is mid-statement when ended.
			tx := pgtest.Tx(t, pool)
			_, err := tx.Exec(ctx, "LOCK TABLE envelope IN ACCESS EXCLUSIVE MODE")
			require.NoError(t, err)

			source, d := sample(provider.Standard, tc.id)
			req, err := d.Request(ctx, b.url+"/webhooks/"+source)
			require.NoError(t, err)
			type answer struct {
				resp *http.Response
				err  error
			}
			done := make(chan answer, 1)
			go func() {
				resp, err := http.DefaultClient.Do(req)
				done <- answer{resp, err}
			}()
			var pid int
			pgtest.Eventually(t, 10*time.Second, "ingest's insert to wait on the lock", func() (bool, string) {
				// Not in tx: a transaction sees one snapshot of pg_stat_activity.
				err := pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity
					WHERE datname = current_database()
					  AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO envelope%'`).Scan(&pid)
				return err == nil, fmt.Sprintf("ingest's insert never waited on the lock: %v", err)
			})
			var ok bool
			require.NoError(t, pool.QueryRow(ctx, `SELECT `+tc.fn+`($1)`, pid).Scan(&ok))
			require.True(t, ok)
			var a answer
			select {
			case a = <-done:
			case <-time.After(15 * time.Second):
				t.Fatal("no answer after the session was ended")
			}
			require.NoError(t, a.err)
			defer a.resp.Body.Close()
			var body struct{ Status string }
			require.NoError(t, json.NewDecoder(a.resp.Body).Decode(&body))
			require.NoError(t, tx.Rollback(ctx))
			require.Equal(t, http.StatusServiceUnavailable, a.resp.StatusCode)
			require.Equal(t, "5", a.resp.Header.Get("Retry-After"))
			require.Equal(t, "unavailable", body.Status)
			env, jobs, _ := b.stored(t)
			require.Equal(t, [2]int{0, 0}, [2]int{env, jobs})

			d.SignedAt = time.Now()
			r := b.send(t, source, d)
			require.Equal(t, http.StatusAccepted, r.code, r.raw)
		})
	}
}
