package admin

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
)

func TestParseBound(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want Bound
		err  string
	}{
		{in: "", want: Bound{}},
		{in: "24h", want: Bound{Ago: 24 * time.Hour}},
		{in: "90m", want: Bound{Ago: 90 * time.Minute}},
		{in: "7d", want: Bound{Ago: 7 * 24 * time.Hour}},
		{in: "1d12h", want: Bound{Ago: 36 * time.Hour}},
		{in: "2026-01-02T15:04:05Z", want: Bound{At: at}},
		{in: "2026-01-02T16:04:05.5+01:00", want: Bound{At: at.Add(500 * time.Millisecond)}},
		{in: "-1h", err: "must be positive"},
		{in: "0s", err: "must be positive"},
		{in: "yesterday", err: "neither an RFC 3339 time"},
		{in: "2026-01-02", err: "neither an RFC 3339 time"},
		{in: "1d-2h", err: "neither"},
	} {
		got, err := ParseBound(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.True(t, got.At.Equal(tc.want.At), "%s: at %v, want %v", tc.in, got.At, tc.want.At)
		require.Equal(t, tc.want.Ago, got.Ago, tc.in)
	}
}

func TestFilterValidate(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, tc := range []struct {
		name string
		f    Filter
		err  string
	}{
		{name: "empty", f: Filter{}},
		{name: "all fields", f: Filter{Source: "s", Status: envelope.StatusFailed, EventType: "e", DeliveryID: "d", Since: Bound{Ago: time.Hour}, Until: Bound{Ago: time.Minute}}},
		{name: "ids", f: Filter{IDs: []int64{1, 2}}},
		{name: "ids and flags", f: Filter{IDs: []int64{1}, Source: "s"}, err: "either by id or by filter"},
		{name: "zero id", f: Filter{IDs: []int64{0}}, err: "must be positive"},
		{name: "bad status", f: Filter{Status: "weird"}, err: `status "weird"`},
		{name: "window backwards absolute", f: Filter{Since: Bound{At: now}, Until: Bound{At: now.Add(-time.Hour)}}, err: "must be before"},
		{name: "window backwards relative", f: Filter{Since: Bound{Ago: time.Minute}, Until: Bound{Ago: time.Hour}}, err: "must be before"},
		{name: "negative age", f: Filter{Since: Bound{Ago: -time.Minute}}, err: "must be positive"},
	} {
		err := tc.f.Validate()
		if tc.err == "" {
			require.NoError(t, err, tc.name)
		} else {
			require.ErrorContains(t, err, tc.err, tc.name)
		}
	}
}

// TestFilterWhere checks each field's SQL (parameterized: no value in the
// text) and what it selects in a real database.
func TestFilterWhere(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var now time.Time
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT now()`).Scan(&now))
	type row struct {
		source, provider, delivery, event, status string
		age                                       time.Duration
	}
	seed := []row{
		{"alpha", "github", "d1", "push", "done", 48 * time.Hour},
		{"alpha", "github", "d2", "issues", "failed", 2 * time.Hour},
		{"beta", "stripe", "d1", "payment_intent.succeeded", "pending", 30 * time.Minute},
		{"beta", "standard", "d4", "payment.succeeded", "ignored", 10 * time.Minute},
	}
	ids := make([]int64, len(seed))
	for i, r := range seed {
		ids[i] = envelopetest.Insert(t, b.pool, envelopetest.Row{Source: r.source, Provider: r.provider, DeliveryID: r.delivery,
			EventType: r.event, Status: r.status, Body: []byte(`{}`), NoPayload: true, ReceivedAt: now.Add(-r.age), ProcessedAt: time.Now()})
	}
	pick := func(i ...int) []int64 {
		out := []int64{}
		for _, j := range i {
			out = append(out, ids[j])
		}
		return out
	}
	absolute := now.Add(-3 * time.Hour)
	for _, tc := range []struct {
		name  string
		f     Filter
		where string
		args  []any
		want  []int64
	}{
		{"empty", Filter{}, "TRUE", nil, pick(0, 1, 2, 3)},
		{"ids", Filter{IDs: pick(1, 3)}, "id = ANY($1::bigint[])", []any{pick(1, 3)}, pick(1, 3)},
		{"source", Filter{Source: "alpha"}, "source = $1", []any{"alpha"}, pick(0, 1)},
		{"status", Filter{Status: envelope.StatusFailed}, "status = $1", []any{"failed"}, pick(1)},
		{"event type", Filter{EventType: "push"}, "event_type = $1", []any{"push"}, pick(0)},
		{"delivery id", Filter{DeliveryID: "d1"}, "id = ANY(ARRAY(SELECT k.envelope_id FROM envelope_key k WHERE k.delivery_id = $1)) AND delivery_id = $1", []any{"d1"}, pick(0, 2)},
		{"since relative", Filter{Since: Bound{Ago: time.Hour}}, "received_at >= $1 AND id >= $2",
			[]any{now.Add(-time.Hour), envelope.IDAt(now.Add(-time.Hour))}, pick(2, 3)},
		{"since absolute", Filter{Since: Bound{At: absolute}}, "received_at >= $1 AND id >= $2", []any{absolute, envelope.IDAt(absolute)}, pick(1, 2, 3)},
		{"until relative", Filter{Until: Bound{Ago: time.Hour}}, "received_at < $1 AND id < $2",
			[]any{now.Add(-time.Hour), envelope.IDBefore(now.Add(-time.Hour))}, pick(0, 1)},
		{"window", Filter{Since: Bound{Ago: 3 * time.Hour}, Until: Bound{Ago: 20 * time.Minute}},
			"received_at >= $1 AND id >= $2 AND received_at < $3 AND id < $4",
			[]any{now.Add(-3 * time.Hour), envelope.IDAt(now.Add(-3 * time.Hour)), now.Add(-20 * time.Minute), envelope.IDBefore(now.Add(-20 * time.Minute))}, pick(1, 2)},
		{"combined", Filter{Source: "beta", Status: envelope.StatusPending, EventType: "payment_intent.succeeded", DeliveryID: "d1"},
			"source = $1 AND status = $2 AND event_type = $3 AND id = ANY(ARRAY(SELECT k.envelope_id FROM envelope_key k WHERE k.delivery_id = $4)) AND delivery_id = $4", []any{"beta", "pending", "payment_intent.succeeded", "d1"}, pick(2)},
		{"injection is a value", Filter{Source: "alpha' OR '1'='1"}, "source = $1", []any{"alpha' OR '1'='1"}, []int64{}},
	} {
		where, args := tc.f.Where(envelope.Clock{Now: now})
		require.Equal(t, tc.where, where, tc.name)
		require.Equal(t, tc.args, args, tc.name)
		for _, a := range args {
			if s, ok := a.(string); ok {
				require.NotContains(t, where, s, "%s: value in SQL text", tc.name)
			}
		}
		rows, err := b.pool.Query(ctx, `SELECT id FROM envelope WHERE `+where+` ORDER BY id`, args...)
		require.NoError(t, err, tc.name)
		got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err, tc.name)
		require.Equal(t, fmt.Sprint(tc.want), fmt.Sprint(got), tc.name)
	}
}

func TestFilterRecord(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f := Filter{Source: "s", Status: envelope.StatusFailed, Since: Bound{Ago: 24 * time.Hour}, Until: Bound{At: now.Add(-time.Hour)}}
	require.Equal(t, map[string]any{
		"source":    "s",
		"status":    "failed",
		"since":     "2026-02-28T12:00:00Z",
		"since_ago": "24h0m0s",
		"until":     "2026-03-01T11:00:00Z",
		"limit":     5,
	}, f.record(now, 5))
	require.Equal(t, map[string]any{"ids": []int64{3, 4}}, Filter{IDs: []int64{3, 4}}.record(now, 0))
}
