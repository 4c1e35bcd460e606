package ledger_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
	"github.com/inboxhq/inbox/internal/ledger"
	"github.com/inboxhq/inbox/internal/pgtest"
)

// A payment and its partial refund, each posted by the envelope that carried
// it, inside that envelope's transaction. Posting the payment again (a
// replay, or the same payment under another delivery id) writes nothing and
// names the transaction that already holds it.
func ExamplePost() {
	ctx := context.Background()
	url, drop, err := pgtest.NewDatabase() // a fresh migrated database
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop() //nolint:errcheck
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx)
	// Two stored envelopes, as ingest leaves them (the handlers post for them).
	payEnv, err := envelopetest.Create(ctx, conn, envelopetest.Row{EventType: "payment.succeeded"})
	if err != nil {
		fmt.Println(err)
		return
	}
	refundEnv, err := envelopetest.Create(ctx, conn, envelopetest.Row{EventType: "payment.refunded"})
	if err != nil {
		fmt.Println(err)
		return
	}

	payment := ledger.Posting{Kind: ledger.KindPayment, IdempotencyKey: "standard:m_1:payment:pay_1",
		Merchant: "m_1", Currency: "EUR", AmountMinor: 1999}
	refund := ledger.Posting{Kind: ledger.KindRefund, IdempotencyKey: "standard:m_1:refund:re_1",
		PaymentKey: payment.IdempotencyKey, Merchant: "m_1", Currency: "EUR", AmountMinor: 500}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, p := range []struct {
			env int64
			p   ledger.Posting
		}{{payEnv, payment}, {refundEnv, refund}, {payEnv, payment}} { // the last: a replay
			res, err := ledger.Post(ctx, tx, p.env, p.p)
			if err != nil {
				return err
			}
			if res.Created {
				fmt.Printf("%s %d %s: posted\n", p.p.Kind, p.p.AmountMinor, p.p.Currency)
			} else {
				fmt.Printf("%s %d %s: not posted again (%s)\n", p.p.Kind, p.p.AmountMinor, p.p.Currency, res.Reason)
			}
		}
		balances, err := ledger.Balances(ctx, tx, "m_1")
		for _, b := range balances {
			fmt.Printf("%-12s %s %6d\n", b.Account, b.Currency, b.BalanceMinor)
		}
		return err
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output:
	// payment 1999 EUR: posted
	// refund 500 EUR: posted
	// payment 1999 EUR: not posted again (envelope already posted)
	// psp_clearing EUR   1499
	// refunds      EUR    500
	// sales        EUR  -1999
}
