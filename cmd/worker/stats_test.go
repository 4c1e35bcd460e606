package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/admin"
	"github.com/inboxhq/inbox/internal/envelope"
)

func TestStatsCommand(t *testing.T) {
	t.Parallel()
	b := admSetup(t)
	ctx := context.Background()

	out, _, err := b.run(t, "stats")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^oldest pending:\s+none$`, out)
	require.Regexp(t, `(?m)^received, last hour:\s+0 \(0\.0/s\)(; counted since \S+)?$`, out)
	require.Contains(t, out, "failures: none")

	ids := b.seedFailed(t, "gh", 3)
	b.insert(t, "web", "d1", []byte(`{"ref":"a"}`))
	for range 2 {
		_, err := b.store.Insert(ctx, envelope.NewDelivery{Source: "web", Provider: "github", DeliveryID: "d1", EventType: "push",
			Body: []byte(`{"ref":"a"}`), Headers: map[string]string{}})
		require.NoError(t, err)
	}
	_, _, err = b.run(t, "replay", "--reason", "r", admItoa(ids[0]))
	require.NoError(t, err)

	out, _, err = b.run(t, "stats")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^SOURCE\s+PENDING\s+DONE\s+FAILED\s+IGNORED\s+RESOLVED\s+TOTAL\s+DUPLICATES\s+CONFLICTS\s+RECEIVED 1H\s+RECEIVED 24H$`, out)
	require.Regexp(t, `(?m)^gh\s+1\s+0\s+2\s+0\s+0\s+3\s+0\s+0\s+3\s+3$`, out)
	require.Regexp(t, `(?m)^web\s+1\s+0\s+0\s+0\s+0\s+1\s+2\s+0\s+1\s+1$`, out)
	require.Regexp(t, `(?m)^total\s+2\s+0\s+2\s+0\s+0\s+4\s+2\s+0\s+4\s+4$`, out)
	require.Regexp(t, `(?m)^received, last hour:\s+4 \(0\.0/s\)`, out)
	require.Regexp(t, `(?m)^oldest pending:\s+\S+ \(envelope `+admItoa(ids[0])+`, gh, received `, out)
	require.Regexp(t, `(?m)^replays, last 24h:\s+1 \(envelopes: 1, runs: 1\)$`, out)
	require.Regexp(t, `(?m)^COUNT\s+CAUSE\s+LATEST\s+LATEST ERROR$`, out)
	require.Regexp(t, `(?m)^2\s+\(none recorded\)\s+`+admItoa(ids[2])+`\s+permanent: seeded$`, out)

	out, _, err = b.run(t, "stats", "--json")
	require.NoError(t, err)
	var st admin.Stats
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Len(t, st.Sources, 2)
	require.Equal(t, int64(2), st.Totals.Duplicates)
	require.Equal(t, ids[0], st.OldestPending.EnvelopeID)
	require.Equal(t, []admin.FailureCause{{Count: 2, LatestID: ids[2], LatestError: "permanent: seeded"}}, st.Failures)
	require.Equal(t, int64(1), st.Replays.Replays)
	require.Contains(t, out, `"replays_last_24h"`)
	require.Equal(t, int64(4), st.Totals.ReceivedLastHour)
	require.Contains(t, out, `"age_seconds"`)

	for _, args := range [][]string{{"stats", "--bogus"}, {"stats", "extra"}} {
		_, _, err := b.run(t, args...)
		require.Equal(t, 2, exitCode(err), args)
	}
}
