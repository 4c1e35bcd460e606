package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/cli"
	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
	"github.com/inboxhq/inbox/internal/pgtest"
)

// purgeEnv returns a getenv reading from env.
func purgeEnv(env map[string]string) func(string) string {
	return func(k string) string { return env[k] }
}

func runPurgeCmd(t *testing.T, env map[string]string, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), append([]string{"purge"}, args...), purgeEnv(env), &stdout, &stderr)
	return stdout.String(), stderr.String(), err
}

func TestPurgeRejectsBadFlagsWithExitStatus2(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"unknown flag", nil, []string{"--nope"}, "flag provided but not defined"},
		{"extra argument", nil, []string{"now"}, `unexpected argument "now"`},
		{"zero body-after", nil, []string{"--body-after", "0s"}, "--body-after must be positive"},
		{"negative delete-after", nil, []string{"--delete-after", "-1h"}, "delete-after -1h must be positive"},
		{"zero batch size", nil, []string{"--batch-size", "0"}, "--batch-size must be positive"},
		{"tombstones shorter than bodies", nil, []string{"--body-after", "48h", "--delete-after", "24h"}, "delete-after 1d is shorter than body-after 2d"},
		{"not a duration", nil, []string{"--body-after", "30 days"}, "invalid value"},
		{"bad environment", map[string]string{"WORKER_PURGE_DELETE_AFTER": "90 days"}, nil, "WORKER_PURGE_DELETE_AFTER"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// No DATABASE_URL: a bad command line fails before connecting.
			stdout, _, err := runPurgeCmd(t, tc.env, tc.args...)
			require.Error(t, err)
			require.ErrorContains(t, err, tc.want)
			require.Equal(t, 2, exitCode(err), "exit status for %v", err)
			require.Empty(t, stdout)
		})
	}
}

func TestPurgeHelpAndMissingDatabase(t *testing.T) {
	t.Parallel()
	_, stderr, err := runPurgeCmd(t, nil, "-h")
	require.ErrorIs(t, err, flag.ErrHelp)
	require.Contains(t, stderr, "usage: worker purge")
	require.Contains(t, stderr, "-dry-run")

	_, _, err = runPurgeCmd(t, nil, "--dry-run")
	require.ErrorContains(t, err, "DATABASE_URL is not set")
	require.Equal(t, 1, exitCode(err))
}

// purgeSeed stores envelopes of every kind the purge must tell apart.
func purgeSeed(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	now := time.Now()
	seed := []struct {
		status string
		age    int // days since it was received and processed
	}{{"done", 100}, {"ignored", 95}, {"done", 40}, {"done", 35}, {"ignored", 31}, {"done", 5}, {"pending", 2}, {"failed", 100}}
	ids := envelopetest.InsertMany(t, pool, len(seed), func(i int) envelopetest.Row {
		at := now.Add(-time.Duration(seed[i].age) * 24 * time.Hour)
		return envelopetest.Row{Source: "gh", Provider: "github", DeliveryID: fmt.Sprintf("d%d", i+1), EventType: "push",
			Status: seed[i].status, Body: []byte(`{}`), NoPayload: true, ReceivedAt: at, ProcessedAt: at, Attempts: 1}
	})
	for i, id := range ids {
		if seed[i].status != "pending" {
			at := now.Add(-time.Duration(seed[i].age) * 24 * time.Hour)
			envelopetest.InsertAttempt(t, pool, envelopetest.Attempt{EnvelopeID: id, Outcome: seed[i].status, StartedAt: at, FinishedAt: now})
		}
	}
}

func purgeState(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var s string
	err := pool.QueryRow(context.Background(), `
		SELECT string_agg(format('%s:%s:%s', delivery_id, body IS NOT NULL, body_purged_at IS NOT NULL), ' ' ORDER BY id) FROM envelope_with_body`).Scan(&s)
	require.NoError(t, err)
	return s
}

func TestPurgeDryRunThenRealRunAsJSON(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	purgeSeed(t, pool)
	env := map[string]string{"DATABASE_URL": url}
	before := purgeState(t, pool)

	type report struct {
		BodyAfter        string `json:"body_after"`
		DeleteAfter      string `json:"delete_after"`
		BatchSize        int    `json:"batch_size"`
		DryRun           bool   `json:"dry_run"`
		BodyCutoff       string `json:"body_cutoff"`
		BodiesDropped    int64  `json:"bodies_dropped"`
		EnvelopesDeleted int64  `json:"envelopes_deleted"`
		Batches          int    `json:"batches"`
	}
	stdout, _, err := runPurgeCmd(t, env, "--dry-run", "--json", "--batch-size", "2")
	require.NoError(t, err)
	var dry report
	require.NoError(t, json.Unmarshal([]byte(stdout), &dry), stdout)
	require.Equal(t, before, purgeState(t, pool), "the dry run changed something")
	require.NotEmpty(t, dry.BodyCutoff)
	dry.BodyCutoff = ""
	require.Equal(t, report{
		BodyAfter: "720h0m0s", DeleteAfter: "2160h0m0s", BatchSize: 2, DryRun: true,
		BodiesDropped: 3, EnvelopesDeleted: 3, Batches: 2,
	}, dry)

	stdout, _, err = runPurgeCmd(t, env, "--json", "--batch-size", "2")
	require.NoError(t, err)
	var real report
	require.NoError(t, json.Unmarshal([]byte(stdout), &real), stdout)
	real.BodyCutoff = ""
	dry.DryRun = false
	require.Equal(t, dry, real)
	// d1 and d8 (failed) went with their day's partition, d2 with its own.
	require.Equal(t, "d3:f:t d4:f:t d5:f:t d6:t:f d7:t:f", purgeState(t, pool))
}

func TestPurgePrintsAnAlignedTable(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	purgeSeed(t, pool)

	// Windows from the environment, as the periodic job reads them.
	env := map[string]string{"DATABASE_URL": url, "WORKER_PURGE_BODY_AFTER": "36h", "WORKER_PURGE_DELETE_AFTER": "960h"}
	stdout, _, err := runPurgeCmd(t, env, "--dry-run")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
	require.Len(t, lines, 7, stdout)
	require.Contains(t, lines[0], "dry run: nothing was changed")
	require.Regexp(t, `^bodies to drop +4 +done/ignored, processed before \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ \(body-after 1d12h\)$`, lines[1])
	require.Regexp(t, `^envelopes to delete +3 +in partitions stored before .* \(delete-after 40d\), with their attempts, duplicates, conflicts, replays$`, lines[2])
	require.Regexp(t, `^  partition \d{8} +would drop +2 envelopes, stored before \d{4}-\d\d-\d\d 00:00:00Z$`, lines[3])
	require.Regexp(t, `^  partition \d{8} +would drop +1 envelope, stored before .*Z$`, lines[4])
	require.Regexp(t, `^keys swept +0 +dedup keys of deleted envelopes$`, lines[5])
	require.Regexp(t, `^batches +1 +of up to 1000 bodies, one transaction each$`, lines[6])
	// Aligned: every value starts in the same column.
	col := strings.IndexAny(lines[1], "0123456789")
	for _, l := range lines[2:] {
		require.Regexp(t, `^(\d|would drop)`, l[col:], "misaligned: %q", l)
	}

	stdout, _, err = runPurgeCmd(t, env)
	require.NoError(t, err)
	require.Contains(t, stdout, "bodies dropped")
	require.Contains(t, stdout, "envelopes deleted")
	require.NotContains(t, stdout, "dry run")
	require.Equal(t, "d3:f:t d4:f:t d5:f:t d6:f:t d7:t:f", purgeState(t, pool))
}

func TestPurgeReportsUsageErrorsAsUsageErrors(t *testing.T) {
	t.Parallel()
	_, _, err := runPurgeCmd(t, nil, "--batch-size", "-3")
	var u cli.UsageError
	require.True(t, errors.As(err, &u))
}
