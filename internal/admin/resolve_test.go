package admin

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
	"github.com/inboxhq/inbox/internal/retention"
)

// countsOf returns source's counts by status, as worker stats and the
// metrics read them.
func countsOf(t *testing.T, b *bundle, source string) envelope.SourceCounts {
	t.Helper()
	all, err := envelope.CountBySource(context.Background(), b.pool, false)
	require.NoError(t, err)
	for _, c := range all {
		if c.Source == source {
			return c
		}
	}
	return envelope.SourceCounts{Source: source}
}

// Resolving failed envelopes by filter changes exactly those (not a done
// one the filter also selects, not a failed one outside it) to resolved,
// records who, why and the selection once per envelope, moves them from
// the failed count to the resolved one, and leaves body, result, attempts
// and last error as they were; un-resolving by id makes one failed again,
// recorded too. A dry run counts and changes nothing.
func TestResolveAndUnresolve(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	failed := seedFailed(t, b.pool, "res", 3)
	other := seedFailed(t, b.pool, "other", 1)
	done := envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "res", Status: "done"})
	type snapshot struct {
		Body             []byte
		Attempts         int
		LastError        string
		ProcessedAt      time.Time
		SHA              []byte
		PayloadPresent   bool
		ResultPresentNow bool
	}
	read := func(id int64) snapshot {
		var s snapshot
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT body, attempts, coalesce(last_error, ''), processed_at, body_sha256, payload IS NOT NULL, result IS NOT NULL
			FROM envelope_with_body WHERE id = $1`, id).Scan(&s.Body, &s.Attempts, &s.LastError, &s.ProcessedAt, &s.SHA, &s.PayloadPresent, &s.ResultPresentNow))
		return s
	}
	before := read(failed[0])
	require.Equal(t, int64(3), countsOf(t, b, "res").Failed)

	dry, err := Resolve(ctx, b.pool, ResolveRequest{Filter: Filter{Source: "res"}, DryRun: true})
	require.NoError(t, err)
	require.Equal(t, []int{3, 3}, []int{dry.Matched, dry.Changed})
	require.Len(t, dry.Sample, 3)
	require.Equal(t, "failed", b.status(t, failed[0]), "a dry run changes nothing")

	_, err = Resolve(ctx, b.pool, ResolveRequest{Filter: Filter{Source: "res"}, Actor: "alice"})
	require.ErrorContains(t, err, "a reason is required")
	_, err = Resolve(ctx, b.pool, ResolveRequest{Filter: Filter{Status: envelope.StatusFailed}, Actor: "alice", Reason: "all of them"})
	require.ErrorContains(t, err, "besides the status", "every failed envelope at once is not one decision")
	_, err = Resolve(ctx, b.pool, ResolveRequest{Filter: Filter{Source: "res", Status: envelope.StatusDone}, Actor: "alice", Reason: "x"})
	require.ErrorContains(t, err, "applies to failed envelopes only")
	_, err = Resolve(ctx, b.pool, ResolveRequest{Filter: Filter{IDs: []int64{failed[0], 999999999999}}, Actor: "alice", Reason: "x"})
	require.True(t, errors.As(err, new(*NotFoundError)), "%v", err)
	require.Equal(t, "failed", b.status(t, failed[0]), "an unknown id changes nothing")

	res, err := Resolve(ctx, b.pool, ResolveRequest{Filter: Filter{Source: "res"}, Actor: "alice", Reason: "INC-7: refunded by hand"})
	require.NoError(t, err)
	require.Equal(t, []int{3, 3}, []int{res.Matched, res.Changed})
	require.Equal(t, failed, res.IDs)
	for _, id := range failed {
		require.Equal(t, "resolved", b.status(t, id))
	}
	require.Equal(t, "failed", b.status(t, other[0]), "outside the filter")
	require.Equal(t, "done", b.status(t, done), "not failed")
	require.Equal(t, before, read(failed[0]), "nothing but the status changes")
	c := countsOf(t, b, "res")
	require.Equal(t, []int64{0, 3, 1, 4}, []int64{c.Failed, c.Resolved, c.Done, c.Total})

	d, err := Show(ctx, b.pool, failed[0], ShowOptions{})
	require.NoError(t, err)
	require.Len(t, d.Resolutions, 1)
	r := d.Resolutions[0]
	require.Equal(t, []string{"resolve", "alice", "INC-7: refunded by hand", res.BatchID}, []string{r.Action, r.Actor, r.Reason, r.BatchID})
	require.JSONEq(t, `{"source":"res"}`, string(r.Filter))

	// Again: nothing failed is left to resolve.
	again, err := Resolve(ctx, b.pool, ResolveRequest{Filter: Filter{Source: "res"}, Actor: "alice", Reason: "twice"})
	require.NoError(t, err)
	require.Equal(t, []int{0, 0}, []int{again.Matched, again.Changed})

	un, err := Resolve(ctx, b.pool, ResolveRequest{Filter: Filter{IDs: []int64{failed[1], done}}, Actor: "bob", Reason: "resolved by mistake", Undo: true})
	require.NoError(t, err)
	require.Equal(t, []int64{failed[1]}, un.IDs, "the done one is not resolved: left alone")
	require.Equal(t, "failed", b.status(t, failed[1]))
	c = countsOf(t, b, "res")
	require.Equal(t, []int64{1, 2}, []int64{c.Failed, c.Resolved})
	d, err = Show(ctx, b.pool, failed[1], ShowOptions{})
	require.NoError(t, err)
	require.Len(t, d.Resolutions, 2)
	require.Equal(t, []string{"resolve", "unresolve"}, []string{d.Resolutions[0].Action, d.Resolutions[1].Action})
	require.Equal(t, "bob", d.Resolutions[1].Actor)

	// With a limit: one at a time, and it says more are left.
	lim, err := Resolve(ctx, b.pool, ResolveRequest{Filter: Filter{Status: envelope.StatusResolved, Source: "res"}, Undo: true, Actor: "bob", Reason: "one", Limit: 1})
	require.NoError(t, err)
	require.Equal(t, 1, lim.Changed)
	require.True(t, lim.LimitReached)
}

// A resolved envelope's body goes with the body purge, as a done one's
// does, once both its processing and its last resolution are older than
// the body window (one resolved today keeps it, so that an un-resolve can
// still be followed by a replay); a failed one's is kept.
func TestResolvedBodiesArePurged(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	old := time.Now().Add(-40 * 24 * time.Hour)
	ids := envelopetest.InsertMany(t, b.pool, 2, func(int) envelopetest.Row {
		return envelopetest.Row{Source: "purge", Status: "failed", ReceivedAt: time.Now(), ProcessedAt: old}
	})
	_, err := Resolve(ctx, b.pool, ResolveRequest{Filter: Filter{IDs: ids[:1]}, Actor: "alice", Reason: "closed"})
	require.NoError(t, err)
	purge := func() (int64, []bool) {
		rep, err := retention.Purge(ctx, b.pool, retention.Config{BodyAfter: 30 * 24 * time.Hour, DeleteAfter: 90 * 24 * time.Hour, BatchSize: 100})
		require.NoError(t, err)
		var purged []bool
		for _, id := range ids {
			var p bool
			require.NoError(t, b.pool.QueryRow(ctx, `SELECT body IS NULL FROM envelope_with_body WHERE id = $1`, id).Scan(&p))
			purged = append(purged, p)
		}
		return rep.BodiesDropped, purged
	}
	n, purged := purge()
	require.Equal(t, []any{int64(0), []bool{false, false}}, []any{n, purged}, "resolved today: kept")
	_, err = b.pool.Exec(ctx, `UPDATE envelope_resolution SET at = $2 WHERE envelope_id = $1`, ids[0], old)
	require.NoError(t, err)
	n, purged = purge()
	require.Equal(t, []any{int64(1), []bool{true, false}}, []any{n, purged}, "the resolved body went, the failed one stayed")
}

// A resolved envelope never holds its partition: the day's partition goes
// at delete-after with it, counted among the envelopes dropped, and its
// envelope_resolution rows go with it.
func TestResolvedEnvelopesGoWithTheirPartition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	old := time.Now().Add(-100 * 24 * time.Hour)
	id := envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "drop", Status: "failed", ReceivedAt: old, ProcessedAt: old})
	_, err := Resolve(ctx, b.pool, ResolveRequest{Filter: Filter{IDs: []int64{id}}, Actor: "alice", Reason: "closed"})
	require.NoError(t, err)
	rep, err := retention.Purge(ctx, b.pool, retention.Config{BodyAfter: 30 * 24 * time.Hour, DeleteAfter: 90 * 24 * time.Hour, BatchSize: 100})
	require.NoError(t, err)
	require.Equal(t, int64(1), rep.EnvelopesDeleted, "the resolved envelope is counted among those its partition took")
	var left int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM envelope WHERE id = $1) + (SELECT count(*) FROM envelope_resolution WHERE envelope_id = $1)`, id).Scan(&left))
	require.Zero(t, left)
}

// A replay leaves resolved envelopes alone: a filter without a status
// skips them, and asking for them by status or by id is refused, with what
// to do; un-resolved, the same replay takes them.
func TestReplayLeavesResolvedEnvelopesAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ids := seedFailed(t, b.pool, "rr", 2)
	_, err := Resolve(ctx, b.pool, ResolveRequest{Filter: Filter{IDs: ids[:1]}, Actor: "alice", Reason: "refunded by hand"})
	require.NoError(t, err)

	dry, err := DryRun(ctx, b.pool, Filter{Source: "rr"}, 0)
	require.NoError(t, err)
	require.Equal(t, 1, dry.Matched, "the resolved one is not selected")
	res, err := Replay(ctx, b.pool, b.jobs, req(Filter{Source: "rr"}))
	require.NoError(t, err)
	require.Equal(t, 1, res.Replayed)
	require.Equal(t, "resolved", b.status(t, ids[0]))

	_, err = Replay(ctx, b.pool, b.jobs, req(Filter{IDs: ids[:1]}))
	var resolved *ResolvedError
	require.ErrorAs(t, err, &resolved)
	require.Equal(t, ids[:1], resolved.IDs)
	require.ErrorContains(t, err, "un-resolve it first")
	_, err = DryRun(ctx, b.pool, Filter{Status: envelope.StatusResolved, Source: "rr"}, 0)
	require.ErrorContains(t, err, "resolved envelopes are not replayed")
	require.Equal(t, "resolved", b.status(t, ids[0]))

	_, err = Resolve(ctx, b.pool, ResolveRequest{Filter: Filter{IDs: ids[:1]}, Actor: "alice", Reason: "FX added: replay it", Undo: true})
	require.NoError(t, err)
	res, err = Replay(ctx, b.pool, b.jobs, req(Filter{IDs: ids[:1]}))
	require.NoError(t, err)
	require.Equal(t, 1, res.Replayed)
	require.Equal(t, "pending", b.status(t, ids[0]))
}
