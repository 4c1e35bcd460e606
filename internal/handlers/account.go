package handlers

import (
	"context"
	"encoding/json"

	"github.com/jackc/pgx/v5"

	"github.com/inboxhq/inbox/internal/config"
	"github.com/inboxhq/inbox/internal/envelope"
)

// accountKey carries a source's configured provider account id in the
// context a handler runs with.
type accountKey struct{}

// sourceAccount returns the provider account id configured for the source
// of the envelope being handled (config account_id), or "".
func sourceAccount(ctx context.Context) string {
	s, _ := ctx.Value(accountKey{}).(string)
	return s
}

// WithAccounts returns a copy of r (r is left as it is) whose handlers run
// with each source's configured account_id (config.Source.AccountID): the
// provider account the source's deliveries belong to, so that sources
// sharing one account (one Stripe account split over two endpoints) post
// to one merchant's ledger. A payload's own account (Stripe Connect's
// "account") still wins.
func WithAccounts(r *Registry, cfg *config.Config) *Registry {
	out := r.clone()
	if cfg == nil {
		return out
	}
	for name, src := range cfg.Sources {
		if src != nil && src.AccountID != "" {
			out.accounts[name] = src.AccountID
		}
	}
	return out
}

// withAccount runs h with the source's account id in its context.
type withAccount struct {
	h       Handler
	account string
}

func (a withAccount) Handle(ctx context.Context, tx pgx.Tx, env *envelope.Envelope) (json.RawMessage, error) {
	return a.h.Handle(context.WithValue(ctx, accountKey{}, a.account), tx, env)
}
