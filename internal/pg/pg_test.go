package pg_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/pg"
	"github.com/inboxhq/inbox/internal/pgtest"
)

// The session settings Options asks for are the server's for every
// connection of the pool.
func TestOpenSetsTheSessionSettings(t *testing.T) {
	t.Parallel()
	url := pgtest.EmptyURL(t)
	ctx := context.Background()
	for _, tc := range []struct {
		o    pg.Options
		want map[string]string
	}{
		{pg.Options{}, map[string]string{"plan_cache_mode": "auto", "statement_timeout": "0", "gin_pending_list_limit": "256kB"}},
		{pg.Options{GenericPlans: true, StatementTimeout: 3 * time.Second, IdleInTxTimeout: 8 * time.Second, ApplicationName: "inbox-test"},
			map[string]string{"plan_cache_mode": "force_generic_plan", "statement_timeout": "3s",
				"idle_in_transaction_session_timeout": "8s", "application_name": "inbox-test"}},
	} {
		pool, err := pg.Open(ctx, url, tc.o)
		require.NoError(t, err)
		for name, want := range tc.want {
			var got string
			require.NoError(t, pool.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&got))
			require.Equal(t, want, got, name)
		}
		pool.Close()
	}
}

// A gin_pending_list_limit the operator set is theirs, and stays: in the
// URL as a parameter, or as a server option.
func TestOpenKeepsTheURLsPendingListLimit(t *testing.T) {
	t.Parallel()
	url := pgtest.EmptyURL(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	for param, want := range map[string]string{
		"gin_pending_list_limit=1024":               "1MB",
		"options=-c%20gin_pending_list_limit%3D2MB": "2MB",
	} {
		pool, err := pg.Open(context.Background(), url+sep+param, pg.Options{})
		require.NoError(t, err)
		var got string
		require.NoError(t, pool.QueryRow(context.Background(), "SELECT current_setting('gin_pending_list_limit')").Scan(&got))
		pool.Close()
		require.Equal(t, want, got, param)
	}
}
