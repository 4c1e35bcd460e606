package pgtest

import (
	"context"
	"testing"
)

func TestNewPoolIsMigratedAndIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := NewPool(t), NewPool(t)
	for _, table := range []string{"envelope", "envelope_attempt", "ledger_entry", "river_job", "river_migration"} {
		var n int
		if err := a.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			t.Fatalf("table %s: %v", table, err)
		}
	}
	var maxRiver int
	if err := a.QueryRow(ctx, "SELECT max(version) FROM river_migration WHERE line = 'main'").Scan(&maxRiver); err != nil {
		t.Fatal(err)
	}
	if maxRiver < 6 {
		t.Fatalf("river_migration max version = %d, want River's latest", maxRiver)
	}
	if _, err := a.Exec(ctx, "CREATE TABLE only_in_a (x int)"); err != nil {
		t.Fatal(err)
	}
	var found bool
	if err := b.QueryRow(ctx, "SELECT to_regclass('only_in_a') IS NOT NULL").Scan(&found); err != nil {
		t.Fatal(err)
	}
	if found {
		t.Fatal("databases from NewPool are not isolated")
	}
}
