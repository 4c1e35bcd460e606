package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/config"
	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/forward"
	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/labels"
	"github.com/inboxhq/inbox/internal/webhooktest"
	"github.com/inboxhq/inbox/internal/worker"
)

// Every cause is a distinct code of the shape the schema's CHECK allows.
func TestCauseCodesAreDistinctAndValid(t *testing.T) {
	t.Parallel()
	var codes []string
	for _, c := range labels.Causes {
		require.Regexp(t, `^[a-z0-9_]{1,64}$`, string(c))
		codes = append(codes, string(c))
	}
	require.Len(t, slices.Compact(slices.Sorted(slices.Values(codes))), len(codes), "no cause twice")
}

// Each kind of handler error is recorded with its cause, on the attempt and
// on the envelope, in the statement that records the attempt.
func TestCauseRecordedForEachErrorKind(t *testing.T) {
	t.Parallel()
	b := setup(t)
	kinds := map[string]handlers.HandlerFunc{
		"database": func(ctx context.Context, run handlers.Run) (json.RawMessage, error) {
			tx := run.Tx
			_, err := tx.Exec(ctx, `SELECT 1 / 0`)
			return nil, fmt.Errorf("query: %w", err)
		},
		"timeout": func(context.Context, handlers.Run) (json.RawMessage, error) {
			return nil, fmt.Errorf("call downstream: %w", context.DeadlineExceeded)
		},
		"custom": func(context.Context, handlers.Run) (json.RawMessage, error) {
			// An explicit cause wins over the derived one (permanent).
			return nil, handlers.Permanent(handlers.WithCause(errors.New("merchant m_42 is closed"), labels.CausePostingRejected))
		},
		"permanent": func(context.Context, handlers.Run) (json.RawMessage, error) {
			return nil, handlers.Permanent(errors.New("no"))
		},
		"unknown-code": func(context.Context, handlers.Run) (json.RawMessage, error) {
			return nil, handlers.Permanent(handlers.WithCause(errors.New("mine"), "Not A Code!"))
		},
	}
	for ev, h := range kinds {
		b.registry.Register("github", ev, h)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusBadGateway)
	}))
	t.Cleanup(srv.Close)
	cfg, err := config.Parse([]byte(`
sources:
  fwd:
    provider: github
    secrets: ["gh-secret-0123456789abcdef"]
    forward:
      - url: `+srv.URL+`/hooks
        secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
        mode: instead
`), nil)
	require.NoError(t, err)
	b.router, err = forward.FromSources(b.registry, cfg.Destinations(), nil)
	require.NoError(t, err)
	b.run(t, worker.Policy{})

	cases := []struct {
		name, source, provider, event string
		body                          []byte
		maxAttempts                   int
		want                          []string // causes of the attempts
	}{
		{"unknown currency", "src", "standard", "payment.succeeded", webhooktest.StandardPayment("p1", "m", 100, "XYZ"), 0, []string{"unknown_currency"}},
		{"invalid payload", "src", "standard", "payment.succeeded", []byte(`{"type":"payment.succeeded","data":{"merchant_id":"m"}}`), 0, []string{"invalid_payload"}},
		{"database", "src", "github", "database", webhooktest.GitHubPush("refs/heads/a"), 2, []string{"database", "database"}},
		{"timeout", "src", "github", "timeout", webhooktest.GitHubPush("refs/heads/b"), 1, []string{"timeout"}},
		{"explicit", "src", "github", "custom", webhooktest.GitHubPush("refs/heads/c"), 0, []string{"posting_rejected"}},
		{"permanent", "src", "github", "permanent", webhooktest.GitHubPush("refs/heads/d"), 0, []string{"permanent"}},
		{"a code not in labels.Causes", "src", "github", "unknown-code", webhooktest.GitHubPush("refs/heads/f"), 0, []string{"internal"}},
		{"forward 5xx", "fwd", "github", "push", webhooktest.GitHubPush("refs/heads/e"), 2, []string{"forward_5xx", "forward_5xx"}},
	}
	ids := make([]int64, len(cases))
	for i, c := range cases {
		res, err := b.store.Insert(context.Background(), envelope.NewDelivery{
			Source: c.source, Provider: c.provider, DeliveryID: fmt.Sprintf("d-%d", i), EventType: c.event,
			Body: c.body, Payload: c.body, Headers: map[string]string{}, MaxAttempts: c.maxAttempts,
		})
		require.NoError(t, err)
		ids[i] = res.EnvelopeID
	}
	for i, c := range cases {
		e := b.waitFinal(t, ids[i])
		require.Equal(t, envelope.StatusFailed, e.Status, c.name)
		require.Equal(t, c.want, b.causes(t, ids[i]), c.name)
		require.Equal(t, c.want[len(c.want)-1], b.lastCause(t, ids[i]), c.name)
	}
}
