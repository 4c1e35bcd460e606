package ledger

import (
	"context"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"
)

// Writer posts to the ledger inside the one transaction it is bound to,
// which its caller owns (a Writer never begins, commits or rolls back).
// What changes how it writes is fixed when it is made, visible where it is
// made: the account cache it resolves merchants' accounts through, and the
// Deferred it queues payments on. The worker gives each handler run one
// (handlers.Run.Ledger); a handler's test gets the same from
// handlerstest.
//
// A Writer is as safe for concurrent use as its transaction: not at all.
type Writer struct {
	tx       pgx.Tx
	accounts *Accounts
	deferred *Deferred
	// source and deliveryID fill the postings that name no delivery
	// (WithDelivery).
	source, deliveryID string
}

// NewWriter returns a Writer bound to tx.
//
// accounts, when not nil, resolves merchants' accounts, creating missing
// ones in short transactions of its own (see Accounts); nil creates them
// inside tx.
//
// deferred, when not nil, must be tx's (NewDeferred(tx)): Post then queues
// what it can answer without reading the ledger (a payment without
// presentment whose accounts are known) for the caller's one Flush, and
// answers with the transaction id reserved for it. nil writes every
// posting at once. NewWriter panics when deferred belongs to another
// transaction (a savepoint of tx is another transaction): a queued write
// would be flushed outside the savepoint that should undo it.
func NewWriter(tx pgx.Tx, accounts *Accounts, deferred *Deferred) *Writer {
	if deferred != nil && deferred.tx != tx {
		panic("ledger: NewWriter with a Deferred of another transaction")
	}
	return &Writer{tx: tx, accounts: accounts, deferred: deferred}
}

// WithDelivery returns a copy of w that fills in the Source and DeliveryID
// of the postings that name none: the envelope's the caller writes for (the
// worker gives each handler run such a Writer), so that the database checks
// them with one key probe instead of looking the envelope up (see
// Posting.Source). A posting for another envelope is still recorded with its
// own envelope's delivery.
func (w *Writer) WithDelivery(source, deliveryID string) *Writer {
	c := *w
	c.source, c.deliveryID = source, deliveryID
	return &c
}

// Tx is the transaction w writes in.
func (w *Writer) Tx() pgx.Tx { return w.tx }

// Post records p for the envelope envelopeID in w's transaction: see the
// package function Post for what it writes and its errors. With a Deferred,
// a payment Post queues is written by its Flush; Result names the
// transaction it will have, with Created true.
func (w *Writer) Post(ctx context.Context, envelopeID int64, p Posting) (Result, error) {
	if p.Source == "" && p.DeliveryID == "" {
		p.Source, p.DeliveryID = w.source, w.deliveryID
	}
	if !trace.SpanFromContext(ctx).IsRecording() {
		return w.post(ctx, envelopeID, p)
	}
	return w.tracedPost(ctx, envelopeID, p)
}

// defers reports whether Post queues p on w's Deferred: a payment without
// presentment, which it can answer without reading the ledger.
func (w *Writer) defers(p Posting) bool {
	return w.deferred != nil && p.Kind == KindPayment && p.Presentment == nil
}
