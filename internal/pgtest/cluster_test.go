package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestClusterSurvivesImmediateStop(t *testing.T) {
	t.Parallel()
	c := StartCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		t.Fatal(err)
	}
	for setting, want := range map[string]string{
		"fsync": "on", "synchronous_commit": "on", "listen_addresses": "127.0.0.1",
	} {
		var got string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", setting).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s = %q, want %q", setting, got, want)
		}
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE acked (id int PRIMARY KEY); INSERT INTO acked SELECT generate_series(1, 100)"); err != nil {
		t.Fatal(err)
	}
	port := c.Port()

	// A crash: the committed rows must survive it.
	if err := c.Stop(StopImmediate); err != nil {
		t.Fatal(err)
	}
	if c.Running() {
		t.Fatal("Running() after Stop")
	}
	if _, err := conn.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("query on a stopped cluster succeeded")
	}
	conn.Close(ctx)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	if c.Port() != port {
		t.Fatalf("port changed across restart: %d then %d", port, c.Port())
	}
	conn, err = pgx.Connect(ctx, c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM acked").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 100 {
		t.Fatalf("%d committed rows after an immediate stop, want 100", n)
	}
	// Stop and Start are idempotent.
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(StopFast); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(StopFast); err != nil {
		t.Fatal(err)
	}
}

func TestClustersAreSeparate(t *testing.T) {
	t.Parallel()
	a, b := StartCluster(t), StartCluster(t)
	if a.Port() == b.Port() || a.DataDir() == b.DataDir() {
		t.Fatalf("two clusters share port %d/%d or data %s/%s", a.Port(), b.Port(), a.DataDir(), b.DataDir())
	}
	if err := a.Stop(StopImmediate); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, b.URL())
	if err != nil {
		t.Fatalf("b after a stopped: %v", err)
	}
	conn.Close(ctx)
}

// CI=true (or 1, TRUE) turns environment skips into failures; unset or false
// keeps them skips.
func TestInCI(t *testing.T) {
	for v, want := range map[string]bool{"true": true, "1": true, "TRUE": true, "": false, "false": false, "0": false, "nope": false} {
		t.Setenv("CI", v)
		if got := InCI(); got != want {
			t.Errorf("CI=%q: InCI() = %v, want %v", v, got, want)
		}
	}
}
