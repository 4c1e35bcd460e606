package pgtest_test

import (
	"context"
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

func TestTxIsRolledBackWhenTheTestEnds(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	t.Run("writes", func(t *testing.T) {
		tx := pgtest.Tx(t, pool)
		_, err := tx.Exec(context.Background(), `CREATE TABLE scratch (id int)`)
		require.NoError(t, err)
		require.Equal(t, 0, pgtest.Count(t, tx, `SELECT count(*) FROM scratch`))
	})
	require.False(t, pgtest.Scalar[bool](t, pool, `SELECT to_regclass('scratch') IS NOT NULL`), "the subtest's transaction was rolled back")

	t.Run("ended by the test", func(t *testing.T) {
		tx := pgtest.Tx(t, pool)
		require.NoError(t, tx.Rollback(context.Background()))
	})
}
