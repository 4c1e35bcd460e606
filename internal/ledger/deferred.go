package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"
)

// Deferred collects the payments that Post is asked for in one transaction
// and writes them all with one statement (Flush), instead of one statement
// each: the worker's batches attach one, and a batch of fifty payments then
// costs the database one statement for its ledger, not fifty.
//
// Post defers only what it can answer without reading the ledger: a payment
// (no presentment) whose merchant's accounts are known. It reserves the
// transaction's id from its sequence at once, so Post's Result (and the
// envelope's result) names the transaction before it is written. Flush
// writes them in business-key order (so concurrent flushes cannot deadlock)
// with ON CONFLICT DO NOTHING; when any is not written (its envelope or its
// business key already has a transaction: a replay, the same payment under
// two delivery ids), Flush returns ErrDeferredConflict and the caller must
// roll the transaction back and run it again without a Deferred, so that
// Post answers those from the ledger as usual. A refund of a payment
// deferred in the same transaction does not see it (ErrPaymentNotPosted):
// the caller's retry without a Deferred posts both in order.
//
// A Deferred belongs to one transaction and is not safe for concurrent use.
type Deferred struct {
	tx       pgx.Tx
	reserved []int64
	pending  []deferredPosting
	// tp is the tracer provider of the first posting deferred under a
	// recording span (nil while tracing is off): Flush's span comes from it.
	tp trace.TracerProvider
}

type deferredPosting struct {
	id, envelopeID    int64
	p                 Posting
	debitID, creditID int64
	// span is the span of the Post that deferred it (invalid when tracing
	// is off): the flush links to it.
	span trace.SpanContext
}

// ErrDeferredConflict is Flush's answer when a deferred posting conflicted
// with one already in the ledger: roll back, and run again without deferring.
var ErrDeferredConflict = errors.New("a deferred posting conflicts with the ledger")

// NewDeferred returns a Deferred for tx; give it to NewWriter(tx, ...).
func NewDeferred(tx pgx.Tx) *Deferred { return &Deferred{tx: tx} }

// reserveBlock is how many transaction ids one reservation takes.
const reserveBlock = 64

// add queues p for envelopeID and returns the id its transaction will have.
func (d *Deferred) add(ctx context.Context, envelopeID int64, p Posting, debitID, creditID int64) (int64, error) {
	if len(d.reserved) == 0 {
		rows, err := d.tx.Query(ctx, `SELECT nextval(pg_get_serial_sequence('ledger_transaction', 'id')) FROM generate_series(1, $1)`, reserveBlock)
		if err != nil {
			return 0, fmt.Errorf("reserve ledger transaction ids: %w", err)
		}
		d.reserved, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return 0, fmt.Errorf("reserve ledger transaction ids: %w", err)
		}
	}
	id := d.reserved[0]
	d.reserved = d.reserved[1:]
	span := trace.SpanFromContext(ctx)
	if d.tp == nil && span.IsRecording() {
		d.tp = span.TracerProvider()
	}
	d.pending = append(d.pending, deferredPosting{id: id, envelopeID: envelopeID, p: p, debitID: debitID, creditID: creditID,
		span: span.SpanContext()})
	return id, nil
}

// Len is how many postings wait for Flush.
func (d *Deferred) Len() int { return len(d.pending) }

// Flush (nil: nothing to do) writes every deferred posting, each a ledger transaction and its two
// balanced entries, in one statement. It returns ErrDeferredConflict when
// one of them could not be written (see Deferred); the caller must then roll
// back.
func (d *Deferred) Flush(ctx context.Context) error {
	if d == nil {
		return nil
	}
	n := len(d.pending)
	if n == 0 {
		return nil
	}
	if d.tp != nil {
		var span trace.Span
		ctx, span = startFlushSpan(ctx, d.tp, d.pending)
		defer span.End()
	}
	ids, envs, debits, credits, amounts := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	keys, merchants, currencies, descs := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	sources, deliveries := make([]string, n), make([]string, n)
	for i, q := range d.pending {
		ids[i], envs[i], debits[i], credits[i], amounts[i] = q.id, q.envelopeID, q.debitID, q.creditID, q.p.AmountMinor
		keys[i], merchants[i], currencies[i], descs[i] = q.p.IdempotencyKey, q.p.Merchant, q.p.Currency, q.p.Description
		sources[i], deliveries[i] = q.p.Source, q.p.DeliveryID
	}
	var written int
	err := d.tx.QueryRow(ctx, `
		WITH input AS (
			SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[], $8::bigint[], $9::bigint[], $10::text[], $11::text[])
			       AS i(id, envelope_id, key, merchant, currency, amount_minor, description, debit_id, credit_id, source, delivery_id)
		), t AS (
			INSERT INTO ledger_transaction (id, envelope_id, idempotency_key, kind, merchant, payment_key, currency, amount_minor, description, source, delivery_id)
			OVERRIDING SYSTEM VALUE
			SELECT id, envelope_id, key, 'payment', merchant, key, currency, amount_minor, description, nullif(source, ''), nullif(delivery_id, '')
			  FROM input ORDER BY key
			ON CONFLICT DO NOTHING
			RETURNING id
		), e AS (
			INSERT INTO ledger_entry (transaction_id, account_id, currency, amount_minor)
			SELECT i.id, v.account_id, i.currency, v.amount_minor
			  FROM input i JOIN t ON t.id = i.id
			 CROSS JOIN LATERAL (VALUES (i.debit_id, i.amount_minor), (i.credit_id, -i.amount_minor)) AS v(account_id, amount_minor)
		)
		SELECT count(*) FROM t`,
		ids, envs, keys, merchants, currencies, amounts, descs, debits, credits, sources, deliveries).Scan(&written)
	if err != nil {
		return fmt.Errorf("write %d deferred ledger transactions: %w", n, err)
	}
	if written != n {
		return fmt.Errorf("%d of %d deferred ledger transactions written: %w", written, n, ErrDeferredConflict)
	}
	d.pending = d.pending[:0]
	return nil
}
