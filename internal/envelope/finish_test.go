package envelope_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
)

type envelopeRow struct {
	Status    string
	Attempts  int
	LastError *string
	Result    *string
	Processed bool
	Rows      int // envelope_attempt rows
}

func (b *bundle) row(t *testing.T, id int64) envelopeRow {
	t.Helper()
	var r envelopeRow
	require.NoError(t, b.pool.QueryRow(context.Background(), `
		SELECT status, attempts, last_error, result::text, processed_at IS NOT NULL,
		       (SELECT count(*) FROM envelope_attempt WHERE envelope_id = e.id)
		  FROM envelope e WHERE id = $1`, id).
		Scan(&r.Status, &r.Attempts, &r.LastError, &r.Result, &r.Processed, &r.Rows))
	return r
}

// Finish and RecordAttempt are compare-and-sets on a pending envelope: on an
// envelope that is already final (done, ignored or failed) they change
// nothing, so a stale attempt's report cannot overwrite a later attempt's
// result. This pins the store's guard alone, without the worker's fence.
func TestFinishAndRecordAttemptChangeNothingOnAFinalEnvelope(t *testing.T) {
	t.Parallel()
	for _, final := range []envelope.Status{envelope.StatusDone, envelope.StatusIgnored, envelope.StatusFailed} {
		t.Run(string(final), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			res, err := b.store.Insert(ctx, delivery("msg_"+string(final)))
			require.NoError(t, err)
			id := res.EnvelopeID
			inTx := func(f func(tx pgx.Tx) error) error { return pgx.BeginFunc(ctx, b.pool, f) }
			now := time.Now()

			// A later attempt finished the envelope.
			require.NoError(t, inTx(func(tx pgx.Tx) error {
				return envelope.Finish(ctx, tx, id, final, json.RawMessage(`{"by":"attempt 2"}`),
					envelope.Attempt{Attempt: 2, Outcome: envelope.Outcome(final), StartedAt: now, Worker: "w2"})
			}))
			before := b.row(t, id)
			require.Equal(t, string(final), before.Status)
			require.Equal(t, 1, before.Rows)

			// The stale attempt 1 reports a failure, then a retry, then even a success.
			for _, status := range []envelope.Status{envelope.StatusFailed, envelope.StatusDone, envelope.StatusIgnored} {
				err := inTx(func(tx pgx.Tx) error {
					return envelope.Finish(ctx, tx, id, status, nil,
						envelope.Attempt{Attempt: 1, Outcome: envelope.Outcome(status), Error: "stale " + string(status), StartedAt: now, Worker: "w1"})
				})
				require.ErrorIs(t, err, envelope.ErrNotPending, "finish %s", status)
				require.Equal(t, before, b.row(t, id), "finish %s on a %s envelope", status, final)
			}
			for _, out := range []envelope.Outcome{envelope.OutcomeRetry, envelope.OutcomeSnoozed} {
				var recorded bool
				require.NoError(t, inTx(func(tx pgx.Tx) error {
					var err error
					recorded, err = envelope.RecordAttempt(ctx, tx, id,
						envelope.Attempt{Attempt: 1, Outcome: out, Error: "stale " + string(out), StartedAt: now, Worker: "w1"})
					return err
				}))
				require.False(t, recorded, "record %s", out)
				require.Equal(t, before, b.row(t, id), "record %s on a %s envelope", out, final)
			}
		})
	}
}

// On a pending envelope the same calls do change it (so the test above is
// not passing because nothing ever writes).
func TestFinishAndRecordAttemptWriteAPendingEnvelope(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	res, err := b.store.Insert(ctx, delivery("msg_pending"))
	require.NoError(t, err)
	id := res.EnvelopeID
	var recorded bool
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		recorded, err = envelope.RecordAttempt(ctx, tx, id, envelope.Attempt{Attempt: 1, Outcome: envelope.OutcomeRetry, Error: "hiccup", StartedAt: time.Now()})
		return err
	}))
	require.True(t, recorded)
	r := b.row(t, id)
	require.Equal(t, "pending", r.Status)
	require.Equal(t, 1, r.Attempts)
	require.Equal(t, "hiccup", *r.LastError)
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		return envelope.Finish(ctx, tx, id, envelope.StatusFailed, nil, envelope.Attempt{Attempt: 2, Outcome: envelope.OutcomeFailed, Error: "gave up", StartedAt: time.Now()})
	}))
	r = b.row(t, id)
	require.Equal(t, "failed", r.Status)
	require.Equal(t, 2, r.Attempts)
	require.Equal(t, "gave up", *r.LastError)
	require.True(t, r.Processed)
	require.Equal(t, 2, r.Rows)
}
