package pgtest_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/pgtest"
)

func TestScalarAndCount(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	require.Equal(t, 0, pgtest.Count(t, pool, `SELECT count(*) FROM envelope WHERE source = $1`, "nobody"))
	require.Equal(t, "x", pgtest.Scalar[string](t, pool, `SELECT $1::text`, "x"))
	require.Equal(t, int64(42), pgtest.Scalar[int64](t, pool, `SELECT 42::bigint`))

	failed := run(t, func(tb testing.TB) { pgtest.Count(tb, pool, `SELECT 1 WHERE false`) })
	require.Equal(t, "pgtest: SELECT 1 WHERE false: no rows in result set", failed)
}
