package audit_test

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
	"github.com/inboxhq/inbox/internal/pgtest"
)

// The cookbook's "pending envelopes with no live job" must find exactly the
// pending envelopes that nothing will process: no job at all, or only
// finished jobs (completed, cancelled, discarded), or a live job of another
// kind. It must not list a pending envelope with a live process_envelope job
// in any live state, nor a final envelope without one. (The cookbook test's
// seed is healthy, so there it only checks that the query returns nothing.)
func TestCookbookFindsPendingEnvelopesWithNoLiveJob(t *testing.T) {
	t.Parallel()
	const heading = "Pending envelopes with no live job (should return no rows)"
	md, err := os.ReadFile(cookbookPath)
	require.NoError(t, err)
	qs, err := parseCookbook(md)
	require.NoError(t, err)
	var q *question
	for i := range qs {
		if qs[i].Heading == heading {
			q = &qs[i]
		}
	}
	require.NotNil(t, q, "the cookbook no longer asks %q", heading)

	pool := pgtest.NewPool(t)
	ctx := context.Background()
	envelope := func(deliveryID, status string) int64 {
		return envelopetest.Insert(t, pool, envelopetest.Row{Provider: "github", EventType: "push", DeliveryID: deliveryID, Status: status})
	}
	job := func(kind string, envelopeID int64, state string) {
		_, err := pool.Exec(ctx, `
			INSERT INTO river_job (kind, args, state, max_attempts, queue, priority, scheduled_at, finalized_at, attempt, attempted_at)
			VALUES ($1, jsonb_build_object('envelope_id', $2::bigint, 'source', 'src'), $3::river_job_state, 25, 'default', 1,
			        now(), CASE WHEN $3 IN ('completed', 'cancelled', 'discarded') THEN now() END,
			        CASE WHEN $3 IN ('available', 'scheduled', 'pending') THEN 0 ELSE 1 END,
			        CASE WHEN $3 IN ('available', 'scheduled', 'pending') THEN NULL ELSE now() END)`, kind, envelopeID, state)
		require.NoError(t, err)
	}

	envelope("stuck-no-job", "pending")
	job("process_envelope", envelope("stuck-completed", "pending"), "completed")
	job("process_envelope", envelope("stuck-cancelled", "pending"), "cancelled")
	job("process_envelope", envelope("stuck-discarded", "pending"), "discarded")
	job("reconcile_other_kind", envelope("stuck-other-kind", "pending"), "available")
	for _, state := range []string{"available", "pending", "retryable", "running", "scheduled"} {
		id := envelope("live-"+state, "pending")
		job("process_envelope", id, "completed") // an earlier job finished; a replay's is live
		job("process_envelope", id, state)
	}
	for _, status := range []string{"done", "failed", "ignored"} {
		envelope("final-"+status, status)
	}

	r := runQuery(t, pool, *q)
	require.Equal(t, []string{"stuck-no-job", "stuck-completed", "stuck-cancelled", "stuck-discarded", "stuck-other-kind"},
		r.rows(t, "delivery_id"))
}
