package pgtest

import (
	"context"
	"testing"

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
