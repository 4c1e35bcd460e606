package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/admin"
	"github.com/inboxhq/inbox/internal/pgtest"
)

// listed runs envelopes list --json with args and returns the ids, newest
// first.
func (b *admBundle) listed(t *testing.T, args ...string) []int64 {
	t.Helper()
	out, _, err := b.run(t, append([]string{"envelopes", "list", "--json"}, args...)...)
	require.NoError(t, err, args)
	var page admin.ListResult
	require.NoError(t, json.Unmarshal([]byte(out), &page))
	ids := []int64{}
	for _, e := range page.Envelopes {
		ids = append(ids, e.ID)
	}
	return ids
}

func TestEnvelopesListCauseSearchAndHeader(t *testing.T) {
	t.Parallel()
	b := admSetup(t)
	ctx := context.Background()
	failed := b.seedFailed(t, "gh", 3)
	_, err := b.pool.Exec(ctx, `UPDATE envelope SET last_cause = 'unknown_currency' WHERE id = ANY($1)`, failed[:2])
	require.NoError(t, err)
	m1 := b.insert(t, "web", "w-1", []byte(`{"ref":"a","data":{"merchant_id":"m_1","amount":100}}`))
	m2 := b.insert(t, "web", "w-2", []byte(`{"ref":"b","data":{"merchant_id":"m_2","amount":200}}`))

	require.Equal(t, []int64{failed[1], failed[0]}, b.listed(t, "--cause", "unknown_currency"))
	require.Equal(t, []int64{m1}, b.listed(t, "--contains", `{"data":{"merchant_id":"m_1"}}`))
	require.Equal(t, []int64{m2}, b.listed(t, "--field", "data.merchant_id=m_2"))
	require.Equal(t, []int64{m2}, b.listed(t, "--field", "data.amount:=200", "--field", "ref=b"))
	require.Equal(t, []int64{}, b.listed(t, "--field", "data.amount=200"), "a string is not the number")
	require.Equal(t, []int64{m2, m1}, b.listed(t, "--header", "x-github-event=push"))
	require.Equal(t, []int64{}, b.listed(t, "--header", "X-GitHub-Event=pull_request"))

	out, _, err := b.run(t, "envelopes", "list", "--cause", "unknown_currency")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^`+admItoa(failed[1])+`\s+\S+\s+gh\s+push\s+failed\s+1\s+gh-2\s+unknown_currency\s+permanent: seeded$`, out)

	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--cause", "unknown-currency"}, `--cause: "unknown-currency": want one of unknown_currency, `},
		{[]string{"--contains", `{"data":`}, "not valid JSON"},
		{[]string{"--contains", `["m_1"]`}, "want a JSON object"},
		{[]string{"--field", "merchant"}, "want path=value"},
		{[]string{"--field", "data.amount:=1 2"}, "must be JSON"},
		{[]string{"--header", "X-GitHub-Event"}, "want Name=value"},
	} {
		for _, cmd := range [][]string{{"envelopes", "list"}, {"replay", "--dry-run"}} {
			args := append(append([]string{}, cmd...), tc.args...)
			_, _, err := b.run(t, args...)
			require.ErrorContains(t, err, tc.msg, args)
			require.Equal(t, 2, exitCode(err), args)
		}
	}
}

func TestReplayCommandByCause(t *testing.T) {
	t.Parallel()
	b := admSetup(t)
	ctx := context.Background()
	failed := b.seedFailed(t, "gh", 4)
	_, err := b.pool.Exec(ctx, `UPDATE envelope SET last_cause = 'forward_5xx' WHERE id = ANY($1)`, failed[1:3])
	require.NoError(t, err)

	out, _, err := b.run(t, "replay", "--dry-run", "--status", "failed", "--cause", "forward_5xx")
	require.NoError(t, err)
	require.Equal(t, "2", admField(t, out, "matched"))
	require.Equal(t, "2", admField(t, out, "would replay"))
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay`), "a dry run changes nothing")

	out, _, err = b.run(t, "replay", "--reason", "destination back", "--status", "failed", "--cause", "forward_5xx")
	require.NoError(t, err)
	require.Equal(t, "2", admField(t, out, "replayed"))
	require.Equal(t, 2, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay WHERE filter->>'cause' = 'forward_5xx' AND envelope_id = ANY($1)`, failed[1:3]))
	require.Equal(t, 2, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE status = 'failed'`), "other causes stay failed")
}
