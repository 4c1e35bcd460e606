package envelope_test

import (
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/pgtest"
)

// signedBody is a GitHub-like delivery whose signature covers the body
// only: it carries a replay digest of its event type and body.
func signedBody(id, body string) envelope.NewDelivery {
	d := ghDelivery(id, body)
	sum := sha256.Sum256(append([]byte(d.EventType+"\x00"), body...))
	d.ReplayDigest, d.ReplayWindow = sum[:], time.Hour
	return d
}

// A captured signed body resent under a new delivery id is the original's
// duplicate, recorded with the id it came under: no envelope, no job. The
// provider's own retry (same id) stays a plain duplicate.
func TestASignedBodyUnderANewIDIsAReplay(t *testing.T) {
	t.Parallel()
	b := setupStore(t, envelope.StoreOptions{})
	ctx := context.Background()
	orig, err := b.store.Insert(ctx, signedBody("gh-1", `{"ref":"refs/heads/main"}`))
	require.NoError(t, err)
	require.False(t, orig.Duplicate)

	retry, err := b.store.Insert(ctx, signedBody("gh-1", `{"ref":"refs/heads/main"}`))
	require.NoError(t, err)
	require.Equal(t, envelope.InsertResult{EnvelopeID: orig.EnvelopeID, Duplicate: true}, retry, "the provider's retry")

	for _, id := range []string{"gh-forged-1", "gh-forged-2"} {
		replay, err := b.store.Insert(ctx, signedBody(id, `{"ref":"refs/heads/main"}`))
		require.NoError(t, err)
		require.Equal(t, envelope.InsertResult{EnvelopeID: orig.EnvelopeID, Duplicate: true, ReplayOf: "gh-1"}, replay, id)
	}
	other, err := b.store.Insert(ctx, signedBody("gh-2", `{"ref":"refs/heads/other"}`))
	require.NoError(t, err)
	require.False(t, other.Duplicate, "another body is another delivery")

	require.Equal(t, 2, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope`))
	require.Equal(t, 2, pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'process_envelope'`))
	require.Equal(t, 3, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_duplicate WHERE envelope_id = $1`, orig.EnvelopeID))
	require.Equal(t, 2, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_duplicate WHERE replayed_as IN ('gh-forged-1', 'gh-forged-2')`))
}

// Two copies of one signed body under two ids in one batch: the first is
// stored, the second is its replay, in the batch's one transaction.
func TestReplaysInOneBatch(t *testing.T) {
	t.Parallel()
	b := setupStore(t, envelope.StoreOptions{MaxConcurrent: 1})
	answers := b.sendTogether(t, []envelope.NewDelivery{
		ghDelivery("first", `{}`),
		signedBody("a", `{"n":1}`), signedBody("b", `{"n":1}`), signedBody("c", `{"n":2}`),
	})
	for _, a := range answers {
		require.NoError(t, a.err)
	}
	require.False(t, answers[1].res.Duplicate)
	require.Equal(t, envelope.InsertResult{EnvelopeID: answers[1].res.EnvelopeID, Duplicate: true, ReplayOf: "a"}, answers[2].res)
	require.False(t, answers[3].res.Duplicate)
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(DISTINCT xmin::text) FROM envelope WHERE delivery_id IN ('a', 'c')`), "one transaction")
}

// Past its window a digest no longer makes a replay: the body is stored
// again as a new delivery (the residual risk docs/security.md states); a
// digest whose delivery's envelope is gone is taken over by the new one.
func TestADigestPastItsWindowOrWithoutItsEnvelopeIsTakenOver(t *testing.T) {
	t.Parallel()
	b := setupStore(t, envelope.StoreOptions{})
	ctx := context.Background()
	_, err := b.store.Insert(ctx, signedBody("old", `{"n":1}`))
	require.NoError(t, err)
	b.exec(t, `UPDATE envelope_digest SET expires_at = now() - interval '1 second'`)
	again, err := b.store.Insert(ctx, signedBody("later", `{"n":1}`))
	require.NoError(t, err)
	require.False(t, again.Duplicate, "past the window: a new delivery")
	require.Equal(t, "later", pgtest.Scalar[string](t, b.pool, `SELECT delivery_id FROM envelope_digest`))

	b.exec(t, `DELETE FROM river_job; DELETE FROM envelope WHERE delivery_id = 'later'`)
	third, err := b.store.Insert(ctx, signedBody("third", `{"n":1}`))
	require.NoError(t, err)
	require.False(t, third.Duplicate, "its holder's envelope is gone: nothing to be a replay of")
	require.Equal(t, "third", pgtest.Scalar[string](t, b.pool, `SELECT delivery_id FROM envelope_digest`))

	b.exec(t, `UPDATE envelope_digest SET expires_at = now() - interval '1 second'`)
	n, err := envelope.DeleteExpiredDigests(ctx, b.pool, 100)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_digest`))
}

func (b *storeBundle) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), q, args...)
	require.NoError(t, err)
}

// Replays of a stored body that share a batch are all its replays,
// whatever their ids (two ids, or one id twice): none is stored (review of
// issue 22: the second copy was taken for a replay of the first, whose
// envelope did not exist, and stored).
func TestSeveralReplaysOfAStoredBodyInOneBatch(t *testing.T) {
	t.Parallel()
	b := setupStore(t, envelope.StoreOptions{MaxConcurrent: 1})
	orig, err := b.store.Insert(context.Background(), signedBody("z", `{"n":1}`))
	require.NoError(t, err)
	answers := b.sendTogether(t, []envelope.NewDelivery{
		ghDelivery("first", `{}`),
		signedBody("x", `{"n":1}`), signedBody("y", `{"n":1}`), signedBody("x", `{"n":1}`),
	})
	for _, a := range answers[1:] {
		require.NoError(t, a.err)
		require.Equal(t, envelope.InsertResult{EnvelopeID: orig.EnvelopeID, Duplicate: true, ReplayOf: "z"}, a.res)
	}
	require.Equal(t, 2, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope`), "z and first")
	require.Equal(t, 3, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_duplicate WHERE replayed_as IN ('x', 'y')`))
}

// A conflicting variant (its id stored with another body) claims its
// digest, but a later delivery of that body under another id is not a
// replay of an envelope that holds something else: it is stored, and the
// digest is its now.
func TestAConflictingVariantsDigestMakesNoFalseReplay(t *testing.T) {
	t.Parallel()
	b := setupStore(t, envelope.StoreOptions{})
	ctx := context.Background()
	_, err := b.store.Insert(ctx, signedBody("x", `{"n":1}`))
	require.NoError(t, err)
	_, err = b.store.Insert(ctx, signedBody("x", `{"n":2}`))
	var c *envelope.ConflictError
	require.ErrorAs(t, err, &c)
	w, err := b.store.Insert(ctx, signedBody("w", `{"n":2}`))
	require.NoError(t, err)
	require.False(t, w.Duplicate, "x's envelope holds another body: w is not its replay")
	require.Equal(t, "w", pgtest.Scalar[string](t, b.pool, `SELECT delivery_id FROM envelope_digest WHERE digest = $1`, signedBody("w", `{"n":2}`).ReplayDigest))
}
