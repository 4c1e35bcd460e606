package admin

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
	"github.com/inboxhq/inbox/internal/pgtest"
)

// FilterInput refuses what the database would refuse, naming the field:
// the operator's error, not a 500.
func TestFilterInputRefusesWhatTextCannotHold(t *testing.T) {
	for _, c := range []struct {
		in    FilterInput
		field string
	}{
		{FilterInput{Source: "\xff"}, "source"},
		{FilterInput{DeliveryID: "a\x00b"}, "delivery-id"},
		{FilterInput{EventType: "\xc3"}, "event-type"},
		{FilterInput{Headers: []string{"X-A=\x00"}}, "header"},
		{FilterInput{Contains: []string{`{"a":"\u0000"}`}}, "contains"},
		{FilterInput{Source: "s", MaxID: "x"}, "max-id"},
		{FilterInput{Source: "s", MaxID: "0"}, "max-id"},
		{FilterInput{Cause: "nope"}, "cause"},
	} {
		_, err := c.in.Parse()
		var ie *InputError
		require.True(t, errors.As(err, &ie), "%+v: %v", c.in, err)
		require.Equal(t, c.field, ie.Field, "%+v", c.in)
	}
	f, err := FilterInput{Source: "stripe", MaxID: "42"}.Parse()
	require.NoError(t, err)
	require.Equal(t, int64(42), f.MaxID)
	require.True(t, Filter{MaxID: 42}.IsEmpty(), "max id alone selects nothing to replay")
}

func TestLimitsOnIDsReasonAndActor(t *testing.T) {
	ids := make([]int64, MaxIDs+1)
	for i := range ids {
		ids[i] = int64(i + 1)
	}
	require.ErrorContains(t, Filter{IDs: ids}.Validate(), "at most 1000")
	require.NoError(t, Filter{IDs: ids[:MaxIDs]}.Validate())
	r := ReplayRequest{Filter: Filter{IDs: []int64{1}}, Actor: "a", Reason: strings.Repeat("é", MaxReasonLen+1)}
	require.ErrorContains(t, r.Validate(), "at most 1000")
	r.Reason = strings.Repeat("é", MaxReasonLen)
	require.NoError(t, r.Validate())
	r.Actor = strings.Repeat("a", MaxActorLen+1)
	require.ErrorContains(t, r.Validate(), "the actor")
}

// The worker's role may not replay; the admin's may (migration 00110).
func TestCanReplayByRole(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	for role, want := range map[string]bool{pgtest.RoleWorker: false, pgtest.RoleAdmin: true, pgtest.RoleIngest: false} {
		pool, err := pgxpool.New(context.Background(), pgtest.RoleURL(t, url, role))
		require.NoError(t, err)
		got, err := CanReplay(context.Background(), pool)
		pool.Close()
		require.NoError(t, err, role)
		require.Equal(t, want, got, role)
	}
}

// A dry run reports its newest match and clock; MaxID then leaves out what
// was stored since.
func TestDryRunMaxIDPinsTheSelection(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	first := envelopetest.Insert(t, pool, envelopetest.Row{Status: "failed"})
	second := envelopetest.Insert(t, pool, envelopetest.Row{Status: "failed"})
	res, err := DryRun(ctx, pool, Filter{Status: "failed"}, 0)
	require.NoError(t, err)
	require.Equal(t, second, res.MaxID)
	require.WithinDuration(t, time.Now(), res.At, time.Minute)
	require.Equal(t, map[envelope.Status]int{"failed": 2}, res.ByStatus)
	envelopetest.Insert(t, pool, envelopetest.Row{Status: "failed"})
	res, err = DryRun(ctx, pool, Filter{Status: "failed", MaxID: first}, 0)
	require.NoError(t, err)
	require.Equal(t, 1, res.Matched, "only up to the pinned id")
	require.Equal(t, first, res.MaxID)
}

// since must come before until, whatever their kinds.
func TestSinceBeforeUntil(t *testing.T) {
	day := time.Now().Add(-24 * time.Hour).UTC().Format(time.RFC3339)
	_, err := FilterInput{Source: "s", Since: day, Until: "48h"}.Parse()
	require.ErrorContains(t, err, "must be before")
	_, err = FilterInput{Source: "s", Since: "48h", Until: day}.Parse()
	require.NoError(t, err)
	_, err = FilterInput{Source: "s", Since: "1h", Until: "2h"}.Parse()
	require.ErrorContains(t, err, "must be before")
}
