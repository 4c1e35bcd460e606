package ledger

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxhq/inbox/internal/pg"
)

// Kind is what a ledger transaction records.
type Kind string

// Transaction kinds, as stored in ledger_transaction.kind.
const (
	KindPayment Kind = "payment"
	KindRefund  Kind = "refund"
	// KindRefundReversal undoes a refund that failed after it was posted
	// (Stripe: a refund whose status became "failed"; the money came back).
	KindRefundReversal Kind = "refund_reversal"
)

// Account names, per merchant, as stored in ledger_account.name.
//
// A payment debits psp_clearing (money the payment provider owes the
// merchant) and credits sales. A refund debits refunds (a contra-revenue
// account) and credits psp_clearing; a refund reversal the other way round.
const (
	AccountPSPClearing = "psp_clearing"
	AccountSales       = "sales"
	AccountRefunds     = "refunds"
)

// ReasonEnvelopePosted is Result.Reason when the envelope already has a
// ledger transaction.
const ReasonEnvelopePosted = "envelope already posted"

// Posting is one business event to record: a payment, or a refund of one.
type Posting struct {
	Kind Kind
	// IdempotencyKey is the business key, unique across the ledger: the same
	// key is posted once, whichever envelope carries it.
	IdempotencyKey string
	// PaymentKey is, for a payment, its own IdempotencyKey (left empty, it
	// defaults to it); for a refund, the IdempotencyKey of the payment it
	// refunds.
	PaymentKey  string
	Merchant    string
	Currency    string // ISO 4217, uppercase
	AmountMinor int64  // in the currency's minor units, > 0
	Description string
	// Presentment, when set, is what the customer was presented in another
	// currency (Shopify's presentment currency); it is recorded next to the
	// transaction (ledger_presentment) and summed into PaymentState.
	Presentment *Money
	// Source and DeliveryID are the envelope's, when the caller has it at
	// hand (the worker's handlers do): the transaction keeps them as its
	// link to the delivery. Given, the database checks them with one probe
	// of the envelope's key; left empty, or not the envelope's, it looks
	// the envelope up, which costs more (migration 00195). Either way the
	// transaction records its envelope's.
	Source, DeliveryID string
}

// Money is an amount in a currency's minor units.
type Money struct {
	Currency    string
	AmountMinor int64
}

// Result says what Post did.
type Result struct {
	// TransactionID is the ledger transaction that records the posting: the
	// new one, or the one that already did.
	TransactionID int64
	// Created is true when this call wrote the transaction.
	Created bool
	// Reason says why nothing was written when Created is false:
	// ReasonEnvelopePosted, or "business key already posted by envelope N".
	Reason string
}

// Transaction is a stored ledger transaction.
type Transaction struct {
	ID             int64
	EnvelopeID     int64
	IdempotencyKey string
	Kind           Kind
	Merchant       string
	PaymentKey     string
	Currency       string
	AmountMinor    int64
	Description    string
	PostedAt       time.Time
}

// PaymentState is a posted payment and how much of it is refunded so far
// (refunds less refund reversals).
type PaymentState struct {
	TransactionID int64
	Merchant      string
	Currency      string
	AmountMinor   int64
	RefundedMinor int64
	// Presentment is the payment's presentment amount, nil when it has
	// none; RefundedPresentmentMinor sums the presentment amounts its
	// refunds recorded in that currency.
	Presentment              *Money
	RefundedPresentmentMinor int64
}

// RefundableMinor is what may still be refunded.
func (s PaymentState) RefundableMinor() int64 { return s.AmountMinor - s.RefundedMinor }

// Post records p for the envelope envelopeID inside tx, which the caller owns:
// Post never begins, commits or rolls back. On error the caller must roll tx
// back, as Post may have written part of the posting.
//
// It writes one ledger_transaction and two balanced entries on the merchant's
// accounts (created on first use). It is idempotent twice over, and safe to
// call again with the same arguments:
//
//   - when the envelope already has a ledger transaction, it writes nothing and
//     returns that transaction with Reason ReasonEnvelopePosted;
//   - when another envelope already posted p.IdempotencyKey with the same
//     terms (kind, merchant, payment key, currency, amount), it writes nothing
//     and returns that transaction; with different terms it returns a
//     *PostingError, as one business key cannot mean two amounts.
//
// Concurrent Posts of one key from several transactions end with exactly one
// ledger transaction: the unique index makes the others wait for the first to
// commit or roll back. This relies on READ COMMITTED (PostgreSQL's default);
// under REPEATABLE READ or SERIALIZABLE the losers get a serialization
// failure instead, a plain error worth retrying.
//
// A refund locks its payment's row (FOR UPDATE) for the rest of tx, so refunds
// of one payment are serialized and can't together exceed it. It fails with
// ErrPaymentNotPosted (wrapped) and writes nothing when the payment is not in
// the ledger, and with a *PostingError when its currency or merchant differs
// from the payment's or it would refund more than remains. A refund reversal
// does the same, and fails with ErrRefundNotPosted (wrapped) when it would
// reverse more than the payment has refunded.
//
// Errors: ErrUnknownCurrency (wrapped), *AmountError, *PostingError, and
// ErrPaymentNotPosted (wrapped) are about the posting; any other error comes
// from the database.
//
// Post writes at once and creates missing accounts inside tx: it is
// NewWriter(tx, nil, nil).Post. The worker's handlers post through the
// Writer they are given (handlers.Run.Ledger), which may defer payments to
// one statement for the batch and create accounts outside it.
func Post(ctx context.Context, tx pgx.Tx, envelopeID int64, p Posting) (Result, error) {
	return NewWriter(tx, nil, nil).Post(ctx, envelopeID, p)
}

func (w *Writer) post(ctx context.Context, envelopeID int64, p Posting) (Result, error) {
	tx := w.tx
	if err := p.normalize(); err != nil {
		return Result{}, err
	}

	if p.Kind == KindRefund || p.Kind == KindRefundReversal {
		if t, ok, err := ByEnvelope(ctx, tx, envelopeID); err != nil {
			return Result{}, err
		} else if ok {
			return Result{TransactionID: t.ID, Reason: ReasonEnvelopePosted}, nil
		}
		// Lock the payment first: it serializes every refund of it, so the
		// lookups below see all refunds committed before ours.
		pay, err := Payment(ctx, tx, p.PaymentKey)
		if err != nil {
			return Result{}, err
		}
		// A refund already posted under another envelope is a duplicate, not
		// an over-refund: look for the key before checking the remainder.
		if t, ok, err := byKey(ctx, tx, p.IdempotencyKey); err != nil {
			return Result{}, err
		} else if ok {
			return alreadyPosted(t, envelopeID, p)
		}
		switch {
		case pay.Currency != p.Currency:
			return Result{}, &PostingError{Key: p.IdempotencyKey, Reason: fmt.Sprintf("refund currency %s differs from payment %q currency %s", p.Currency, p.PaymentKey, pay.Currency)}
		case pay.Merchant != p.Merchant:
			return Result{}, &PostingError{Key: p.IdempotencyKey, Reason: fmt.Sprintf("refund merchant %q differs from payment %q merchant %q", p.Merchant, p.PaymentKey, pay.Merchant)}
		case p.Kind == KindRefund && p.AmountMinor > pay.RefundableMinor():
			return Result{}, &PostingError{Key: p.IdempotencyKey, Reason: fmt.Sprintf("over-refund: %d %s requested, payment %q has %d of %d left", p.AmountMinor, p.Currency, p.PaymentKey, pay.RefundableMinor(), pay.AmountMinor)}
		case p.Kind == KindRefundReversal && p.AmountMinor > pay.RefundedMinor:
			return Result{}, fmt.Errorf("%w: %d %s to reverse, payment %q has %d refunded", ErrRefundNotPosted, p.AmountMinor, p.Currency, p.PaymentKey, pay.RefundedMinor)
		}
	}

	debit, credit := AccountPSPClearing, AccountSales
	switch p.Kind {
	case KindRefund:
		debit, credit = AccountRefunds, AccountPSPClearing
	case KindRefundReversal:
		debit, credit = AccountPSPClearing, AccountRefunds
	}
	accounts, err := w.accountIDs(ctx, p.Merchant, debit, credit)
	if err != nil {
		return Result{}, err
	}
	if w.defers(p) {
		id, err := w.deferred.add(ctx, envelopeID, p, accounts[debit], accounts[credit])
		if err != nil {
			return Result{}, err
		}
		return Result{TransactionID: id, Created: true}, nil
	}
	// One statement writes the transaction and its two entries. No conflict
	// target: a lost race on either unique constraint (envelope or business
	// key) inserts nothing, and existing says which one.
	var id int64
	err = tx.QueryRow(ctx, `
		WITH t AS (
			INSERT INTO ledger_transaction (envelope_id, idempotency_key, kind, merchant, payment_key, currency, amount_minor, description, source, delivery_id)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, nullif($11, ''), nullif($12, ''))
			ON CONFLICT DO NOTHING
			RETURNING id
		), e AS (
			INSERT INTO ledger_entry (transaction_id, account_id, currency, amount_minor)
			SELECT t.id, v.account_id, $6, v.amount_minor
			  FROM t, (VALUES ($9::bigint, $7::bigint), ($10::bigint, -$7::bigint)) AS v(account_id, amount_minor)
		)
		SELECT id FROM t`,
		envelopeID, p.IdempotencyKey, string(p.Kind), p.Merchant, p.PaymentKey, p.Currency, p.AmountMinor, p.Description,
		accounts[debit], accounts[credit], p.Source, p.DeliveryID,
	).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return existing(ctx, tx, envelopeID, p)
	}
	if err != nil {
		return Result{}, fmt.Errorf("insert ledger transaction %q: %w", p.IdempotencyKey, err)
	}
	if m := p.Presentment; m != nil {
		if _, err := tx.Exec(ctx, `INSERT INTO ledger_presentment (transaction_id, currency, amount_minor) VALUES ($1, $2, $3)`,
			id, m.Currency, m.AmountMinor); err != nil {
			return Result{}, fmt.Errorf("insert presentment of ledger transaction %d: %w", id, err)
		}
	}
	return Result{TransactionID: id, Created: true}, nil
}

// normalize checks p and defaults a payment's PaymentKey.
func (p *Posting) normalize() error {
	bad := func(reason string) error { return &PostingError{Key: p.IdempotencyKey, Reason: reason} }
	switch {
	case p.Kind != KindPayment && p.Kind != KindRefund && p.Kind != KindRefundReversal:
		return bad(fmt.Sprintf("unknown kind %q", p.Kind))
	case p.IdempotencyKey == "":
		return bad("empty idempotency key")
	case p.Merchant == "":
		return bad("empty merchant")
	}
	if p.Kind == KindPayment {
		if p.PaymentKey == "" {
			p.PaymentKey = p.IdempotencyKey
		}
		if p.PaymentKey != p.IdempotencyKey {
			return bad(fmt.Sprintf("a payment's payment key %q must be its own idempotency key", p.PaymentKey))
		}
	} else {
		if p.PaymentKey == "" {
			return bad(string(p.Kind) + " without a payment key")
		}
		if p.PaymentKey == p.IdempotencyKey {
			return bad("a " + string(p.Kind) + "'s idempotency key must differ from its payment's")
		}
	}
	if _, err := checkCurrency(p.Currency); err != nil {
		return err
	}
	if p.AmountMinor <= 0 {
		return &AmountError{Amount: strconv.FormatInt(p.AmountMinor, 10), Currency: p.Currency, Reason: "must be positive"}
	}
	if m := p.Presentment; m != nil {
		if _, err := checkCurrency(m.Currency); err != nil {
			return err
		}
		if m.AmountMinor <= 0 {
			return &AmountError{Amount: strconv.FormatInt(m.AmountMinor, 10), Currency: m.Currency, Reason: "presentment amount must be positive"}
		}
	}
	return nil
}

// existing explains a lost insert: the envelope or the key is taken by a row
// that committed meanwhile (ON CONFLICT waited for it).
func existing(ctx context.Context, tx pgx.Tx, envelopeID int64, p Posting) (Result, error) {
	if t, ok, err := ByEnvelope(ctx, tx, envelopeID); err != nil {
		return Result{}, err
	} else if ok {
		return Result{TransactionID: t.ID, Reason: ReasonEnvelopePosted}, nil
	}
	t, ok, err := byKey(ctx, tx, p.IdempotencyKey)
	if err != nil {
		return Result{}, err
	}
	if !ok {
		// Only possible if the conflicting row is invisible to this
		// statement, which READ COMMITTED rules out.
		return Result{}, fmt.Errorf("ledger transaction %q conflicted but no conflicting row is visible", p.IdempotencyKey)
	}
	return alreadyPosted(t, envelopeID, p)
}

// alreadyPosted answers for a key that t already holds.
func alreadyPosted(t Transaction, envelopeID int64, p Posting) (Result, error) {
	if t.EnvelopeID == envelopeID {
		return Result{TransactionID: t.ID, Reason: ReasonEnvelopePosted}, nil
	}
	if t.Kind != p.Kind || t.Merchant != p.Merchant || t.PaymentKey != p.PaymentKey || t.Currency != p.Currency || t.AmountMinor != p.AmountMinor {
		return Result{}, &PostingError{Key: p.IdempotencyKey, Reason: fmt.Sprintf(
			"business key already posted by envelope %d with different terms (%s %s %d %s for %q, now %s %s %d %s for %q)",
			t.EnvelopeID, t.Kind, t.Merchant, t.AmountMinor, t.Currency, t.PaymentKey,
			p.Kind, p.Merchant, p.AmountMinor, p.Currency, p.PaymentKey)}
	}
	return Result{TransactionID: t.ID, Reason: fmt.Sprintf("business key already posted by envelope %d", t.EnvelopeID)}, nil
}

const transactionColumns = `id, envelope_id, idempotency_key, kind, merchant, payment_key, currency, amount_minor, description, posted_at`

func scanTransaction(row pgx.Row) (Transaction, bool, error) {
	var t Transaction
	err := row.Scan(&t.ID, &t.EnvelopeID, &t.IdempotencyKey, &t.Kind, &t.Merchant, &t.PaymentKey, &t.Currency, &t.AmountMinor, &t.Description, &t.PostedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Transaction{}, false, nil
	}
	if err != nil {
		return Transaction{}, false, err
	}
	return t, true, nil
}

// ByEnvelope returns the ledger transaction posted for an envelope, if any.
func ByEnvelope(ctx context.Context, q pg.Querier, envelopeID int64) (Transaction, bool, error) {
	t, ok, err := scanTransaction(q.QueryRow(ctx, `SELECT `+transactionColumns+` FROM ledger_transaction WHERE envelope_id = $1`, envelopeID))
	if err != nil {
		return Transaction{}, false, fmt.Errorf("load ledger transaction of envelope %d: %w", envelopeID, err)
	}
	return t, ok, nil
}

// ByKey returns the ledger transaction posted under a business key, if any.
func ByKey(ctx context.Context, q pg.Querier, key string) (Transaction, bool, error) {
	return byKey(ctx, q, key)
}

func byKey(ctx context.Context, q pg.Querier, key string) (Transaction, bool, error) {
	t, ok, err := scanTransaction(q.QueryRow(ctx, `SELECT `+transactionColumns+` FROM ledger_transaction WHERE idempotency_key = $1`, key))
	if err != nil {
		return Transaction{}, false, fmt.Errorf("load ledger transaction %q: %w", key, err)
	}
	return t, ok, nil
}

// Payment returns the payment posted under paymentKey and the sum of its
// refunds so far, and locks the payment's row (FOR UPDATE) until tx ends, so
// no other transaction can refund it meanwhile: what it returns stays true
// while tx lasts. It fails with ErrPaymentNotPosted (wrapped) when the ledger
// holds no such payment.
func Payment(ctx context.Context, tx pgx.Tx, paymentKey string) (PaymentState, error) {
	var s PaymentState
	err := tx.QueryRow(ctx, `
		SELECT id, merchant, currency, amount_minor
		  FROM ledger_transaction
		 WHERE idempotency_key = $1 AND kind = 'payment'
		   FOR UPDATE`, paymentKey).Scan(&s.TransactionID, &s.Merchant, &s.Currency, &s.AmountMinor)
	if errors.Is(err, pgx.ErrNoRows) {
		return PaymentState{}, fmt.Errorf("%w: %q", ErrPaymentNotPosted, paymentKey)
	}
	if err != nil {
		return PaymentState{}, fmt.Errorf("lock payment %q: %w", paymentKey, err)
	}
	// A separate statement on purpose: its snapshot is taken after the lock
	// was granted, so it sees every refund committed by whoever held it.
	err = tx.QueryRow(ctx, `
		SELECT coalesce(sum(CASE kind WHEN 'refund' THEN amount_minor ELSE -amount_minor END), 0)::bigint
		  FROM ledger_transaction
		 WHERE payment_key = $1 AND kind IN ('refund', 'refund_reversal')`, paymentKey).Scan(&s.RefundedMinor)
	if err != nil {
		return PaymentState{}, fmt.Errorf("sum refunds of payment %q: %w", paymentKey, err)
	}
	var m Money
	err = tx.QueryRow(ctx, `SELECT currency, amount_minor FROM ledger_presentment WHERE transaction_id = $1`, s.TransactionID).
		Scan(&m.Currency, &m.AmountMinor)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return s, nil
	case err != nil:
		return PaymentState{}, fmt.Errorf("load presentment of payment %q: %w", paymentKey, err)
	}
	s.Presentment = &m
	err = tx.QueryRow(ctx, `
		SELECT coalesce(sum(CASE t.kind WHEN 'refund' THEN p.amount_minor ELSE -p.amount_minor END), 0)::bigint
		  FROM ledger_transaction t JOIN ledger_presentment p ON p.transaction_id = t.id
		 WHERE t.payment_key = $1 AND t.kind IN ('refund', 'refund_reversal') AND p.currency = $2`,
		paymentKey, m.Currency).Scan(&s.RefundedPresentmentMinor)
	if err != nil {
		return PaymentState{}, fmt.Errorf("sum presentment refunds of payment %q: %w", paymentKey, err)
	}
	return s, nil
}
