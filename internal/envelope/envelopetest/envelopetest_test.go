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
