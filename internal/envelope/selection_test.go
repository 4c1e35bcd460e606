package envelope_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
	"github.com/inboxhq/inbox/internal/pgtest"
)

func summaryIDs(s []envelope.Summary) []int64 {
	ids := make([]int64, len(s))
	for i, x := range s {
		ids[i] = x.ID
	}
	return ids
}

// A Selection's fields combine with AND, its cursors bound ids, and
// Summaries, Count, Exists and CountLive read the same envelopes.
func TestSelection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	where, args := envelope.Selection{}.Where()
	require.Equal(t, "TRUE", where)
	require.Empty(t, args)

	old := time.Now().Add(-time.Hour)
	a := envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "a", Status: "failed", LastCause: "bad_payload",
		Body: []byte(`{"data":{"merchant_id":"m_1"}}`), Headers: map[string]string{"X-Kind": "k"}, ReceivedAt: old})
	a2 := envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "a", Status: "failed"})
	envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "other", Status: "failed"})
	gone := envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "a", Status: "done", NoBody: true})
	b.exec(t, `UPDATE envelope SET payload = NULL WHERE id = $1`, gone)

	for name, c := range map[string]struct {
		sel  envelope.Selection
		want []int64 // newest first
	}{
		"source":             {envelope.Selection{Source: "a"}, []int64{gone, a2, a}},
		"replayable":         {envelope.Selection{Source: "a", Replayable: true}, []int64{a2, a}},
		"status and cause":   {envelope.Selection{Status: envelope.StatusFailed, Cause: "bad_payload"}, []int64{a}},
		"contains":           {envelope.Selection{Contains: []json.RawMessage{json.RawMessage(`{"data":{"merchant_id":"m_1"}}`)}}, []int64{a}},
		"header in any case": {envelope.Selection{Headers: map[string]string{"x-kind": "k"}}, []int64{a}},
		"until":              {envelope.Selection{Source: "a", Until: old.Add(time.Minute)}, []int64{a}},
		"since":              {envelope.Selection{Source: "a", Since: old.Add(time.Minute)}, []int64{gone, a2}},
		"ids and cursors":    {envelope.Selection{IDs: []int64{a, a2, gone}, AfterID: a, BeforeID: gone}, []int64{a2}},
	} {
		got, err := envelope.Summaries(ctx, b.pool, c.sel, 10, false)
		require.NoError(t, err, name)
		require.Equal(t, c.want, summaryIDs(got), name)
		n, err := envelope.Count(ctx, b.pool, c.sel)
		require.NoError(t, err, name)
		require.Equal(t, len(c.want), n, name)
		ok, err := envelope.Exists(ctx, b.pool, c.sel)
		require.NoError(t, err, name)
		require.True(t, ok, name)
	}
	oldest, err := envelope.Summaries(ctx, b.pool, envelope.Selection{Source: "a"}, 2, true)
	require.NoError(t, err)
	require.Equal(t, []int64{a, a2}, summaryIDs(oldest), "oldest first, limited")
	none, err := envelope.Summaries(ctx, b.pool, envelope.Selection{Source: "nobody"}, 2, false)
	require.NoError(t, err)
	require.NotNil(t, none)
	require.Empty(t, none)
	ok, err := envelope.Exists(ctx, b.pool, envelope.Selection{Source: "nobody"})
	require.NoError(t, err)
	require.False(t, ok)

	missing, err := envelope.Missing(ctx, b.pool, []int64{a, 999999, 999998})
	require.NoError(t, err)
	require.Equal(t, []int64{999998, 999999}, missing)
	purged, err := envelope.Purged(ctx, b.pool, []int64{a, gone})
	require.NoError(t, err)
	require.Equal(t, []int64{gone}, purged)
}

// LockForReplay locks a batch in id order and marks the envelopes with a
// live job; RecordReplays resets the others to pending with an audit row
// each; CountLive counts the live ones of a selection.
func TestLockForReplayAndRecordReplays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	queued := b.store1(t, "replay-queued")
	done := envelopetest.Insert(t, b.pool, envelopetest.Row{Status: "done"})
	sel := envelope.Selection{IDs: []int64{queued, done}}
	n, err := envelope.CountLive(ctx, b.pool, sel)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		got, err := envelope.LockForReplay(ctx, tx, sel, 10)
		require.NoError(t, err)
		require.Len(t, got, 2)
		require.Equal(t, envelope.ReplayCandidate{ID: queued, Status: envelope.StatusPending, Source: "src", Live: true}, got[0])
		require.Equal(t, envelope.ReplayCandidate{ID: done, Status: envelope.StatusDone, Source: "src"}, got[1])
		return envelope.RecordReplays(ctx, tx, []envelope.Replayed{{EnvelopeID: done, PriorStatus: envelope.StatusDone, JobID: 42}},
			envelope.ReplayAudit{Actor: "alice", Reason: "why", Filter: []byte(`{"ids":[1]}`), BatchID: "6f1c2b8e-0000-4000-8000-000000000000"})
	}))
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE id = $1 AND status = 'pending' AND processed_at IS NULL`, done))
	rows, err := envelope.Replays(ctx, b.pool, done)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, "alice", rows[0].Actor)
	require.Equal(t, "done", rows[0].PriorStatus)
	require.Equal(t, int64(42), *rows[0].JobID)
	require.JSONEq(t, `{"ids":[1]}`, string(rows[0].Filter))
}

// LoadDetail reads the whole row, without the body when asked; an unknown
// id is ErrNotFound. The per-envelope lists are empty, not nil.
func TestLoadDetail(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := envelopetest.Insert(t, b.pool, envelopetest.Row{Body: []byte(`{"a":1}`), Headers: map[string]string{"X-A": "b"}})
	d, err := envelope.LoadDetail(ctx, b.pool, id, false)
	require.NoError(t, err)
	require.Equal(t, id, d.ID)
	require.Equal(t, []byte(`{"a":1}`), d.Body)
	require.Equal(t, map[string]string{"X-A": "b"}, d.Headers)
	require.Len(t, d.BodySHA256, 32)
	require.Equal(t, "webhook", d.Origin)
	d, err = envelope.LoadDetail(ctx, b.pool, id, true)
	require.NoError(t, err)
	require.Nil(t, d.Body, "not read")
	_, err = envelope.LoadDetail(ctx, b.pool, 999999, false)
	require.ErrorIs(t, err, envelope.ErrNotFound)

	at, err := envelope.Attempts(ctx, b.pool, id)
	require.NoError(t, err)
	require.NotNil(t, at)
	require.Empty(t, at)
	c, err := envelope.Conflicts(ctx, b.pool, id)
	require.NoError(t, err)
	require.NotNil(t, c)
	require.Empty(t, c)
}

// A selection by cause without a status (a replay's dry run by cause: the
// failed ones and the pending ones between retries) has an index on every
// partition (migration 00201, partial on last_cause IS NOT NULL; on this
// small database the migration built it on every existing partition, and
// a partition made since gets it when attached), and its plan can use it.
func TestCauseSelectionHasAnIndexOnEveryPartition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, `SELECT envelope_partition_create(date_trunc('day', now()) + interval '20 days', date_trunc('day', now()) + interval '21 days')`)
	require.NoError(t, err)
	require.Zero(t, pgtest.Count(t, b.pool, `
		SELECT count(*) FROM pg_inherits i
		 WHERE i.inhparent = 'envelope'::regclass
		   AND NOT EXISTS (SELECT 1 FROM pg_index x WHERE x.indrelid = i.inhrelid
		                      AND pg_get_indexdef(x.indexrelid) LIKE '%(last_cause, id) WHERE (last_cause IS NOT NULL)')`))

	sql, args := envelope.SummariesSQL(envelope.Selection{Cause: "unknown_currency", NotStatus: envelope.StatusResolved}, 50, false)
	tx := pgtest.Tx(t, b.pool)
	_, err = tx.Exec(ctx, `SET LOCAL enable_seqscan = off`)
	require.NoError(t, err)
	rows, err := tx.Query(ctx, "EXPLAIN "+sql, envelope.CustomPlan(args)...)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	plan := strings.Join(lines, "\n")
	require.Regexp(t, `Index Cond: \(last_cause = `, plan)
	require.Regexp(t, `using envelope_\d{8}\w*_(cause|last_cause_id)_idx`, plan)
}
