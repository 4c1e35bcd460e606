package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestClusterSurvivesImmediateStop(t *testing.T) {
	t.Parallel()
	c := StartCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	conn, err := pgx.Connect(ctx, c.URL())
	require.NoError(t, err)
	for setting, want := range map[string]string{
		"fsync": "on", "synchronous_commit": "on", "listen_addresses": "127.0.0.1",
	} {
		var got string
		require.NoError(t, conn.QueryRow(ctx, "SELECT current_setting($1)", setting).Scan(&got))
		assert.Equal(t, want, got, setting)
	}
	_, err = conn.Exec(ctx, "CREATE TABLE acked (id int PRIMARY KEY); INSERT INTO acked SELECT generate_series(1, 100)")
	require.NoError(t, err)
	port := c.Port()

	// A crash: the committed rows must survive it.
	require.NoError(t, c.Stop(StopImmediate))
	require.False(t, c.Running(), "Running() after Stop")
	_, err = conn.Exec(ctx, "SELECT 1")
	require.Error(t, err, "query on a stopped cluster succeeded")
	conn.Close(ctx)
	require.NoError(t, c.Start())
	require.Equal(t, port, c.Port(), "port across restart")
	conn, err = pgx.Connect(ctx, c.URL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	require.Equal(t, 100, Count(t, conn, "SELECT count(*) FROM acked"), "committed rows after an immediate stop")
	// Stop and Start are idempotent.
	require.NoError(t, c.Start())
	require.NoError(t, c.Stop(StopFast))
	require.NoError(t, c.Stop(StopFast))
}

func TestClustersAreSeparate(t *testing.T) {
	t.Parallel()
	a, b := StartCluster(t), StartCluster(t)
	require.NotEqual(t, a.Port(), b.Port(), "two clusters share a port")
	require.NotEqual(t, a.DataDir(), b.DataDir(), "two clusters share a data directory")
	require.NoError(t, a.Stop(StopImmediate))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, b.URL())
	require.NoError(t, err, "b after a stopped")
	conn.Close(ctx)
}

// CI=true (or 1, TRUE) turns environment skips into failures; unset or false
// keeps them skips.
func TestInCI(t *testing.T) {
	for v, want := range map[string]bool{"true": true, "1": true, "TRUE": true, "": false, "false": false, "0": false, "nope": false} {
		t.Setenv("CI", v)
		assert.Equal(t, want, InCI(), "CI=%q: InCI()", v)
	}
}
