package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
	"github.com/inboxhq/inbox/internal/ledger"
	"github.com/inboxhq/inbox/internal/pgtest"
)

type bundle struct {
	ctx  context.Context
	pool *pgxpool.Pool
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return &bundle{ctx: context.Background(), pool: pgtest.NewPool(t)}
}

// envelope inserts a minimal envelope row and returns its id.
func (b *bundle) envelope(t *testing.T) int64 {
	t.Helper()
	return envelopetest.Insert(t, b.pool, envelopetest.Row{})
}

// post runs Post in its own transaction, committed when Post succeeds.
func (b *bundle) post(t *testing.T, envelopeID int64, p ledger.Posting) (ledger.Result, error) {
	t.Helper()
	var res ledger.Result
	err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		res, err = ledger.Post(b.ctx, tx, envelopeID, p)
		return err
	})
	return res, err
}

func (b *bundle) mustPost(t *testing.T, envelopeID int64, p ledger.Posting) ledger.Result {
	t.Helper()
	res, err := b.post(t, envelopeID, p)
	require.NoError(t, err, "Post(%d, %+v)", envelopeID, p)
	return res
}

type entry struct {
	Merchant, Account, Currency string
	AmountMinor                 int64
}

func (b *bundle) entries(t *testing.T, transactionID int64) []entry {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `
		SELECT a.merchant, a.name, e.currency, e.amount_minor
		  FROM ledger_entry e JOIN ledger_account a ON a.id = e.account_id
		 WHERE e.transaction_id = $1
		 ORDER BY e.amount_minor DESC`, transactionID)
	require.NoError(t, err)
	es, err := pgx.CollectRows(rows, pgx.RowToStructByPos[entry])
	require.NoError(t, err)
	return es
}

func payment(key, merchant, currency string, amount int64) ledger.Posting {
	return ledger.Posting{Kind: ledger.KindPayment, IdempotencyKey: key, Merchant: merchant, Currency: currency, AmountMinor: amount, Description: "test payment " + key}
}

func refund(key, paymentKey, merchant, currency string, amount int64) ledger.Posting {
	return ledger.Posting{Kind: ledger.KindRefund, IdempotencyKey: key, PaymentKey: paymentKey, Merchant: merchant, Currency: currency, AmountMinor: amount}
}

func equalEntries(t *testing.T, got, want []entry) {
	t.Helper()
	require.Equal(t, want, got, "entries")
}

func TestPostPaymentWritesTwoBalancedEntries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	env := b.envelope(t)

	res := b.mustPost(t, env, payment("pay:1", "acme", "USD", 1234))
	require.True(t, res.Created && res.TransactionID != 0 && res.Reason == "", "Result = %+v, want a created transaction", res)
	equalEntries(t, b.entries(t, res.TransactionID), []entry{
		{"acme", ledger.AccountPSPClearing, "USD", 1234},
		{"acme", ledger.AccountSales, "USD", -1234},
	})

	tr, ok, err := ledger.ByEnvelope(b.ctx, b.pool, env)
	require.NoError(t, err)
	require.True(t, ok, "ByEnvelope")
	want := ledger.Transaction{ID: res.TransactionID, EnvelopeID: env, IdempotencyKey: "pay:1", Kind: ledger.KindPayment,
		Merchant: "acme", PaymentKey: "pay:1", Currency: "USD", AmountMinor: 1234, Description: "test payment pay:1", PostedAt: tr.PostedAt}
	require.Equal(t, want, tr, "transaction")
	require.False(t, tr.PostedAt.IsZero(), "transaction posted at")
	_, ok, err = ledger.ByEnvelope(b.ctx, b.pool, b.envelope(t))
	require.NoError(t, err)
	require.False(t, ok, "ByEnvelope of an envelope without posting")
}

func TestBalances(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mustPost(t, b.envelope(t), payment("p1", "acme", "USD", 1000))
	b.mustPost(t, b.envelope(t), payment("p2", "acme", "USD", 500))
	b.mustPost(t, b.envelope(t), payment("p3", "acme", "EUR", 700))
	b.mustPost(t, b.envelope(t), refund("r1", "p1", "acme", "USD", 250))
	b.mustPost(t, b.envelope(t), payment("p4", "globex", "JPY", 3000))

	got, err := ledger.Balances(b.ctx, b.pool, "acme")
	require.NoError(t, err)
	type row struct {
		account, currency string
		balance, entries  int64
	}
	var rows []row
	for _, bal := range got {
		require.Equal(t, "acme", bal.Merchant, "balance %+v", bal)
		require.NotZero(t, bal.AccountID, "balance %+v", bal)
		rows = append(rows, row{bal.Account, bal.Currency, bal.BalanceMinor, bal.Entries})
	}
	want := []row{
		{"psp_clearing", "EUR", 700, 1},
		{"psp_clearing", "USD", 1000 + 500 - 250, 3},
		{"refunds", "USD", 250, 1},
		{"sales", "EUR", -700, 1},
		{"sales", "USD", -1500, 2},
	}
	require.Equal(t, want, rows, "Balances(acme)")

	all, err := ledger.Balances(b.ctx, b.pool, "")
	require.NoError(t, err)
	require.Len(t, all, len(want)+2, "Balances(all): acme's rows then globex's two")
	require.Equal(t, "globex", all[len(all)-1].Merchant, "Balances(all) = %+v: acme's rows then globex's two", all)
	require.Equal(t, int64(-3000), all[len(all)-1].BalanceMinor, "Balances(all) = %+v", all)
	none, err := ledger.Balances(b.ctx, b.pool, "nobody")
	require.NoError(t, err)
	require.Empty(t, none, "Balances(nobody)")
}

func TestPostIsIdempotentPerEnvelope(t *testing.T) {
	t.Parallel()
	b := setup(t)
	env := b.envelope(t)
	first := b.mustPost(t, env, payment("pay:1", "acme", "USD", 100))

	// Again, and again with another key: the envelope has its transaction.
	for _, p := range []ledger.Posting{payment("pay:1", "acme", "USD", 100), payment("pay:other", "acme", "USD", 999)} {
		res := b.mustPost(t, env, p)
		require.Equal(t, ledger.Result{TransactionID: first.TransactionID, Reason: ledger.ReasonEnvelopePosted}, res, "second Post(%s)", p.IdempotencyKey)
	}
	require.Equal(t, 1, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"), "ledger transactions")
	require.Equal(t, 2, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_entry"), "ledger entries")
}

func TestPostIsIdempotentPerBusinessKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	envA, envB := b.envelope(t), b.envelope(t)
	first := b.mustPost(t, envA, payment("pay:1", "acme", "USD", 100))

	res := b.mustPost(t, envB, payment("pay:1", "acme", "USD", 100))
	require.Equal(t, ledger.Result{TransactionID: first.TransactionID, Reason: fmt.Sprintf("business key already posted by envelope %d", envA)}, res,
		"Post under a second envelope")
	require.Equal(t, 1, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"), "ledger transactions")

	// The same key with other terms is not a duplicate but a conflict.
	for _, p := range []ledger.Posting{
		payment("pay:1", "acme", "USD", 101),
		payment("pay:1", "acme", "EUR", 100),
		payment("pay:1", "globex", "USD", 100),
	} {
		_, err := b.post(t, b.envelope(t), p)
		var pe *ledger.PostingError
		require.ErrorAs(t, err, &pe, "Post(%+v)", p)
		require.Contains(t, pe.Reason, "different terms", "Post(%+v)", p)
	}
	require.Equal(t, 1, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"), "ledger transactions")
}

func TestPostConcurrentSameKeyPostsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 20 // pgtest pools hold 20 connections: all transactions are open at once
	envs := make([]int64, n)
	for i := range envs {
		envs[i] = b.envelope(t)
	}

	var ready sync.WaitGroup
	ready.Add(n)
	start := make(chan struct{})
	results := make([]ledger.Result, n)
	errs := make([]error, n)
	var done sync.WaitGroup
	for i := range n {
		done.Go(func() {
			tx, err := b.pool.Begin(b.ctx)
			ready.Done()
			if err != nil {
				errs[i] = err
				return
			}
			defer tx.Rollback(b.ctx) //nolint:errcheck
			<-start
			results[i], err = ledger.Post(b.ctx, tx, envs[i], payment("pay:race", "acme", "USD", 4200))
			if err == nil {
				err = tx.Commit(b.ctx)
			}
			errs[i] = err
		})
	}
	ready.Wait()
	close(start)
	done.Wait()

	created := 0
	for i := range n {
		require.NoError(t, errs[i], "goroutine %d", i)
		if results[i].Created {
			created++
		}
		require.Equal(t, results[0].TransactionID, results[i].TransactionID, "goroutine %d's transaction, and goroutine 0's", i)
	}
	require.Equal(t, 1, created, "goroutines that created the transaction")
	require.Equal(t, 1, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"), "ledger transactions")
	require.Equal(t, 2, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_entry"), "ledger entries")
	require.Equal(t, 2, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_account"), "ledger accounts")
}

func TestRefundBeforePaymentWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tx := pgtest.Tx(t, b.pool)
	_, err := ledger.Post(b.ctx, tx, b.envelope(t), refund("ref:1", "pay:missing", "acme", "USD", 100))
	require.ErrorIs(t, err, ledger.ErrPaymentNotPosted, "Post(refund before payment)")
	require.ErrorContains(t, err, "pay:missing", "the error names the payment")
	// Commit what Post left in the transaction: it must be nothing.
	require.NoError(t, tx.Commit(b.ctx))
	for _, table := range []string{"ledger_transaction", "ledger_entry", "ledger_account"} {
		require.Zero(t, pgtest.Count(t, b.pool, "SELECT count(*) FROM "+table), "rows in %s", table)
	}

	err = pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		_, err := ledger.Payment(b.ctx, tx, "pay:missing")
		return err
	})
	require.ErrorIs(t, err, ledger.ErrPaymentNotPosted, "Payment(missing)")
}

func TestRefundPosts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pay := b.mustPost(t, b.envelope(t), payment("pay:1", "acme", "EUR", 1000))
	res := b.mustPost(t, b.envelope(t), refund("ref:1", "pay:1", "acme", "EUR", 300))
	require.True(t, res.Created, "refund Result = %+v, want a new transaction", res)
	require.NotEqual(t, pay.TransactionID, res.TransactionID, "refund Result = %+v, want a new transaction", res)
	equalEntries(t, b.entries(t, res.TransactionID), []entry{
		{"acme", ledger.AccountRefunds, "EUR", 300},
		{"acme", ledger.AccountPSPClearing, "EUR", -300},
	})

	var state ledger.PaymentState
	err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		state, err = ledger.Payment(b.ctx, tx, "pay:1")
		return err
	})
	want := ledger.PaymentState{TransactionID: pay.TransactionID, Merchant: "acme", Currency: "EUR", AmountMinor: 1000, RefundedMinor: 300}
	require.NoError(t, err)
	require.Equal(t, want, state, "Payment")
	require.Equal(t, int64(700), state.RefundableMinor())
}

func TestOverRefundIsRejected(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mustPost(t, b.envelope(t), payment("pay:1", "acme", "USD", 1000))
	b.mustPost(t, b.envelope(t), refund("ref:1", "pay:1", "acme", "USD", 600))

	overRefund := func(p ledger.Posting) {
		t.Helper()
		_, err := b.post(t, b.envelope(t), p)
		var pe *ledger.PostingError
		require.ErrorAs(t, err, &pe, "Post(%+v)", p)
		require.Contains(t, pe.Reason, "over-refund", "Post(%+v)", p)
	}
	overRefund(refund("ref:2", "pay:1", "acme", "USD", 401))
	b.mustPost(t, b.envelope(t), refund("ref:2", "pay:1", "acme", "USD", 400))
	overRefund(refund("ref:3", "pay:1", "acme", "USD", 1))

	// A fully refunded payment's refund, redelivered under another envelope,
	// is a duplicate, not an over-refund.
	res := b.mustPost(t, b.envelope(t), refund("ref:2", "pay:1", "acme", "USD", 400))
	require.False(t, res.Created, "duplicate refund = %+v", res)
	require.True(t, strings.HasPrefix(res.Reason, "business key already posted"), "duplicate refund = %+v, want already posted", res)
	require.Equal(t, 3, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"), "ledger transactions")
}

func TestConcurrentRefundsCannotOverRefund(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mustPost(t, b.envelope(t), payment("pay:1", "acme", "USD", 1000))
	const n = 10
	envs := make([]int64, n)
	for i := range envs {
		envs[i] = b.envelope(t)
	}
	var ok, over atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, err := b.post(t, envs[i], refund(fmt.Sprintf("ref:%d", i), "pay:1", "acme", "USD", 300))
			var pe *ledger.PostingError
			switch {
			case err == nil:
				ok.Add(1)
			case errors.As(err, &pe):
				over.Add(1)
			default:
				t.Errorf("refund %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	require.Equal(t, [2]int64{3, n - 3}, [2]int64{ok.Load(), over.Load()}, "refunds posted and rejected")
	require.Equal(t, int64(900), pgtest.Scalar[int64](t, b.pool, "SELECT sum(amount_minor) FROM ledger_transaction WHERE kind = 'refund'"), "refunded")
}

func TestRefundMustMatchPayment(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mustPost(t, b.envelope(t), payment("pay:1", "acme", "USD", 1000))
	for _, tt := range []struct {
		p    ledger.Posting
		want string
	}{
		{refund("ref:1", "pay:1", "acme", "EUR", 100), "currency EUR differs"},
		{refund("ref:1", "pay:1", "globex", "USD", 100), `merchant "globex" differs`},
	} {
		_, err := b.post(t, b.envelope(t), tt.p)
		var pe *ledger.PostingError
		if assert.ErrorAs(t, err, &pe, "Post(%+v)", tt.p) {
			assert.Contains(t, pe.Reason, tt.want, "Post(%+v)", tt.p)
		}
	}
	require.Equal(t, 1, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"), "ledger transactions")
}

func TestPostValidates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	env := b.envelope(t)
	posting := func(edit func(*ledger.Posting)) ledger.Posting {
		p := payment("pay:1", "acme", "USD", 100)
		edit(&p)
		return p
	}
	var postingErr *ledger.PostingError
	for name, tt := range map[string]struct {
		p      ledger.Posting
		target any // errors.As target, or an error for errors.Is
	}{
		"unknown currency":                 {posting(func(p *ledger.Posting) { p.Currency = "ABC" }), ledger.ErrUnknownCurrency},
		"lowercase currency":               {posting(func(p *ledger.Posting) { p.Currency = "usd" }), ledger.ErrUnknownCurrency},
		"zero amount":                      {posting(func(p *ledger.Posting) { p.AmountMinor = 0 }), ledger.ErrInvalidAmount},
		"negative amount":                  {posting(func(p *ledger.Posting) { p.AmountMinor = -5 }), ledger.ErrInvalidAmount},
		"empty key":                        {posting(func(p *ledger.Posting) { p.IdempotencyKey = "" }), &postingErr},
		"empty merchant":                   {posting(func(p *ledger.Posting) { p.Merchant = "" }), &postingErr},
		"unknown kind":                     {posting(func(p *ledger.Posting) { p.Kind = "chargeback" }), &postingErr},
		"payment with another payment key": {posting(func(p *ledger.Posting) { p.PaymentKey = "pay:2" }), &postingErr},
		"refund without payment key":       {refund("ref:1", "", "acme", "USD", 100), &postingErr},
		"refund of itself":                 {refund("ref:1", "ref:1", "acme", "USD", 100), &postingErr},
	} {
		_, err := b.post(t, env, tt.p)
		switch target := tt.target.(type) {
		case error:
			assert.ErrorIs(t, err, target, name)
		default:
			assert.ErrorAs(t, err, target, name)
		}
	}
	require.Zero(t, pgtest.Count(t, b.pool, "SELECT count(*) FROM ledger_transaction"), "ledger transactions")
}

func TestPostAmountsByCurrencyExponent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i, tt := range []struct {
		amount, currency string
		want             int64
	}{
		{"1500", "JPY", 1500},
		{"12.34", "USD", 1234},
		{"1.234", "KWD", 1234},
	} {
		minor, err := ledger.ParseDecimal(tt.amount, tt.currency)
		require.NoError(t, err, "ParseDecimal(%q, %s)", tt.amount, tt.currency)
		require.Equal(t, tt.want, minor, "ParseDecimal(%q, %s)", tt.amount, tt.currency)
		res := b.mustPost(t, b.envelope(t), payment(fmt.Sprintf("pay:%d", i), "acme", tt.currency, minor))
		equalEntries(t, b.entries(t, res.TransactionID), []entry{
			{"acme", ledger.AccountPSPClearing, tt.currency, tt.want},
			{"acme", ledger.AccountSales, tt.currency, -tt.want},
		})
	}
}

// A refund that failed after it was posted is reversed: the money is back in
// psp_clearing, the payment may be refunded again, and a reversal can never
// exceed what was refunded.
func TestRefundReversal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mustPost(t, b.envelope(t), payment("p1", "acme", "USD", 1000))
	b.mustPost(t, b.envelope(t), refund("r1", "p1", "acme", "USD", 400))
	reversal := func(key string, amount int64) ledger.Posting {
		p := refund(key, "p1", "acme", "USD", amount)
		p.Kind = ledger.KindRefundReversal
		return p
	}

	tx := pgtest.Tx(t, b.pool)
	_, err := ledger.Post(b.ctx, tx, b.envelope(t), reversal("rev:too-much", 401))
	require.ErrorIs(t, err, ledger.ErrRefundNotPosted, "reversal of 401 after a refund of 400")
	_ = tx.Rollback(b.ctx)

	res := b.mustPost(t, b.envelope(t), reversal("rev:r1", 400))
	equalEntries(t, b.entries(t, res.TransactionID), []entry{
		{"acme", ledger.AccountPSPClearing, "USD", 400},
		{"acme", ledger.AccountRefunds, "USD", -400},
	})
	tx = pgtest.Tx(t, b.pool)
	pay, err := ledger.Payment(b.ctx, tx, "p1")
	_ = tx.Rollback(b.ctx)
	require.NoError(t, err, "Payment after the reversal")
	require.Zero(t, pay.RefundedMinor, "Payment after the reversal = %+v, want nothing refunded", pay)
	require.Equal(t, int64(1000), pay.RefundableMinor(), "Payment after the reversal = %+v, want nothing refunded", pay)
	// The whole payment may be refunded now.
	b.mustPost(t, b.envelope(t), refund("r2", "p1", "acme", "USD", 1000))

	var refunded, reversed, remaining int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT refunded_minor, reversed_minor, remaining_minor FROM ledger_payment_audit WHERE payment_key = 'p1'`).
		Scan(&refunded, &reversed, &remaining))
	require.Equal(t, [3]int64{1000, 400, 0}, [3]int64{refunded, reversed, remaining}, "ledger_payment_audit: refunded, reversed, remaining")
}
