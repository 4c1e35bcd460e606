// Package handlerstest runs a handler exactly as the worker does, for the
// handler's own tests: each delivery is stored as ingest stores it (an
// envelope and its processing job, in one transaction) in a fresh migrated
// database, and processed by the real worker (River, batched transactions,
// a savepoint per envelope when a batch fails, the ledger's deferred
// postings and account cache, retries, snoozes, the attempt rows), routed
// by the Router under test. What a test reads back is what an operator
// would: the envelope's final status, result, cause and attempts, and the
// handler's own tables in the same database.
//
//	kit := handlerstest.New(t, registry)
//	id := kit.Deliver(t, handlerstest.Delivery{Provider: provider.Standard, EventType: "customer.created", Body: body})
//	out := kit.Wait(t, id) // done, failed or ignored
//
// Retries and snoozes are short (tens of milliseconds), so a handler that
// fails transiently is retried within the test; Delivery.MaxAttempts bounds
// them as a source's max_attempts does.
package handlerstest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/rivertype"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/worker"
)

// Kit is a database and a running worker that routes with the Router
// given to New. It is stopped when the test ends.
type Kit struct {
	// Pool is the test's database: create the handler's own tables in it
	// (before delivering), and read them back.
	Pool  *pgxpool.Pool
	store *envelope.Store
}

// Delivery is one verified delivery, as ingest hands it to the store.
// Zero fields take defaults: Source "src", a unique DeliveryID, MaxAttempts 3.
type Delivery struct {
	Source      string
	Provider    string // required: provider.Standard, provider.Stripe, ...
	DeliveryID  string
	EventType   string
	Body        []byte
	Headers     map[string]string
	MaxAttempts int
}

// Outcome is an envelope once the worker is done with it.
type Outcome struct {
	Status    envelope.Status
	Result    json.RawMessage // envelope.result: what the handler returned, or the ignore reason
	LastError string
	LastCause string
	Attempts  int
}

// fastRetry retries a transient failure after 20 ms, whatever the attempt.
type fastRetry struct{}

func (fastRetry) NextRetry(*rivertype.JobRow) time.Time { return time.Now().Add(20 * time.Millisecond) }

// Option configures the kit's worker.
type Option func(*worker.Config)

// WithSource gives the worker source's policy, as the sources file gives
// it to the real one: its account_id (the handler's Run.Account), max
// attempts, backoff and throttle.
func WithSource(source string, p worker.SourcePolicy) Option {
	return func(c *worker.Config) {
		if c.Sources == nil {
			c.Sources = map[string]worker.SourcePolicy{}
		}
		c.Sources[source] = p
	}
}

// New starts a worker on a fresh migrated database that routes envelopes
// with router (a *handlers.Registry, or handlers.Builtin() with routes of
// your own registered on it).
func New(t testing.TB, router handlers.Router, opts ...Option) *Kit {
	t.Helper()
	pool := pgtest.NewPool(t)
	logger := slog.New(slog.DiscardHandler)
	inserts, err := envelope.NewInsertClient(pool, logger)
	if err != nil {
		t.Fatalf("handlerstest: %v", err)
	}
	cfg := worker.Config{
		Policy:            worker.Policy{SnoozeDefault: 50 * time.Millisecond, MaxSnooze: time.Second, MaxAge: time.Hour, JobTimeout: 30 * time.Second},
		MaxWorkers:        10,
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		RetryPolicy:       fastRetry{},
		ReconcileEvery:    -1,
		Name:              "handlerstest",
	}
	for _, o := range opts {
		o(&cfg)
	}
	client, err := worker.NewClient(pool, router, cfg, logger)
	if err != nil {
		t.Fatalf("handlerstest: %v", err)
	}
	if err := client.Start(context.Background()); err != nil {
		t.Fatalf("handlerstest: start the worker: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(ctx)
	})
	return &Kit{Pool: pool, store: envelope.NewStore(pool, inserts)}
}

var seq atomic.Int64

// Deliver stores d as ingest does (the envelope and its job, committed
// together) and returns the envelope's id; the worker picks it up at once.
func (k *Kit) Deliver(t testing.TB, d Delivery) int64 {
	t.Helper()
	if d.Provider == "" {
		t.Fatal("handlerstest: Delivery.Provider is required")
	}
	if d.Source == "" {
		d.Source = "src"
	}
	if d.DeliveryID == "" {
		d.DeliveryID = fmt.Sprintf("handlerstest-%d-%d", time.Now().UnixNano(), seq.Add(1))
	}
	if d.MaxAttempts == 0 {
		d.MaxAttempts = 3
	}
	var payload json.RawMessage
	if json.Valid(d.Body) {
		payload = d.Body
	}
	res, err := k.store.Insert(context.Background(), envelope.NewDelivery{
		Source: d.Source, Provider: d.Provider, DeliveryID: d.DeliveryID, EventType: d.EventType,
		Body: d.Body, Payload: payload, Headers: d.Headers, MaxAttempts: d.MaxAttempts,
	})
	if err != nil {
		t.Fatalf("handlerstest: store the delivery: %v", err)
	}
	return res.EnvelopeID
}

// Wait waits (up to 30 s) until envelope id is final and returns it.
func (k *Kit) Wait(t testing.TB, id int64) Outcome {
	t.Helper()
	var o Outcome
	pgtest.Eventually(t, 30*time.Second, fmt.Sprintf("envelope %d final", id), func() (bool, string) {
		var result []byte
		err := k.Pool.QueryRow(context.Background(), `
			SELECT status, result, coalesce(last_error, ''), coalesce(last_cause, ''), attempts FROM envelope WHERE id = $1`, id).
			Scan(&o.Status, &result, &o.LastError, &o.LastCause, &o.Attempts)
		if err != nil {
			return false, err.Error()
		}
		o.Result = result
		return o.Status != envelope.StatusPending, fmt.Sprintf("status %s after %d attempts (last error %q)", o.Status, o.Attempts, o.LastError)
	})
	return o
}
