package audit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
	"github.com/inboxhq/inbox/internal/ledger"
	"github.com/inboxhq/inbox/internal/retention"
)

// seeder writes deliveries the way the system does: ingest's Store.Insert
// (envelope and River job in one transaction), then the worker's steps
// (envelope.Lock, ledger.Post, envelope.Finish or RecordAttempt in one
// transaction), without running River, so every row is deterministic.
type seeder struct {
	t     *testing.T
	ctx   context.Context
	pool  *pgxpool.Pool
	rc    *river.Client[pgx.Tx]
	store *envelope.Store
}

const workerName = "worker-1:4242"

func newSeeder(t *testing.T, pool *pgxpool.Pool) *seeder {
	t.Helper()
	rc, err := envelope.NewInsertClient(pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	return &seeder{t: t, ctx: context.Background(), pool: pool, rc: rc, store: envelope.NewStore(pool, rc)}
}

func (s *seeder) exec(sql string, args ...any) {
	s.t.Helper()
	_, err := s.pool.Exec(s.ctx, sql, args...)
	require.NoError(s.t, err, sql)
}

// receive stores a new delivery and returns its envelope id.
func (s *seeder) receive(source, provider, deliveryID, eventType string, body []byte, headers map[string]string) int64 {
	s.t.Helper()
	if headers == nil {
		headers = map[string]string{}
	}
	res, err := s.store.Insert(s.ctx, envelope.NewDelivery{
		Source: source, Provider: provider, DeliveryID: deliveryID, EventType: eventType,
		Body: body, Payload: body, Headers: headers,
	})
	require.NoError(s.t, err)
	require.False(s.t, res.Duplicate, "%s/%s", source, deliveryID)
	return res.EnvelopeID
}

// redeliver sends a delivery id again: the same body is a duplicate, another
// body a conflict.
func (s *seeder) redeliver(source, provider, deliveryID, eventType string, body []byte, wantDuplicate bool) {
	s.t.Helper()
	res, err := s.store.Insert(s.ctx, envelope.NewDelivery{
		Source: source, Provider: provider, DeliveryID: deliveryID, EventType: eventType,
		Body: body, Payload: body, Headers: map[string]string{"X-Redelivery": "true"},
	})
	if wantDuplicate {
		require.NoError(s.t, err)
		require.True(s.t, res.Duplicate)
		return
	}
	var conflict *envelope.ConflictError
	require.ErrorAs(s.t, err, &conflict)
}

// job returns the envelope's latest processing job.
func (s *seeder) job(id int64) int64 {
	s.t.Helper()
	var jobID int64
	err := s.pool.QueryRow(s.ctx, `
		SELECT id FROM river_job WHERE kind = 'process_envelope' AND args @> jsonb_build_object('envelope_id', $1::bigint)
		 ORDER BY id DESC LIMIT 1`, id).Scan(&jobID)
	require.NoError(s.t, err)
	return jobID
}

// attempt records an attempt that leaves the envelope pending (retry or
// snooze).
func (s *seeder) attempt(id int64, n int, outcome envelope.Outcome, msg string) {
	s.t.Helper()
	jobID := s.job(id)
	err := pgx.BeginFunc(s.ctx, s.pool, func(tx pgx.Tx) error {
		_, startedAt, err := envelope.Lock(s.ctx, tx, id)
		if err != nil {
			return err
		}
		ok, err := envelope.RecordAttempt(s.ctx, tx, id, envelope.Attempt{
			JobID: jobID, Attempt: n, Outcome: outcome, Error: msg, Cause: seedCause(msg), StartedAt: startedAt, Worker: workerName,
		})
		if err == nil && !ok {
			err = errors.New("attempt not recorded")
		}
		return err
	})
	require.NoError(s.t, err)
}

// finish ends attempt n of the envelope's job: posts p (if any), moves the
// envelope to status and finalizes its job as River would.
func (s *seeder) finish(id int64, n int, status envelope.Status, p *ledger.Posting, msg string) {
	s.t.Helper()
	jobID := s.job(id)
	err := pgx.BeginFunc(s.ctx, s.pool, func(tx pgx.Tx) error {
		_, startedAt, err := envelope.Lock(s.ctx, tx, id)
		if err != nil {
			return err
		}
		var result any = map[string]any{"recorded": true}
		outcome := envelope.Outcome(status)
		jobState := "completed"
		switch {
		case p != nil:
			res, err := ledger.Post(s.ctx, tx, id, *p)
			if err != nil {
				return err
			}
			result = map[string]any{"posted": res.Created, "ledger_transaction_id": res.TransactionID, "kind": p.Kind,
				"merchant": p.Merchant, "amount_minor": p.AmountMinor, "currency": p.Currency}
		case status == envelope.StatusIgnored:
			result = map[string]string{"reason": "no handler"}
		case status == envelope.StatusFailed:
			result, jobState = nil, "discarded"
			if len(msg) > 9 && msg[:9] == "permanent" {
				jobState = "cancelled"
			}
		}
		var res json.RawMessage
		if result != nil {
			if res, err = json.Marshal(result); err != nil {
				return err
			}
		}
		err = envelope.Finish(s.ctx, tx, id, status, res, envelope.Attempt{
			JobID: jobID, Attempt: n, Outcome: outcome, Error: msg, Cause: seedCause(msg), StartedAt: startedAt, Worker: workerName,
		})
		if err != nil {
			return err
		}
		_, err = tx.Exec(s.ctx, `
			UPDATE river_job SET state = $2::river_job_state, attempt = $3, attempted_at = now(), finalized_at = now()
			 WHERE id = $1`, jobID, jobState, n)
		return err
	})
	require.NoError(s.t, err)
}

// replay does what the replay command does: records who and why, enqueues a
// new job and puts the envelope back to pending, in one transaction.
func (s *seeder) replay(id int64, actor, reason, filter string, batch bool) {
	s.t.Helper()
	err := pgx.BeginFunc(s.ctx, s.pool, func(tx pgx.Tx) error {
		res, err := s.rc.InsertTx(s.ctx, tx, envelope.ProcessArgs{EnvelopeID: id}, nil)
		if err != nil {
			return err
		}
		if res.UniqueSkippedAsDuplicate {
			return errors.New("replay: a live job exists")
		}
		_, err = tx.Exec(s.ctx, `
			INSERT INTO envelope_replay (envelope_id, actor, reason, filter, batch_id, prior_status, job_id)
			SELECT id, $2, $3, $4::jsonb, CASE WHEN $5 THEN gen_random_uuid() END, status, $6 FROM envelope WHERE id = $1`,
			id, actor, reason, filter, batch, res.Job.ID)
		if err != nil {
			return err
		}
		_, err = tx.Exec(s.ctx, `UPDATE envelope SET status = 'pending', processed_at = NULL WHERE id = $1`, id)
		return err
	})
	require.NoError(s.t, err)
}

// shift moves everything that happened to the envelope so that it was
// received at the SQL expression to, keeping the intervals between events.
// The ledger is append-only: back-dating its posted_at needs the triggers
// off (session_replication_role = replica), which only a test may do.
func (s *seeder) shift(id int64, to string) {
	s.t.Helper()
	err := pgx.BeginFunc(s.ctx, s.pool, func(tx pgx.Tx) error {
		var delta string
		if err := tx.QueryRow(s.ctx, `SELECT (`+to+` - received_at)::text FROM envelope WHERE id = $1`, id).Scan(&delta); err != nil {
			return err
		}
		for _, q := range []string{
			`SET LOCAL session_replication_role = replica`,
			`UPDATE envelope SET received_at = received_at + $2::interval, processed_at = processed_at + $2::interval,
			        signed_at = signed_at + $2::interval,
			        body_purged_at = body_purged_at + $2::interval WHERE id = $1`,
			`UPDATE envelope_attempt SET started_at = started_at + $2::interval, finished_at = finished_at + $2::interval WHERE envelope_id = $1`,
			`UPDATE envelope_replay SET replayed_at = replayed_at + $2::interval WHERE envelope_id = $1`,
			`UPDATE envelope_conflict SET received_at = received_at + $2::interval WHERE envelope_id = $1`,
			`UPDATE envelope_duplicate SET received_at = received_at + $2::interval WHERE envelope_id = $1`,
			`UPDATE ledger_transaction SET posted_at = posted_at + $2::interval WHERE envelope_id = $1`,
		} {
			args := []any{id, delta}
			if q[:3] == "SET" {
				args = nil
			}
			if _, err := tx.Exec(s.ctx, q, args...); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return nil
	})
	require.NoError(s.t, err)
}

func payment(merchant, id string, amount int64, currency string) *ledger.Posting {
	key := "standard:" + merchant + ":payment:" + id
	return &ledger.Posting{Kind: ledger.KindPayment, IdempotencyKey: key, Merchant: merchant, Currency: currency, AmountMinor: amount,
		Description: "standard payment.succeeded " + id}
}

func refund(merchant, id, paymentID string, amount int64, currency string) *ledger.Posting {
	return &ledger.Posting{Kind: ledger.KindRefund, IdempotencyKey: "standard:" + merchant + ":refund:" + id,
		PaymentKey: "standard:" + merchant + ":payment:" + paymentID, Merchant: merchant, Currency: currency, AmountMinor: amount,
		Description: "standard payment.refunded " + id + " of " + paymentID}
}

func standardBody(typ, paymentID, refundID, merchant string, amount int64, currency string) []byte {
	return fmt.Appendf(nil, `{"type":%q,"timestamp":"2026-11-30T00:00:00Z","data":{"payment_id":%q,"refund_id":%q,"merchant_id":%q,"amount_minor":%d,"currency":%q}}`,
		typ, paymentID, refundID, merchant, amount, currency)
}

// Time anchors, as SQL expressions.
const (
	yesterday = `date_trunc('day', now()) - interval '1 day'`
)

// seed writes the cookbook's test data, in the order below. Ledger
// transaction ids start at 41; the envelope ids on the left are the order
// they are stored in (an envelope id is time-ordered: migration 00190).
//
//	1001 payments msg_001  payment pay_1 10000 USD m_acme     done, tx 41, 3 days ago
//	1002 payments msg_002  payment pay_2  5000 USD m_acme     2 retries, done, tx 42, yesterday 10:00
//	1003 payments msg_003  refund ref_1 of pay_1 2000 USD     done, tx 43, yesterday 11:00
//	1004 payments msg_004  refund ref_2 of pay_1 3000 USD     done, tx 44, yesterday 12:00
//	1005 payments msg_005  payment pay_3 7000 EUR m_globex    done, tx 45, now; 2 duplicates, 1 conflict
//	1006 payments msg_006  payment in XXX                     failed (permanent), yesterday 13:00
//	1007 payments msg_008  payment pay_4 1500 EUR m_globex    4 retries, failed, replayed by alice, done, tx 46, yesterday 14:00
//	1008 stripe   evt_1    payment pi_1 2500 USD acct_1       done, tx 47, 1 duplicate, yesterday 09:00
//	1009 stripe   evt_2    customer.created                   ignored, replayed by bob (batch), ignored, yesterday 09:30
//	1010 stripe   evt_3    refund of pi_1 2500 USD            done, tx 48, yesterday 15:00
//	1011 stripe   evt_4    payment pi_2 1000 JPY acct_1       done, tx 49, 40 days ago (in the ledger: body kept)
//	1012 stripe   evt_5    refund of pi_9 (not posted)        pending, 3 snoozes, 3 hours ago
//	1013 gh       a1b2...  push                               done, 40 days ago, body purged; then 1 duplicate, 1 conflict
//	1014 gh       c3d4...  push                               done, now
//	1015 shop     wh-1     orders/paid 19.99 USD              done, tx 50, yesterday 16:00
//	1016 shop     wh-2     refunds/create                     pending, now
//	1017 shop     wh-3     orders/paid "abc"                  2 retries, failed (exhausted), yesterday 17:00
func seed(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	s := newSeeder(t, pool)
	s.exec(`ALTER TABLE ledger_transaction ALTER COLUMN id RESTART WITH 41`)
	const (
		done    = envelope.StatusDone
		failed  = envelope.StatusFailed
		ignored = envelope.StatusIgnored
	)

	id := s.receive("payments", "standard", "msg_001", "payment.succeeded", standardBody("payment.succeeded", "pay_1", "", "m_acme", 10000, "USD"), nil)
	s.finish(id, 1, done, payment("m_acme", "pay_1", 10000, "USD"), "")
	s.shift(id, `now() - interval '3 days'`)

	id = s.receive("payments", "standard", "msg_002", "payment.succeeded", standardBody("payment.succeeded", "pay_2", "", "m_acme", 5000, "USD"), nil)
	s.attempt(id, 1, envelope.OutcomeRetry, "connection reset by peer")
	s.attempt(id, 2, envelope.OutcomeRetry, "connection reset by peer")
	s.finish(id, 3, done, payment("m_acme", "pay_2", 5000, "USD"), "")
	s.shift(id, yesterday+` + interval '10 hours'`)

	id = s.receive("payments", "standard", "msg_003", "payment.refunded", standardBody("payment.refunded", "pay_1", "ref_1", "m_acme", 2000, "USD"), nil)
	s.finish(id, 1, done, refund("m_acme", "ref_1", "pay_1", 2000, "USD"), "")
	s.shift(id, yesterday+` + interval '11 hours'`)

	id = s.receive("payments", "standard", "msg_004", "payment.refunded", standardBody("payment.refunded", "pay_1", "ref_2", "m_acme", 3000, "USD"), nil)
	s.finish(id, 1, done, refund("m_acme", "ref_2", "pay_1", 3000, "USD"), "")
	s.shift(id, yesterday+` + interval '12 hours'`)

	body := standardBody("payment.succeeded", "pay_3", "", "m_globex", 7000, "EUR")
	id = s.receive("payments", "standard", "msg_005", "payment.succeeded", body, nil)
	s.finish(id, 1, done, payment("m_globex", "pay_3", 7000, "EUR"), "")
	s.redeliver("payments", "standard", "msg_005", "payment.succeeded", body, true)
	s.redeliver("payments", "standard", "msg_005", "payment.succeeded", body, true)
	s.redeliver("payments", "standard", "msg_005", "payment.succeeded", standardBody("payment.succeeded", "pay_3", "", "m_globex", 70000, "EUR"), false)

	id = s.receive("payments", "standard", "msg_006", "payment.succeeded", standardBody("payment.succeeded", "pay_5", "", "m_acme", 100, "XXX"), nil)
	s.finish(id, 1, failed, nil, `permanent: standard payment.succeeded: unknown currency "XXX"`)
	s.shift(id, yesterday+` + interval '13 hours'`)

	id = s.receive("payments", "standard", "msg_008", "payment.succeeded", standardBody("payment.succeeded", "pay_4", "", "m_globex", 1500, "EUR"), nil)
	for n := 1; n <= 4; n++ {
		s.attempt(id, n, envelope.OutcomeRetry, "downstream timeout")
	}
	s.finish(id, 5, failed, nil, "attempts exhausted (5 of 5): downstream timeout")
	s.replay(id, "alice", "INC-42: database failover, retrying failed payments", `{"ids": [1007]}`, false)
	s.finish(id, 1, done, payment("m_globex", "pay_4", 1500, "EUR"), "")
	s.shift(id, yesterday+` + interval '14 hours'`)

	stripePay := []byte(`{"id":"evt_1","object":"event","type":"payment_intent.succeeded","account":"acct_1","data":{"object":{"id":"pi_1","amount_received":2500,"currency":"usd"}}}`)
	id = s.receive("stripe", "stripe", "evt_1", "payment_intent.succeeded", stripePay, nil)
	s.finish(id, 1, done, &ledger.Posting{Kind: ledger.KindPayment, IdempotencyKey: "stripe:payment:pi_1", Merchant: "acct_1", Currency: "USD", AmountMinor: 2500}, "")
	s.redeliver("stripe", "stripe", "evt_1", "payment_intent.succeeded", stripePay, true)
	s.shift(id, yesterday+` + interval '9 hours'`)

	id = s.receive("stripe", "stripe", "evt_2", "customer.created", []byte(`{"id":"evt_2","object":"event","type":"customer.created","data":{"object":{"id":"cus_1"}}}`), nil)
	s.finish(id, 1, ignored, nil, "")
	s.replay(id, "bob", "customer handler deployed", `{"source": "stripe", "status": "ignored", "event_type": "customer.created"}`, true)
	s.finish(id, 1, ignored, nil, "")
	s.shift(id, yesterday+` + interval '9 hours 30 minutes'`)

	id = s.receive("stripe", "stripe", "evt_3", "charge.refunded", []byte(`{"id":"evt_3","object":"event","type":"charge.refunded","account":"acct_1","data":{"object":{"id":"ch_1","payment_intent":"pi_1","amount_refunded":2500,"currency":"usd"}}}`), nil)
	s.finish(id, 1, done, &ledger.Posting{Kind: ledger.KindRefund, IdempotencyKey: "stripe:refund:ch_1:2500", PaymentKey: "stripe:payment:pi_1", Merchant: "acct_1", Currency: "USD", AmountMinor: 2500}, "")
	s.shift(id, yesterday+` + interval '15 hours'`)

	id = s.receive("stripe", "stripe", "evt_4", "payment_intent.succeeded", []byte(`{"id":"evt_4","object":"event","type":"payment_intent.succeeded","account":"acct_1","data":{"object":{"id":"pi_2","amount_received":1000,"currency":"jpy"}}}`), nil)
	s.finish(id, 1, done, &ledger.Posting{Kind: ledger.KindPayment, IdempotencyKey: "stripe:payment:pi_2", Merchant: "acct_1", Currency: "JPY", AmountMinor: 1000}, "")
	s.shift(id, `now() - interval '40 days'`)

	// A refund that arrived before its payment: snoozed, still pending.
	id = s.receive("stripe", "stripe", "evt_5", "charge.refunded", []byte(`{"id":"evt_5","object":"event","type":"charge.refunded","account":"acct_1","data":{"object":{"id":"ch_9","payment_intent":"pi_9","amount_refunded":700,"currency":"usd"}}}`), nil)
	for n := 1; n <= 3; n++ {
		s.attempt(id, n, envelope.OutcomeSnoozed, `not ready: payment "stripe:payment:pi_9" is not posted yet`)
	}
	s.shift(id, `now() - interval '3 hours'`)

	push := []byte(`{"ref":"refs/heads/main","repository":{"full_name":"octo/repo"},"commits":[]}`)
	const ghDelivery = "a1b2c3d4-0000-11ef-8000-000000000001"
	id = s.receive("gh", "github", ghDelivery, "push", push, map[string]string{"X-GitHub-Event": "push"})
	s.finish(id, 1, done, nil, "")
	s.shift(id, `now() - interval '40 days'`)
	// Stored 40 days ago too: in that day's partitions, whose bodies retention drops.
	envelopetest.MoveTo(t, pool, id, time.Now().Add(-40*24*time.Hour))
	rep, err := retention.Purge(s.ctx, pool, retention.Config{})
	require.NoError(t, err)
	require.Len(t, rep.BodyPartitions, 1)
	require.Equal(t, int64(1), rep.BodyPartitions[0].Envelopes, "only the old GitHub push loses its body")
	require.Zero(t, rep.BodiesDropped, "the others were stored today: their bodies stay")
	s.redeliver("gh", "github", ghDelivery, "push", push, true)
	s.redeliver("gh", "github", ghDelivery, "push", []byte(`{"ref":"refs/heads/evil","repository":{"full_name":"octo/repo"},"commits":[]}`), false)

	id = s.receive("gh", "github", "c3d4e5f6-0000-11ef-8000-000000000002", "push", push, map[string]string{"X-GitHub-Event": "push"})
	s.finish(id, 1, done, nil, "")

	shop := map[string]string{"X-Shopify-Shop-Domain": "acme.myshopify.com", "X-Shopify-Topic": "orders/paid"}
	id = s.receive("shop", "shopify", "wh-1", "orders/paid", []byte(`{"id":1001,"name":"#1001","total_price":"19.99","currency":"USD"}`), shop)
	s.finish(id, 1, done, &ledger.Posting{Kind: ledger.KindPayment, IdempotencyKey: "shopify:order:1001", Merchant: "acme.myshopify.com", Currency: "USD", AmountMinor: 1999}, "")
	s.shift(id, yesterday+` + interval '16 hours'`)

	s.receive("shop", "shopify", "wh-2", "refunds/create", []byte(`{"id":5001,"order_id":1001,"transactions":[{"amount":"5.00","currency":"USD"}]}`), shop)

	id = s.receive("shop", "shopify", "wh-3", "orders/paid", []byte(`{"id":1002,"name":"#1002","total_price":"abc","currency":"USD"}`), shop)
	s.attempt(id, 1, envelope.OutcomeRetry, "shopify admin api: 503 Service Unavailable")
	s.attempt(id, 2, envelope.OutcomeRetry, "shopify admin api: 503 Service Unavailable")
	s.finish(id, 3, failed, nil, "attempts exhausted (3 of 3): shopify admin api: 503 Service Unavailable")
	s.shift(id, yesterday+` + interval '17 hours'`)
}

// seedCause is the cause the worker records for one of the seed's error
// messages (internal/handlers.CauseOf on the error behind it); "" for none.
func seedCause(msg string) string {
	switch {
	case msg == "":
		return ""
	case strings.Contains(msg, "unknown currency"):
		return "unknown_currency"
	case strings.Contains(msg, "timeout"):
		return "timeout"
	case strings.Contains(msg, "is not posted yet"):
		return "payment_not_posted"
	default:
		return "internal" // a plain error: connection reset, an upstream 503
	}
}
