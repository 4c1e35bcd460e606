package pg_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/pg"
	"github.com/inboxhq/inbox/internal/pgtest"
)

func TestExplainSchema(t *testing.T) {
	t.Parallel()
	url := "postgres://admin:hunter2secret@db.internal:5432/postgres"
	missing := fmt.Errorf("count by source: %w", &pgconn.PgError{Code: "42P01", Message: `relation "envelope" does not exist`})
	err := pg.ExplainSchema(missing, url)
	require.ErrorIs(t, err, pg.ErrNoSchema)
	require.Contains(t, err.Error(), `relation "envelope" does not exist`)
	require.Contains(t, err.Error(), "worker migrate")
	require.Contains(t, err.Error(), `eval "$(make -s env)"`)
	require.Contains(t, err.Error(), "db.internal:5432/postgres")
	require.NotContains(t, err.Error(), "hunter2secret")

	other := &pgconn.PgError{Code: "42501", Message: "permission denied"}
	require.Same(t, error(other), pg.ExplainSchema(other, url), "other errors pass through")
	require.NoError(t, pg.ExplainSchema(nil, url))
	plain := errors.New("boom")
	require.Equal(t, plain, pg.ExplainSchema(plain, url))
}

// MinConns connections are opened in the background at start, without a
// query asking for them; it never exceeds MaxConns.
func TestOpenKeepsMinConns(t *testing.T) {
	t.Parallel()
	pool, err := pg.Open(context.Background(), pgtest.NewURL(t), pg.Options{MaxConns: 4, MinConns: 3})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	pgtest.Eventually(t, 10*time.Second, "three connections open", func() (bool, string) {
		n := pool.Stat().TotalConns()
		return n == 3, fmt.Sprintf("%d open", n)
	})
	capped, err := pg.Open(context.Background(), pgtest.NewURL(t), pg.Options{MaxConns: 2, MinConns: 5})
	require.NoError(t, err)
	t.Cleanup(capped.Close)
	require.Equal(t, int32(2), capped.Config().MinConns)
}
