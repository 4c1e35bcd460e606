package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/admin"
	"github.com/inboxhq/inbox/internal/bodydiff"
	"github.com/inboxhq/inbox/internal/envelope"
)

func TestEnvelopesList(t *testing.T) {
	t.Parallel()
	b := admSetup(t)
	ids := b.seedFailed(t, "gh", 5)
	b.seedFailed(t, "other", 1)

	out, _, err := b.run(t, "envelopes", "list", "--source", "gh", "--limit", "2")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Regexp(t, `^ID\s+RECEIVED\s+SOURCE\s+EVENT TYPE\s+STATUS\s+ATTEMPTS\s+DELIVERY ID\s+CAUSE\s+LAST ERROR / REASON$`, lines[0])
	require.Regexp(t, `^`+admItoa(ids[4])+`\s+\S+\s+gh\s+push\s+failed\s+1\s+gh-5\s+-\s+permanent: seeded$`, lines[1])
	require.True(t, strings.HasPrefix(lines[2], admItoa(ids[3])+" "), "newest first")
	require.Equal(t, "more: add --before-id "+admItoa(ids[3]), lines[len(lines)-1])

	out, _, err = b.run(t, "envelopes", "list", "--source", "gh", "--limit", "2", "--before-id", admItoa(ids[3]), "--json")
	require.NoError(t, err)
	var page admin.ListResult
	require.NoError(t, json.Unmarshal([]byte(out), &page))
	require.Len(t, page.Envelopes, 2)
	require.Equal(t, ids[2], page.Envelopes[0].ID)
	require.Equal(t, ids[1], page.Envelopes[1].ID)
	require.Equal(t, ids[1], *page.NextBeforeID)
	require.Contains(t, out, `"delivery_id": "gh-3"`, "snake_case keys")

	out, _, err = b.run(t, "envelopes", "list", "--status", "done")
	require.NoError(t, err)
	require.Regexp(t, `^no envelopes match\n\nwindow \S+ to now \(the default: the last 24 hours; --since to look further back\): \d+ partitions?, ~\d+ envelopes, in [\d.]+ ms\n$`, out)

	out, _, err = b.run(t, "envelopes", "list", "--json", "--status", "done")
	require.NoError(t, err)
	var empty struct {
		Envelopes    []admin.Summary `json:"envelopes"`
		NextBeforeID *int64          `json:"next_before_id"`
		Scan         map[string]any  `json:"scan"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &empty))
	require.NotNil(t, empty.Envelopes)
	require.Empty(t, empty.Envelopes)
	require.Nil(t, empty.NextBeforeID)
	require.Equal(t, true, empty.Scan["default_window"], out)
	require.Contains(t, empty.Scan, "since")

	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"envelopes"}, "want a subcommand"},
		{[]string{"envelopes", "frob"}, `unknown subcommand "frob"`},
		{[]string{"envelopes", "list", "--bogus"}, "not defined: -bogus"},
		{[]string{"envelopes", "list", "--limit", "0"}, "--limit 0"},
		{[]string{"envelopes", "list", "--before-id", "-1"}, "before-id must be positive"},
		{[]string{"envelopes", "list", "--status", "nope"}, `status "nope"`},
		{[]string{"envelopes", "list", "--since", "soon"}, "--since"},
		{[]string{"envelopes", "list", "--scan-budget", "0"}, "--scan-budget 0"},
		{[]string{"envelopes", "list", "12"}, "unexpected argument"},
	} {
		_, _, err := b.run(t, tc.args...)
		require.ErrorContains(t, err, tc.msg, tc.args)
		require.Equal(t, 2, exitCode(err), tc.args)
	}
}

func TestEnvelopesShow(t *testing.T) {
	t.Parallel()
	b := admSetup(t)
	ctx := context.Background()
	body := []byte(`{"ref":"refs/heads/main"}`)
	id := b.insert(t, "gh", "deliv-1", body)
	_, err := b.store.Insert(ctx, envelope.NewDelivery{Source: "gh", Provider: "github", DeliveryID: "deliv-1", EventType: "push",
		Body: []byte(`{"ref":"other"}`), Headers: map[string]string{}})
	require.Error(t, err, "a conflict")
	// Finish it as the worker would, then replay it.
	_, err = b.pool.Exec(ctx, `UPDATE envelope SET status = 'done', processed_at = now(), attempts = 1 WHERE id = $1`, id)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now()`)
	require.NoError(t, err)
	_, _, err = b.run(t, "replay", "--reason", "look again", "--actor", "bob", admItoa(id))
	require.NoError(t, err)

	out, _, err := b.run(t, "envelopes", "show", admItoa(id))
	require.NoError(t, err)
	require.Regexp(t, `(?m)^envelope\s+`+admItoa(id)+`$`, out)
	require.Regexp(t, `(?m)^status\s+pending$`, out)
	require.Regexp(t, `(?m)^delivery id\s+deliv-1$`, out)
	require.Regexp(t, `(?m)^  X-Hub-Signature-256\s+\[redacted\]$`, out)
	require.Contains(t, out, "\nbody (text):\n"+string(body)+"\n")
	require.Contains(t, out, "attempts: none")
	require.Contains(t, out, "replays (1):")
	require.Regexp(t, `bob\s+done\s+\d+`, out)
	require.Contains(t, out, "look again")
	require.Contains(t, out, "conflicts (1):")
	require.Contains(t, out, "jobs (2):")
	require.Contains(t, out, "ledger transaction: none")

	require.NotContains(t, out, "against the stored body", "diffs only with --conflicts")

	out, _, err = b.run(t, "envelopes", "show", "--no-body", admItoa(id))
	require.NoError(t, err)
	require.NotContains(t, out, "body (text)")
	require.NotContains(t, out, "refs/heads/main")

	// --conflicts: the conflicting body against the stored one, JSON
	// indented, field by field (even without the body itself).
	out, _, err = b.run(t, "envelopes", "show", "--no-body", "--conflicts", admItoa(id))
	require.NoError(t, err)
	require.Regexp(t, `(?m)^conflict \d+ \(received \S+, 15 bytes, sha256 [0-9a-f]{64}\) against the stored body:\n {4}\{\n  - {3}"ref": "refs/heads/main"\n  \+ {3}"ref": "other"\n {4}\}$`, out)
	out, _, err = b.run(t, "envelopes", "show", "--conflicts", "--json", admItoa(id))
	require.NoError(t, err)
	var withDiff admin.Detail
	require.NoError(t, json.Unmarshal([]byte(out), &withDiff))
	require.Len(t, withDiff.ConflictDiffs, 1)
	require.Equal(t, withDiff.Conflicts[0].ID, withDiff.ConflictDiffs[0].ConflictID)
	require.Contains(t, withDiff.ConflictDiffs[0].Diff, bodydiff.Line{Op: "+", Text: `  "ref": "other"`})

	out, _, err = b.run(t, "envelopes", "show", admItoa(id), "--json")
	require.NoError(t, err)
	var d admin.Detail
	require.NoError(t, json.Unmarshal([]byte(out), &d))
	require.Equal(t, id, d.Envelope.ID)
	require.Equal(t, string(body), *d.Envelope.Body)
	require.Equal(t, "text", d.Envelope.BodyEncoding)
	require.Len(t, d.Replays, 1)
	require.Equal(t, "bob", d.Replays[0].Actor)
	require.Len(t, d.Conflicts, 1)
	require.Len(t, d.Jobs, 2)
	require.Nil(t, d.Ledger)
	require.Contains(t, out, `"ledger_transaction": null`)

	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"envelopes", "show", "987654"}, 1, "envelope 987654 not found"},
		{[]string{"envelopes", "show", "--json", "987654"}, 1, "envelope 987654 not found"},
		{[]string{"envelopes", "show"}, 2, "exactly one envelope ID"},
		{[]string{"envelopes", "show", "1", "2"}, 2, "exactly one envelope ID"},
		{[]string{"envelopes", "show", "abc"}, 2, `"abc" is not an envelope id`},
		{[]string{"envelopes", "show", "0"}, 2, "not an envelope id"},
		{[]string{"envelopes", "show", "--bogus", "1"}, 2, "not defined: -bogus"},
	} {
		_, _, err := b.run(t, tc.args...)
		require.ErrorContains(t, err, tc.msg, tc.args)
		require.Equal(t, tc.code, exitCode(err), tc.args)
	}
}

// Strings a sender chose (delivery id, User-Agent, body) reach the
// operator's terminal with control and bidi characters escaped, in text and
// in JSON.
func TestEnvelopesOutputEscapesControlAndBidi(t *testing.T) {
	t.Parallel()
	b := admSetup(t)
	body := []byte("{\"note\":\"\x1b[2J\u202e\"}")
	res, err := b.store.Insert(context.Background(), envelope.NewDelivery{
		Source: "gh", Provider: "github", DeliveryID: "evt_\u202egnp.exe\u200b", EventType: "push\u2066",
		Body: body, Payload: body, Headers: map[string]string{"User-Agent": "curl\u009b31m/8"},
	})
	require.NoError(t, err)
	raw := []string{"\u202e", "\u200b", "\u2066", "\u009b", "\x1b"}
	for _, args := range [][]string{
		{"envelopes", "list"},
		{"envelopes", "list", "--json"},
		{"envelopes", "show", admItoa(res.EnvelopeID)},
		{"envelopes", "show", "--json", admItoa(res.EnvelopeID)},
	} {
		out, _, err := b.run(t, args...)
		require.NoError(t, err, args)
		for _, r := range raw {
			require.NotContains(t, out, r, "%v prints %q raw", args, r)
		}
		require.Contains(t, out, `evt_\u202egnp.exe\u200b`, args)
	}
	out, _, err := b.run(t, "envelopes", "show", admItoa(res.EnvelopeID))
	require.NoError(t, err)
	require.Contains(t, out, `curl\u009b31m/8`)
	require.Contains(t, out, `\u001b[2J`)
}

// worker envelopes resolve closes failed envelopes with a reason, says what
// it did (text and --json), refuses to run without a reason (a usage
// error, nothing changed), shows the resolution in envelopes show, and
// unresolve undoes it.
func TestEnvelopesResolve(t *testing.T) {
	t.Parallel()
	b := admSetup(t)
	ids := b.seedFailed(t, "rs", 3)

	_, _, err := b.run(t, "envelopes", "resolve", "--source", "rs")
	require.Error(t, err)
	require.Equal(t, 2, exitCode(err), "a missing reason is a usage error: %v", err)
	require.ErrorContains(t, err, "a reason is required")

	out, _, err := b.run(t, "envelopes", "resolve", "--source", "rs", "--dry-run")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^dry run:\s+nothing changed$`, out)
	require.Regexp(t, `(?m)^would be resolved\s+3$`, out)

	out, _, err = b.run(t, "envelopes", "resolve", "--reason", "INC-1: written off", "--actor", "carol", admItoa(ids[0]), admItoa(ids[1]))
	require.NoError(t, err)
	require.Regexp(t, `(?m)^resolved\s+2$`, out)
	require.Regexp(t, `(?m)^ids\s+`+admItoa(ids[0])+` `+admItoa(ids[1])+`$`, out)

	out, _, err = b.run(t, "envelopes", "show", admItoa(ids[0]))
	require.NoError(t, err)
	require.Contains(t, out, "resolutions (1)")
	require.Regexp(t, `resolve\s+carol\s+\S+\s+INC-1: written off`, out)

	out, _, err = b.run(t, "envelopes", "unresolve", "--reason", "mistake", "--json", admItoa(ids[1]))
	require.NoError(t, err)
	var res admin.ResolveResult
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Equal(t, "unresolve", res.Action)
	require.Equal(t, []int64{ids[1]}, res.IDs)

	out, _, err = b.run(t, "envelopes", "list", "--status", "resolved", "--source", "rs")
	require.NoError(t, err)
	require.Contains(t, out, admItoa(ids[0])+" ")
	require.NotContains(t, out, admItoa(ids[1])+" ")
}
