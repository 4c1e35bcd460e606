package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The group roles migration 00110_roles.sql creates.
const (
	RoleIngest = "inbox_ingest"
	RoleWorker = "inbox_worker"
	RoleAdmin  = "inbox_admin"
)

// RoleURL returns dbURL with its user replaced by a new LOGIN role that is a
// member of group (RoleIngest, RoleWorker, RoleAdmin) and nothing else, so
// the code under test runs with exactly the group's privileges. The role is
// dropped when t ends (and, if the test binary dies, by a later run).
func RoleURL(t testing.TB, dbURL, group string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := fmt.Sprintf("inbox_test_%d_%d_%d_role", os.Getpid(), time.Now().UnixNano()%1e6, dbCounter.Add(1))
	admin, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE ROLE "+pgx.Identifier{name}.Sanitize()+" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE IN ROLE "+pgx.Identifier{group}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create role: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			t.Logf("pgtest: drop role %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		id := pgx.Identifier{name}.Sanitize()
		// Its sessions first (a process the test started may linger).
		_, _ = c.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", name)
		_, _ = c.Exec(ctx, "DROP OWNED BY "+id)
		if _, err := c.Exec(ctx, "DROP ROLE IF EXISTS "+id); err != nil {
			t.Logf("pgtest: drop role %s: %v", name, err)
		}
	})
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("pgtest: bad URL: %v", err)
	}
	u.User = url.User(name)
	return u.String()
}
