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

// WithAccounts returns a Router that decorates next: the handlers it routes
// run with each source's configured account_id (config.Source.AccountID),
// the provider account the source's deliveries belong to, so that sources
// sharing one account (one Stripe account split over two endpoints) post to
// one merchant's ledger. A payload's own account (Stripe Connect's
// "account") still wins. A nil cfg, or one without account ids, gives next's
// routes unchanged.
func WithAccounts(next Router, cfg *config.Config) Router {
	a := accounts{next: next, ids: make(map[string]string)}
	if cfg != nil {
		for name, src := range cfg.Sources {
			if src != nil && src.AccountID != "" {
				a.ids[name] = src.AccountID
			}
		}
	}
	return a
}

// accounts is the Router WithAccounts returns; ids is read-only once made.
type accounts struct {
	next Router
	ids  map[string]string
}

func (a accounts) Route(env *envelope.Envelope) (Handler, bool) {
	h, ok := a.next.Route(env)
	if ok && a.ids[env.Source] != "" {
		h = withAccount{h: h, account: a.ids[env.Source]}
	}
	return h, ok
}

func (a accounts) Outbound(source string) bool { return a.next.Outbound(source) }

// withAccount runs h with the source's account id in its context.
type withAccount struct {
	h       Handler
	account string
}

func (a withAccount) Handle(ctx context.Context, tx pgx.Tx, env *envelope.Envelope) (json.RawMessage, error) {
	return a.h.Handle(context.WithValue(ctx, accountKey{}, a.account), tx, env)
}
