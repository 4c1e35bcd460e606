package ledger

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Accounts remembers the ids of merchants' accounts and creates missing
// ones in short transactions of their own, committed at once, instead of
// inside the posting's transaction. A posting transaction that creates an
// account holds the unique index entry until it commits, so every other
// transaction posting for that merchant waits for it (for a whole batch of
// envelopes, in the worker) and two that create accounts of two merchants
// in opposite orders deadlock. An account is master data with no balance
// of its own: one created for a posting that then rolls back stays, with no
// entries, which changes no balance.
//
// Give it to NewWriter; a Writer without one creates accounts inside its
// transaction. Safe for
// concurrent use. Accounts are never deleted, so an id once seen is good
// for the life of the database.
type Accounts struct {
	pool *pgxpool.Pool
	mu   sync.RWMutex
	ids  map[accountKey]int64
}

type accountKey struct{ merchant, name string }

// NewAccounts returns an empty cache over pool (which needs a connection
// to spare for the creations).
func NewAccounts(pool *pgxpool.Pool) *Accounts {
	return &Accounts{pool: pool, ids: make(map[accountKey]int64)}
}

// IDs returns the ids of the merchant's named accounts, creating the
// missing ones (committed before it returns).
func (a *Accounts) IDs(ctx context.Context, merchant string, names ...string) (map[string]int64, error) {
	out := make(map[string]int64, len(names))
	var missing []string
	a.mu.RLock()
	for _, n := range names {
		if id, ok := a.ids[accountKey{merchant, n}]; ok {
			out[n] = id
		} else {
			missing = append(missing, n)
		}
	}
	a.mu.RUnlock()
	if len(missing) == 0 {
		return out, nil
	}
	var created map[string]int64
	err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		var err error
		created, err = ensureAccounts(ctx, tx, merchant, missing...)
		return err
	})
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	for n, id := range created {
		a.ids[accountKey{merchant, n}] = id
		out[n] = id
	}
	a.mu.Unlock()
	return out, nil
}

// accountIDs resolves accounts through w's Accounts when it has one, else
// inside its transaction.
func (w *Writer) accountIDs(ctx context.Context, merchant string, names ...string) (map[string]int64, error) {
	if w.accounts != nil {
		return w.accounts.IDs(ctx, merchant, names...)
	}
	return ensureAccounts(ctx, w.tx, merchant, names...)
}

// ensureAccounts returns the ids of the merchant's named accounts, creating
// the missing ones in tx. Safe against concurrent creation: ON CONFLICT DO
// NOTHING waits for a concurrent creator, and names are inserted in sorted
// order so two creators cannot deadlock.
func ensureAccounts(ctx context.Context, tx pgx.Tx, merchant string, names ...string) (map[string]int64, error) {
	names = slices.Sorted(slices.Values(names))
	load := func() (map[string]int64, error) {
		rows, err := tx.Query(ctx, `SELECT name, id FROM ledger_account WHERE merchant = $1 AND name = ANY($2)`, merchant, names)
		if err != nil {
			return nil, fmt.Errorf("load accounts of merchant %q: %w", merchant, err)
		}
		ids := make(map[string]int64, len(names))
		var name string
		var id int64
		_, err = pgx.ForEachRow(rows, []any{&name, &id}, func() error {
			ids[name] = id
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("load accounts of merchant %q: %w", merchant, err)
		}
		return ids, nil
	}
	ids, err := load()
	if err != nil || len(ids) == len(names) {
		return ids, err
	}
	for _, name := range names {
		if _, ok := ids[name]; ok {
			continue
		}
		if _, err := tx.Exec(ctx, `INSERT INTO ledger_account (merchant, name) VALUES ($1, $2) ON CONFLICT DO NOTHING`, merchant, name); err != nil {
			return nil, fmt.Errorf("create account %s of merchant %q: %w", name, merchant, err)
		}
	}
	if ids, err = load(); err != nil {
		return nil, err
	}
	for _, name := range names {
		if _, ok := ids[name]; !ok {
			return nil, fmt.Errorf("account %s of merchant %q missing after creation", name, merchant)
		}
	}
	return ids, nil
}
