package pgtest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNewPoolIsMigratedAndIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := NewPool(t), NewPool(t)
	for _, table := range []string{"envelope", "envelope_attempt", "ledger_entry", "river_job", "river_migration"} {
		Count(t, a, "SELECT count(*) FROM "+table) // fails naming the query when the table is missing
	}
	require.GreaterOrEqual(t, Count(t, a, "SELECT max(version) FROM river_migration WHERE line = 'main'"), 6, "river_migration max version: River's latest")
	_, err := a.Exec(ctx, "CREATE TABLE only_in_a (x int)")
	require.NoError(t, err)
	require.False(t, Scalar[bool](t, b, "SELECT to_regclass('only_in_a') IS NOT NULL"), "databases from NewPool are not isolated")
}
