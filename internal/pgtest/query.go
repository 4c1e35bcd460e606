package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inboxhq/inbox/internal/pg"
)

// Scalar runs sql, a query of one row and one column, and returns its value
// scanned into a T. It fails t, naming the query, on any error, no row
// included.
func Scalar[T any](t testing.TB, q pg.Querier, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := q.QueryRow(context.Background(), sql, args...).Scan(&v); err != nil {
		t.Fatalf("pgtest: %s: %v", sql, err)
	}
	return v
}

// Count is Scalar for an int, as in SELECT count(*) FROM envelope WHERE
// status = $1.
func Count(t testing.TB, q pg.Querier, sql string, args ...any) int {
	t.Helper()
	return Scalar[int](t, q, sql, args...)
}

// RowsRead returns how many rows and index entries of the table named rel (a
// partition's own name, for a partition) the transaction tx has read so far:
// the rows its sequential scans returned, and the entries its scans of each
// of rel's indexes returned, bitmap scans included
// (pg_stat_get_xact_tuples_returned, which counts the current transaction's
// statements as they ran). It tells a plan that finds a batch's rows by key
// from one that reads a whole table or a whole range of an index, whatever
// the plan was and however it was cached. Only the difference between two
// calls in one transaction means anything: the counts also hold earlier
// transactions' not yet reported.
func RowsRead(t testing.TB, tx pg.Querier, rel string) int64 {
	t.Helper()
	return Scalar[int64](t, tx, `
		SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(r)), 0)::bigint
		  FROM (SELECT $1::regclass::oid AS r UNION ALL SELECT indexrelid FROM pg_index WHERE indrelid = $1::regclass) x`, rel)
}

// ReadIn runs f in a transaction of conn, commits it, and returns how many
// rows and index entries of the tables rels its statements read (RowsRead
// before and after f, summed over rels). It fails t on any error.
func ReadIn(t testing.TB, conn *pgx.Conn, f func(tx pgx.Tx), rels ...string) int64 {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatalf("pgtest: begin: %v", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var read int64
	for _, r := range rels {
		read -= RowsRead(t, tx, r)
	}
	f(tx)
	for _, r := range rels {
		read += RowsRead(t, tx, r)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("pgtest: commit: %v", err)
	}
	return read
}

// Locks is pg_locks restricted to the sessions of the current database, for
// a test's FROM clause ("FROM " + pgtest.Locks + " l"). pg_locks is the
// server's: the databases of the tests running at once are copies of one
// template, with the same table oids, and a lock another test waits for
// would satisfy a wait meant for this one's.
const Locks = `(SELECT l.* FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE a.datname = current_database())`
