package ingest_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/ingest"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/provider"
	"github.com/inboxhq/inbox/internal/webhooktest"
)

// asRole serves ingest on a pool logged in as a member of group only; the
// bundle's pool (for the test's own queries) stays the superuser's.
func asRole(t *testing.T, group string, opts ingest.Options) (*bundle, string) {
	t.Helper()
	url := pgtest.NewURL(t)
	rolePool, err := pgxpool.New(context.Background(), pgtest.RoleURL(t, url, group))
	require.NoError(t, err)
	t.Cleanup(rolePool.Close)
	b := serve(t, rolePool, opts)
	su, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(su.Close)
	b.pool = su
	return b, url
}

// Everything ingest does works with inbox_ingest's privileges alone: a new
// delivery for each provider, a duplicate, a conflict, a body jsonb cannot
// hold, and readiness.
func TestIngestRunsAsInboxIngest(t *testing.T) {
	t.Parallel()
	b, _ := asRole(t, pgtest.RoleIngest, ingest.Options{})
	for _, p := range provider.Names {
		source, d := sample(p, "role-"+p)
		r := b.send(t, source, d)
		require.Equal(t, http.StatusAccepted, r.code, r.raw)
		d.SignedAt = time.Now().Add(time.Second)
		r = b.send(t, source, d)
		require.Equal(t, http.StatusOK, r.code, r.raw)
	}
	source, d := sample(provider.GitHub, "role-conflict")
	require.Equal(t, http.StatusAccepted, b.send(t, source, d).code)
	d.Body = webhooktest.GitHubPush("refs/heads/other")
	r := b.send(t, source, d)
	require.Equal(t, http.StatusOK, r.code, r.raw) // a conflicting resend: recorded, answered 200
	_, d = sample(provider.Standard, "role-jsonb")
	d.Body = []byte(`{"type":"payment.succeeded","note":"\ud83d"}`)
	r = b.send(t, "payments", d)
	require.Equal(t, http.StatusAccepted, r.code, r.raw)
	env, jobs, conflicts := b.stored(t)
	require.Equal(t, [3]int{6, 6, 1}, [3]int{env, jobs, conflicts})
	resp, err := http.Get(b.url + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// inbox_ingest cannot read bodies, change envelopes or touch the ledger.
func TestInboxIngestCannotReadOrChange(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool, err := pgxpool.New(context.Background(), pgtest.RoleURL(t, url, pgtest.RoleIngest))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ctx := context.Background()
	for _, q := range []string{
		`SELECT body FROM envelope`,
		`SELECT payload FROM envelope`,
		`UPDATE envelope SET status = 'done'`,
		`DELETE FROM envelope`,
		`SELECT * FROM ledger_entry`,
		`INSERT INTO ledger_account DEFAULT VALUES`,
		`DELETE FROM river_job`,
		`SELECT * FROM envelope_conflict`,
		`TRUNCATE envelope_duplicate`,
	} {
		_, err := pool.Exec(ctx, q)
		require.Error(t, err, q)
		require.Contains(t, err.Error(), "SQLSTATE 42501", q)
	}
}

// A role missing a privilege (SQLSTATE 42501) answers 503 with Retry-After,
// not 500: nothing is acknowledged, it is logged at ERROR, and the
// provider's retry succeeds once the grant is fixed.
func TestMissingPrivilegeIs503(t *testing.T) {
	t.Parallel()
	b, _ := asRole(t, pgtest.RoleIngest, ingest.Options{})
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, "REVOKE INSERT ON envelope FROM inbox_ingest") // this test's database only
	require.NoError(t, err)
	source, d := sample(provider.GitHub, "noperm-1")
	r := b.send(t, source, d)
	require.Equal(t, http.StatusServiceUnavailable, r.code, r.raw)
	require.NotEmpty(t, r.header.Get("Retry-After"))
	require.Contains(t, b.logs.String(), `"outcome":"db_permission"`)
	require.Contains(t, b.logs.String(), `"level":"ERROR"`)
	env, jobs, _ := b.stored(t)
	require.Equal(t, [2]int{0, 0}, [2]int{env, jobs})

	_, err = b.pool.Exec(ctx, "GRANT INSERT ON envelope TO inbox_ingest")
	require.NoError(t, err)
	r = b.send(t, source, d)
	require.Equal(t, http.StatusAccepted, r.code, r.raw)
}
