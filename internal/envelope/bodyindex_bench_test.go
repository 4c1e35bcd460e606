package envelope_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/pgtest"
)

// BenchmarkBodyIndexIngest measures what the GIN index on every body
// (envelope_body_payload_idx, migration 00203) costs ingest's store: 64
// senders store Stripe payment_intent.succeeded events (2 KB, 52 values:
// handlers' fixture, each with its own ids and amount) through the group
// commit, into a fresh database with the index as migrated, with it but
// fastupdate off (no pending list), and without it. Run it several times
// rather than with -count, so that the variants alternate and drift on a
// shared machine hits each:
//
//	for i in 1 2 3; do go test -run '^$' -bench BodyIndexIngest -benchtime 20000x ./internal/envelope; done
//
// It reports the store's time per delivery (ns/op, from the senders'
// side), the WAL written per delivery (wal-B/delivery, from
// pg_current_wal_lsn: run it alone on the server), and the index's size per
// delivery (index-B/delivery).
func BenchmarkBodyIndexIngest(b *testing.B) {
	fixture, err := os.ReadFile("../handlers/testdata/stripe_payment_intent_succeeded.json")
	require.NoError(b, err)
	for _, index := range []string{"gin", "gin-fastupdate-off", "none"} {
		b.Run("index="+index, func(b *testing.B) {
			ctx := context.Background()
			pool := pgtest.NewPool(b)
			switch index {
			case "none":
				_, err := pool.Exec(ctx, `DROP INDEX envelope_body_payload_idx`)
				require.NoError(b, err)
			case "gin-fastupdate-off": // each body's keys into the index at once, no pending list
				_, err := pool.Exec(ctx, `DO $$
					DECLARE i regclass;
					BEGIN
						FOR i IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'envelope_body_payload_idx'::regclass LOOP
							EXECUTE format('ALTER INDEX %s SET (fastupdate = off)', i);
						END LOOP;
					END $$`)
				require.NoError(b, err)
			}
			rc, err := envelope.NewInsertClient(pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
			require.NoError(b, err)
			store := envelope.NewStore(pool, rc)
			var n atomic.Int64
			before := walLSN(b, pool)
			b.SetParallelism(32) // 64 senders on two cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					id := fmt.Sprintf("%024d", i)
					body := strings.NewReplacer("3PmB2xLkdIwHu7ix0Q4Zc5Yv", id, "3PmB2xLkdIwHu7ix0rQXk1aB", id,
						`"amount": 1000`, fmt.Sprintf(`"amount": %d`, 100+i%9000)).Replace(string(fixture))
					_, err := store.Insert(ctx, envelope.NewDelivery{Source: "stripe", Provider: "stripe", DeliveryID: "evt_" + id,
						EventType: "payment_intent.succeeded", Body: []byte(body), Payload: []byte(body), Headers: map[string]string{}})
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			wal := walLSN(b, pool) - before
			var size int64
			if index != "none" {
				require.NoError(b, pool.QueryRow(ctx, `SELECT coalesce(sum(pg_relation_size(i.inhrelid)), 0)::bigint FROM pg_inherits i
					WHERE i.inhparent = 'envelope_body_payload_idx'::regclass`).Scan(&size))
			}
			b.ReportMetric(float64(wal)/float64(b.N), "wal-B/delivery")
			b.ReportMetric(float64(size)/float64(b.N), "index-B/delivery")
		})
	}
}

// walLSN is the server's current WAL insert position, in bytes.
func walLSN(b *testing.B, pool *pgxpool.Pool) int64 {
	var lsn int64
	require.NoError(b, pool.QueryRow(context.Background(), `SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint`).Scan(&lsn))
	return lsn
}
