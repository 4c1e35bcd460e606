package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/admin"
	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
	"github.com/inboxhq/inbox/internal/pgtest"
)

// admBundle is a migrated database for the admin subcommands' tests.
type admBundle struct {
	url   string
	pool  *pgxpool.Pool
	store *envelope.Store
}

func admSetup(t *testing.T) *admBundle {
	t.Helper()
	url := pgtest.NewURL(t)
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	rc, err := envelope.NewInsertClient(pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	// The commands run as a member of inbox_admin only; pool (the owner's)
	// seeds and checks.
	return &admBundle{url: pgtest.RoleURL(t, url, pgtest.RoleAdmin), pool: pool, store: envelope.NewStore(pool, rc)}
}

// run runs the worker command line with DATABASE_URL set to the test's
// database.
func (b *admBundle) run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	return admRun(context.Background(), b.url, args...)
}

func admRun(ctx context.Context, url string, args ...string) (string, string, error) {
	var stdout, stderr bytes.Buffer
	getenv := func(k string) string {
		if k == "DATABASE_URL" {
			return url
		}
		return ""
	}
	err := run(ctx, args, getenv, &stdout, &stderr)
	return stdout.String(), stderr.String(), err
}

// seedFailed inserts n failed GitHub envelopes of source, with no jobs.
func (b *admBundle) seedFailed(t *testing.T, source string, n int) []int64 {
	t.Helper()
	now := time.Now()
	return envelopetest.InsertMany(t, b.pool, n, func(i int) envelopetest.Row {
		g := i + 1
		return envelopetest.Row{Source: source, Provider: "github", DeliveryID: fmt.Sprintf("%s-%d", source, g), EventType: "push",
			Status: "failed", Body: fmt.Appendf(nil, `{"ref":"refs/heads/b%d"}`, g),
			ReceivedAt: now.Add(-time.Duration(n-g) * time.Second), ProcessedAt: now, Attempts: 1, LastError: "permanent: seeded"}
	})
}

func (b *admBundle) insert(t *testing.T, source, deliveryID string, body []byte) int64 {
	t.Helper()
	res, err := b.store.Insert(context.Background(), envelope.NewDelivery{
		Source: source, Provider: "github", DeliveryID: deliveryID, EventType: "push",
		Body: body, Payload: body, Headers: map[string]string{"X-Hub-Signature-256": "[redacted]", "X-GitHub-Event": "push"},
	})
	require.NoError(t, err)
	return res.EnvelopeID
}

func admItoa(id int64) string { return strconv.FormatInt(id, 10) }

// field returns the value printed after label in a two-column table.
func admField(t *testing.T, out, label string) string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, label+" ") {
			return strings.TrimSpace(strings.TrimPrefix(line, label))
		}
	}
	t.Fatalf("no %q line in:\n%s", label, out)
	return ""
}

func TestReplayCommandByIDs(t *testing.T) {
	t.Parallel()
	b := admSetup(t)
	ids := b.seedFailed(t, "gh", 3)
	queued := b.insert(t, "gh", "live", []byte(`{"ref":"x"}`))

	// Flags may follow the ids.
	out, _, err := b.run(t, "replay", admItoa(ids[0]), admItoa(queued), "--reason", "INC-7 fixed", "--actor", "alice")
	require.NoError(t, err)
	require.Equal(t, "2", admField(t, out, "matched"))
	require.Equal(t, "1", admField(t, out, "replayed"))
	require.Equal(t, "1 (already queued)", admField(t, out, "skipped"))
	require.Equal(t, admItoa(queued), admField(t, out, "skipped ids"))
	require.Equal(t, "1", admField(t, out, "batches"))
	batchID := admField(t, out, "batch id")
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay WHERE envelope_id = $1 AND actor = 'alice'
		AND reason = 'INC-7 fixed' AND batch_id = $2::uuid AND prior_status = 'failed'`, ids[0], batchID))
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay`))

	// --json, and the default actor is the OS user.
	out, _, err = b.run(t, "replay", "--json", "--reason", "again", admItoa(ids[1]))
	require.NoError(t, err)
	var res struct {
		DryRun bool `json:"dry_run"`
		admin.ReplayResult
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.False(t, res.DryRun)
	require.Equal(t, 1, res.Replayed)
	require.Equal(t, 1, res.Matched)
	require.NotEmpty(t, res.BatchID)
	require.Contains(t, out, `"skipped_already_queued": 0`)
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay WHERE envelope_id = $1 AND actor <> ''`, ids[1]))
}

func TestReplayCommandByFilter(t *testing.T) {
	t.Parallel()
	b := admSetup(t)
	b.seedFailed(t, "gh", 12)
	b.seedFailed(t, "other", 2)

	out, _, err := b.run(t, "replay", "--dry-run", "--source", "gh", "--status", "failed", "--since", "1h")
	require.NoError(t, err)
	require.Equal(t, "12", admField(t, out, "matched"))
	require.Equal(t, "12", admField(t, out, "would replay"))
	require.Equal(t, "failed 12", admField(t, out, "by status"))
	require.Contains(t, out, "first 10 by id:")
	require.Contains(t, out, "DELIVERY ID")
	require.Equal(t, 10, strings.Count(out, " gh-"), "a sample of 10")
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay`), "a dry run changes nothing")

	out, _, err = b.run(t, "replay", "--dry-run", "--json", "--source", "gh", "--limit", "5")
	require.NoError(t, err)
	var dry struct {
		DryRun bool `json:"dry_run"`
		admin.DryRunResult
	}
	require.NoError(t, json.Unmarshal([]byte(out), &dry))
	require.True(t, dry.DryRun)
	require.Equal(t, 12, dry.Matched)
	require.Equal(t, 5, dry.WouldReplay)
	require.Len(t, dry.Sample, 10)

	out, stderr, err := b.run(t, "replay", "--reason", "bulk", "--source", "gh", "--status", "failed", "--batch-size", "5", "--until", time.Now().Add(time.Hour).Format(time.RFC3339))
	require.NoError(t, err)
	require.Equal(t, "12", admField(t, out, "replayed"))
	require.Equal(t, "3", admField(t, out, "batches"))
	require.NotContains(t, stderr, "[", "no progress bar when stderr is not a terminal")
	require.Equal(t, 12, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE source = 'gh' AND status = 'pending'`))
	require.Equal(t, 2, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE source = 'other' AND status = 'failed'`))

	out, _, err = b.run(t, "replay", "--reason", "capped", "--source", "other", "--limit", "1")
	require.NoError(t, err)
	require.Equal(t, "1", admField(t, out, "replayed"))
	require.Contains(t, admField(t, out, "limit"), "reached")
}

func TestReplayCommandErrors(t *testing.T) {
	t.Parallel()
	b := admSetup(t)
	ids := b.seedFailed(t, "gh", 1)
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"unknown flag", []string{"replay", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{"missing reason", []string{"replay", admItoa(ids[0])}, 2, "a reason is required"},
		{"blank reason", []string{"replay", "--reason", " ", admItoa(ids[0])}, 2, "a reason is required"},
		{"no selection", []string{"replay", "--reason", "x"}, 2, "at least one filter"},
		{"bad status", []string{"replay", "--reason", "x", "--status", "weird"}, 2, `status "weird"`},
		{"bad since", []string{"replay", "--reason", "x", "--since", "yesterday"}, 2, "--since:"},
		{"bad until", []string{"replay", "--reason", "x", "--source", "gh", "--until", "-3h"}, 2, "--until:"},
		{"backwards window", []string{"replay", "--reason", "x", "--since", "1h", "--until", "2h"}, 2, "must be before"},
		{"bad id", []string{"replay", "--reason", "x", "abc"}, 2, `"abc" is not an envelope id`},
		{"ids and filter", []string{"replay", "--reason", "x", "--source", "gh", admItoa(ids[0])}, 2, "not both"},
		{"bad batch size", []string{"replay", "--reason", "x", "--source", "gh", "--batch-size", "0"}, 2, "--batch-size"},
		{"bad limit", []string{"replay", "--reason", "x", "--source", "gh", "--limit", "-1"}, 2, "limit -1: must not be negative"},
		{"not an int", []string{"replay", "--reason", "x", "--source", "gh", "--limit", "many"}, 2, "invalid value"},
		{"unknown id", []string{"replay", "--reason", "x", admItoa(ids[0]), "987654"}, 1, "envelope 987654 not found"},
		{"unknown id dry run", []string{"replay", "--dry-run", "987654"}, 1, "envelope 987654 not found"},
	} {
		_, _, err := b.run(t, tc.args...)
		require.Error(t, err, tc.name)
		require.Equal(t, tc.code, exitCode(err), "%s: %v", tc.name, err)
		require.ErrorContains(t, err, tc.msg, tc.name)
	}
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay`))
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job`))
}

func TestAdminCommandsHelp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"replay", "-h"}, "usage: worker replay --reason TEXT"},
		{[]string{"replay", "12", "--help"}, "-dry-run"},
		{[]string{"envelopes", "-h"}, "usage: worker envelopes list"},
		{[]string{"envelopes", "list", "-h"}, "-before-id"},
		{[]string{"envelopes", "show", "-h"}, "-no-body"},
		{[]string{"stats", "-h"}, "usage: worker stats"},
	} {
		// No database is needed, or opened, for help.
		_, stderr, err := admRun(context.Background(), "", tc.args...)
		require.ErrorIs(t, err, flag.ErrHelp, tc.args)
		require.Contains(t, stderr, tc.want, tc.args)
	}
}

func TestAdminCommandsNeedDatabaseURL(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"stats"}, {"envelopes", "list"}, {"envelopes", "show", "1"}, {"replay", "--reason", "x", "1"}} {
		_, _, err := admRun(context.Background(), "", args...)
		require.ErrorContains(t, err, "DATABASE_URL is not set", args)
		require.Equal(t, 1, exitCode(err), args)
	}
}

func TestReplayCommandInterruptedBeforeStart(t *testing.T) {
	t.Parallel()
	b := admSetup(t)
	ids := b.seedFailed(t, "gh", 3)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // SIGINT before anything ran
	_, _, err := admRun(ctx, b.url, "replay", "--reason", "x", "--source", "gh")
	require.Error(t, err)
	require.Equal(t, 1, exitCode(err))
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay`))
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE status = 'pending' AND id = ANY($1)`, ids))
}

func TestRenderProgress(t *testing.T) {
	t.Parallel()
	half := admin.Progress{Total: 3000, Scanned: 1500, Replayed: 1490, Skipped: 10}
	require.Equal(t, "[===============               ]  50% 1500/3000 replayed 1490 skipped 10 eta 2s",
		renderProgress(half, 120, 2*time.Second))
	require.Equal(t, "[==========] 100% 3000/3000 replayed 3000 skipped 0 eta -",
		renderProgress(admin.Progress{Total: 3000, Scanned: 3000, Replayed: 3000}, 58, 5*time.Second))
	// More scanned than counted at the start (new arrivals): clamped.
	require.Equal(t, "[==============================] 100% 12/10 replayed 12 skipped 0 eta -",
		renderProgress(admin.Progress{Total: 10, Scanned: 12, Replayed: 12}, 0, time.Second), "unknown width: 80")
	// Work left but less than a second of it: not "0s".
	require.Contains(t, renderProgress(admin.Progress{Total: 100, Scanned: 60}, 80, 100*time.Millisecond), " 60% 60/100 replayed 0 skipped 0 eta <1s")
	// Never wider than the terminal less one column, whatever the counts:
	// at 60 and 80 columns with six-digit counts the line used to wrap.
	big := admin.Progress{Total: 123456, Scanned: 65432, Replayed: 65000, Skipped: 432}
	for _, cols := range []int{20, 40, 60, 80, 100, 200} {
		line := renderProgress(big, cols, 90*time.Second)
		require.LessOrEqual(t, len(line), cols-1, "%d columns: %q", cols, line)
		if cols >= 80 {
			require.Regexp(t, `^\[=+ +\]  53% 65432/123456 replayed 65000 skipped 432 eta 1m20s$`, line, "%d columns", cols)
		}
	}
	require.Equal(t, " 53% 65432/123456 re", renderProgress(big, 21, 90*time.Second), "no room for a bar: the text, cut")
	require.Equal(t, "replay: 65432/123456 (53%) replayed 65000 skipped 432 eta 1m20s", progressLine(big, 90*time.Second))
}

// Off a terminal (a log, CI, a pipe) progress is plain lines, at most one
// per progressEvery plus a last one: no carriage returns or escapes.
func TestProgressOffTerminalIsPlainLines(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	p := newProgress(&buf, time.Now().Add(-progressEvery))
	require.False(t, p.terminal)
	p.update(admin.Progress{Total: 100, Scanned: 50, Replayed: 50})
	p.update(admin.Progress{Total: 100, Scanned: 60, Replayed: 60}) // within progressEvery of the last line
	p.update(admin.Progress{Total: 100, Scanned: 100, Replayed: 99, Skipped: 1})
	p.finish()
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	require.Len(t, lines, 2, buf.String())
	require.Regexp(t, `^replay: 50/100 \(50%\) replayed 50 skipped 0 eta .+$`, lines[0])
	require.Equal(t, "replay: 100/100 (100%) replayed 99 skipped 1 eta -", lines[1])
	require.NotContains(t, buf.String(), "\r")

	buf.Reset()
	newProgress(&buf, time.Now()).finish()
	require.Empty(t, buf.String(), "nothing replayed, nothing printed")
}

// TestReplayCommandInterrupted cancels the context (as SIGINT does) once the
// first batch has committed: the summary reports what committed, and the
// exit status is 1.
func TestReplayCommandInterrupted(t *testing.T) {
	t.Parallel()
	b := admSetup(t)
	b.seedFailed(t, "gh", 500)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// A query error is polled again; should no replay ever commit,
		// the command finishes uninterrupted and the test says so.
		if pgtest.Poll(ctx, time.Minute, time.Millisecond, func() (bool, error) {
			var n int
			err := b.pool.QueryRow(ctx, `SELECT count(*) FROM envelope_replay`).Scan(&n)
			return err == nil && n > 0, nil
		}) == nil {
			cancel()
		}
	}()
	out, _, err := admRun(ctx, b.url, "replay", "--reason", "x", "--source", "gh", "--batch-size", "1")
	require.Error(t, err)
	require.Equal(t, 1, exitCode(err))
	require.ErrorIs(t, err, admin.ErrInterrupted)
	require.Contains(t, admField(t, out, "interrupted"), "yes")
	replayed, err := strconv.Atoi(admField(t, out, "replayed"))
	require.NoError(t, err)
	require.Less(t, replayed, 500)
	require.Equal(t, replayed, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay`))
	require.Equal(t, replayed, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE status = 'pending'`))
	require.Equal(t, replayed, pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job`))
}
