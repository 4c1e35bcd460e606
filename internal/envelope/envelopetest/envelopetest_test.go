package envelopetest_test

import (
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
	"github.com/inboxhq/inbox/internal/pgtest"
)

func TestInsertDefaultsAndStates(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()

	id := envelopetest.Insert(t, pool, envelopetest.Row{})
	env, err := envelope.Get(ctx, pool, id)
	require.NoError(t, err)
	require.Equal(t, envelope.StatusPending, env.Status)
	require.Equal(t, "src", env.Source)
	require.Equal(t, "standard", env.Provider)
	sum := sha256.Sum256(env.Body)
	require.Equal(t, sum[:], env.BodySHA256, "the stored digest is the body's")
	require.Nil(t, env.ProcessedAt)

	other := envelopetest.Insert(t, pool, envelopetest.Row{})
	require.NotEqual(t, id, other, "default delivery ids differ")

	at := time.Now().Add(-48 * time.Hour).UTC().Truncate(time.Microsecond)
	id = envelopetest.Insert(t, pool, envelopetest.Row{Source: "gh", Provider: "github", EventType: "push",
		Status: "failed", ReceivedAt: at, Attempts: 3, LastError: "permanent: no", NoBody: true,
		Body: []byte(`{"ref":"main"}`), Headers: map[string]string{"X-GitHub-Event": "push"}})
	env, err = envelope.Get(ctx, pool, id)
	require.NoError(t, err)
	require.Equal(t, envelope.StatusFailed, env.Status)
	require.Nil(t, env.Body, "purged")
	require.JSONEq(t, `{"ref":"main"}`, string(env.BodyOrPayload()))
	require.Equal(t, at, env.ProcessedAt.UTC(), "a final row is processed at its receipt unless told")
	require.Equal(t, 3, env.Attempts)
	require.Equal(t, "push", env.Headers["X-GitHub-Event"])
}

func TestInsertManyKeepsOrderAndDefaults(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	require.Empty(t, envelopetest.InsertMany(t, pool, 0, nil))

	at := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
	ids := envelopetest.InsertMany(t, pool, 3000, func(i int) envelopetest.Row {
		r := envelopetest.Row{Source: "bulk", ReceivedAt: at.Add(time.Duration(i) * time.Second)}
		switch i % 3 {
		case 1:
			r.Status, r.LastError, r.NoPayload = "failed", "permanent: x", true
		case 2:
			r.Status, r.NoBody, r.BodyPurgedAt = "done", true, at.Add(time.Minute)
		}
		return r
	})
	require.Len(t, ids, 3000)
	for i := 1; i < len(ids); i++ {
		require.Less(t, ids[i-1], ids[i])
	}
	require.Equal(t, at.Add(2999*time.Second), pgtest.Scalar[time.Time](t, pool, `SELECT received_at FROM envelope WHERE id = $1`, ids[2999]).UTC(), "ids are in the rows' order")
	require.Equal(t, 1000, pgtest.Count(t, pool, `SELECT count(*) FROM envelope WHERE status = 'pending' AND payload IS NOT NULL AND last_error IS NULL AND body_purged_at IS NULL`))
	require.Equal(t, 1000, pgtest.Count(t, pool, `SELECT count(*) FROM envelope WHERE status = 'failed' AND payload IS NULL AND body IS NOT NULL AND last_error = 'permanent: x'`))
	require.Equal(t, 1000, pgtest.Count(t, pool, `SELECT count(*) FROM envelope WHERE status = 'done' AND body IS NULL AND payload IS NOT NULL
		AND body_purged_at = received_at - (received_at - $1::timestamptz) + interval '1 minute'`, at))
	require.Equal(t, 2000, pgtest.Count(t, pool, `SELECT count(*) FROM envelope WHERE body_sha256 = sha256(body) AND body_size = length(body)`), "every kept body's digest and size")
}

func TestInsertRelatedRows(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	id := envelopetest.Insert(t, pool, envelopetest.Row{Status: "failed", DeliveryID: "dx"})

	started := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	a := envelopetest.InsertAttempt(t, pool, envelopetest.Attempt{EnvelopeID: id, Attempt: 2, Outcome: "retry", Error: "boom", StartedAt: started, Worker: "w"})
	require.Equal(t, "2 retry boom w 0 true", pgtest.Scalar[string](t, pool, `
		SELECT format('%s %s %s %s %s %s', attempt, outcome, error, worker, duration_ms, (job_id IS NULL)::text) FROM envelope_attempt WHERE id = $1`, a))
	envelopetest.InsertAttempt(t, pool, envelopetest.Attempt{EnvelopeID: id, JobID: 7})
	require.Equal(t, "1 done true", pgtest.Scalar[string](t, pool, `
		SELECT format('%s %s %s', attempt, outcome, (error IS NULL)::text) FROM envelope_attempt WHERE job_id = 7`))

	r := envelopetest.InsertReplay(t, pool, envelopetest.Replay{EnvelopeID: id})
	require.Equal(t, "alice test {} failed true true", pgtest.Scalar[string](t, pool, `
		SELECT format('%s %s %s %s %s %s', actor, reason, filter, prior_status, (batch_id IS NULL)::text, (job_id IS NULL)::text) FROM envelope_replay WHERE id = $1`, r))
	r = envelopetest.InsertReplay(t, pool, envelopetest.Replay{EnvelopeID: id, Actor: "bob", BatchID: "00000000-0000-0000-0000-000000000001",
		Filter: []byte(`{"source":"a"}`), PriorStatus: "done", JobID: 9, ReplayedAt: started})
	require.Equal(t, `bob {"source": "a"} 00000000-0000-0000-0000-000000000001 done 9 true`, pgtest.Scalar[string](t, pool, `
		SELECT format('%s %s %s %s %s %s', actor, filter, batch_id, prior_status, job_id, (replayed_at = $2)::text) FROM envelope_replay WHERE id = $1`, r, started))

	c := envelopetest.InsertConflict(t, pool, envelopetest.Conflict{EnvelopeID: id})
	require.Equal(t, "src dx 5 other true", pgtest.Scalar[string](t, pool, `
		SELECT format('%s %s %s %s %s', source, delivery_id, body_size, convert_from(body, 'UTF8'), (body_sha256 = sha256(body))::text) FROM envelope_conflict WHERE id = $1`, c))

	envelopetest.InsertDuplicate(t, pool, id, time.Time{})
	envelopetest.InsertDuplicate(t, pool, id, started)
	require.Equal(t, 2, pgtest.Count(t, pool, `SELECT count(*) FROM envelope_duplicate WHERE envelope_id = $1`, id))
	require.Equal(t, 1, pgtest.Count(t, pool, `SELECT count(*) FROM envelope_duplicate WHERE received_at = $1`, started))
}
