package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Beginner is what Tx begins a transaction on: a pool, a connection, or a
// transaction (then a savepoint).
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Tx begins a transaction on db and rolls it back when t ends, before the
// cleanups registered earlier (closing the pool it came from) run. It fails t
// if the transaction cannot begin.
//
// Use it for what a test does in a transaction that must not commit: to
// isolate its writes, or to hold a lock while it watches another session
// wait. A test may still end the transaction itself (Rollback to release a
// lock mid-test, or Commit): the cleanup's rollback of an ended transaction
// does nothing. The cleanup ignores the rollback's error: a transaction whose
// connection was lost is rolled back by the server.
func Tx(t testing.TB, db Beginner) pgx.Tx {
	t.Helper()
	tx, err := db.Begin(context.Background())
	if err != nil {
		t.Fatalf("pgtest: begin: %v", err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}
