package backfill_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/backfill"
	"github.com/inboxhq/inbox/internal/provider"
	"github.com/inboxhq/inbox/internal/webhooktest"
)

// fakeGitHub serves a repository webhook's deliveries as GitHub documents
// them (GET /repos/{owner}/{repo}/hooks/{hook_id}/deliveries: newest first,
// pages linked with Link rel="next" and a cursor) and redeliveries (POST
// .../deliveries/{id}/attempts: 202, then the delivery is sent again, signed,
// with its GUID, to the hook's URL).
type fakeGitHub struct {
	t          *testing.T
	mu         sync.Mutex
	deliveries []backfill.GitHubDelivery // newest first
	bodies     map[string][]byte         // by GUID
	hookURL    string
	pageSize   int
	path       string // the hook's deliveries
	cursors    []string
	redeliver  []int64
	srv        *httptest.Server
}

func newFakeGitHub(t *testing.T) *fakeGitHub {
	f := &fakeGitHub{t: t, bodies: map[string][]byte{}, pageSize: 2, path: deliveriesPath}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

const deliveriesPath = "/repos/octo/repo/hooks/42/deliveries"

func (f *fakeGitHub) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	deliveriesPath := f.path
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	if r.Header.Get("Authorization") != "Bearer "+githubToken || r.Header.Get("X-GitHub-Api-Version") == "" {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"message":"Bad credentials","documentation_url":"https://docs.github.com/rest","status":"401"}`)
		return
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == deliveriesPath:
		cursor := r.URL.Query().Get("cursor")
		f.mu.Lock()
		f.cursors = append(f.cursors, cursor)
		start := 0
		if cursor != "" {
			start, _ = strconv.Atoi(strings.TrimPrefix(cursor, "v1_"))
		}
		end := min(start+f.pageSize, len(f.deliveries))
		page := f.deliveries[start:end]
		f.mu.Unlock()
		if end < len(f.deliveries) {
			w.Header().Set("Link", fmt.Sprintf(`<%s%s?per_page=%d&cursor=v1_%d>; rel="next", <%s%s?per_page=%d>; rel="first"`,
				f.srv.URL, deliveriesPath, f.pageSize, end, f.srv.URL, deliveriesPath, f.pageSize))
		}
		out := make([]map[string]any, len(page))
		for i, d := range page {
			out[i] = map[string]any{
				"id": d.ID, "guid": d.GUID, "delivered_at": d.DeliveredAt.UTC().Format(time.RFC3339), "redelivery": d.Redelivery,
				"duration": 0.27, "status": d.Status, "status_code": d.StatusCode, "event": d.Event, "action": d.Action,
				"installation_id": nil, "repository_id": 1296269, "throttled_at": nil,
			}
		}
		json.NewEncoder(w).Encode(out) //nolint:errcheck
	case r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, deliveriesPath+"/") && strings.HasSuffix(r.URL.Path, "/attempts"):
		id, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, deliveriesPath+"/"), "/attempts"), 10, 64)
		require.NoError(f.t, err)
		f.mu.Lock()
		f.redeliver = append(f.redeliver, id)
		var orig *backfill.GitHubDelivery
		for i := range f.deliveries {
			if f.deliveries[i].ID == id {
				orig = &f.deliveries[i]
			}
		}
		f.mu.Unlock()
		if orig == nil {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"message":"Not Found","documentation_url":"https://docs.github.com/rest","status":"404"}`)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprint(w, `{}`)
		// GitHub delivers again, same GUID, signed, to the hook's URL.
		d := webhooktest.Delivery{Provider: provider.GitHub, Secret: githubSecret, DeliveryID: orig.GUID, EventType: orig.Event, Body: f.bodies[orig.GUID]}
		req, err := d.Request(context.Background(), f.hookURL)
		require.NoError(f.t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(f.t, err)
		resp.Body.Close()
		require.Equal(f.t, http.StatusAccepted, resp.StatusCode)
	default:
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"message":"Not Found"}`)
	}
}

type ghScenario struct {
	fake  *fakeGitHub
	b     *bundle
	since time.Time
	ids   map[string]int64 // the delivery id to be redelivered, by GUID
}

// ghSetup: six events, newest first in the log:
//
//	A  delivered, 200                       stored: nothing to do
//	B  502 (the endpoint was down)          missing: redeliver
//	C  503, then a redelivery 502           missing: redeliver the latest attempt
//	D  500 but stored (the answer was lost) nothing to do
//	E  504, then a redelivery 200           nothing to do
//	F  502, before the window               not looked at
func ghSetup(t *testing.T) *ghScenario {
	fake := newFakeGitHub(t)
	b := setup(t, "", fake.srv.URL)
	fake.hookURL = b.ingestURL + "/webhooks/github"
	now := time.Now().UTC().Truncate(time.Second)
	push := "push"
	at := func(m int) time.Time { return now.Add(-time.Duration(m) * time.Minute) }
	var id int64 = 1000
	add := func(guid string, code int, when time.Time, redelivery bool) int64 {
		id++
		status := "OK"
		if code/100 != 2 {
			status = "Invalid HTTP Response: " + strconv.Itoa(code)
		}
		fake.deliveries = append(fake.deliveries, backfill.GitHubDelivery{ID: id, GUID: guid, DeliveredAt: when, Redelivery: redelivery, Status: status, StatusCode: code, Event: push})
		fake.bodies[guid] = webhooktest.GitHubPush("refs/heads/" + guid)
		return id
	}
	guid := func(s string) string { return fmt.Sprintf("%s0000000-242f-11e5-81e1-c7b6966d2516", s) }
	ids := map[string]int64{}
	add(guid("a"), 200, at(1), false)
	add(guid("e"), 200, at(2), true)
	ids[guid("c")] = add(guid("c"), 502, at(3), true)
	ids[guid("b")] = add(guid("b"), 502, at(10), false)
	add(guid("c"), 503, at(11), false)
	add(guid("d"), 500, at(12), false)
	add(guid("e"), 504, at(13), false)
	add(guid("f"), 502, at(26*60), false)
	add(guid("9"), 502, at(27*60), false)
	add(guid("8"), 502, at(28*60), false)
	// A and D reached ingest.
	for _, g := range []string{guid("a"), guid("d")} {
		d := webhooktest.Delivery{Provider: provider.GitHub, Secret: githubSecret, DeliveryID: g, EventType: push, Body: fake.bodies[g]}
		req, err := d.Request(context.Background(), fake.hookURL)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusAccepted, resp.StatusCode)
	}
	return &ghScenario{fake: fake, b: b, since: now.Add(-24 * time.Hour), ids: ids}
}

// Only the failed deliveries with no envelope are redelivered, once each
// (its latest attempt), and they arrive through ingest; the log is paged by
// its Link header's cursor up to the window's start.
func TestGitHubBackfillRedeliversFailedDeliveriesOnly(t *testing.T) {
	t.Parallel()
	s := ghSetup(t)
	res, err := s.b.runner.Run(context.Background(), backfill.Request{Source: s.b.cfg.Sources["github"], Since: s.since, Actor: "frank"})
	require.NoError(t, err)
	b, c := "b0000000-242f-11e5-81e1-c7b6966d2516", "c0000000-242f-11e5-81e1-c7b6966d2516"
	require.Equal(t, [3]int{5, 2, 2}, [3]int{res.Listed, res.Found, res.Stored})
	got := []string{}
	for _, m := range res.Missing {
		got = append(got, fmt.Sprintf("%s %s %d", m.ID, m.Type, m.DeliveryID))
	}
	require.Equal(t, []string{fmt.Sprintf("%s push %d", c, s.ids[c]), fmt.Sprintf("%s push %d", b, s.ids[b])}, got)
	s.fake.mu.Lock()
	redelivered, cursors := slices.Clone(s.fake.redeliver), slices.Clone(s.fake.cursors)
	s.fake.mu.Unlock()
	require.Equal(t, []int64{s.ids[c], s.ids[b]}, redelivered)
	require.Equal(t, []string{"", "v1_2", "v1_4", "v1_6"}, cursors, "followed rel=next until the page that reaches past the window")

	envs := s.b.envelopes(t, "github")
	require.Len(t, envs, 4)
	for _, g := range []string{b, c} {
		require.Equal(t, "webhook", envs[g].Origin, "a redelivery arrives as a webhook")
		require.Equal(t, 1, envs[g].Jobs)
	}
	row := s.b.run(t, res.RunID)
	require.Equal(t, [4]any{"done", 5, 2, 2}, [4]any{row.Status, row.Listed, row.Found, row.Stored})
	require.NotContains(t, s.b.logs.String(), githubToken)

	// Again: nothing is missing now.
	res, err = s.b.runner.Run(context.Background(), backfill.Request{Source: s.b.cfg.Sources["github"], Since: s.since, Actor: "frank"})
	require.NoError(t, err)
	require.Zero(t, res.Found)
}

func TestGitHubBackfillDryRunRedeliversNothing(t *testing.T) {
	t.Parallel()
	s := ghSetup(t)
	res, err := s.b.runner.Run(context.Background(), backfill.Request{Source: s.b.cfg.Sources["github"], Since: s.since, DryRun: true, Actor: "frank"})
	require.NoError(t, err)
	require.Equal(t, [3]int{5, 2, 0}, [3]int{res.Listed, res.Found, res.Stored})
	s.fake.mu.Lock()
	require.Empty(t, s.fake.redeliver)
	s.fake.mu.Unlock()
	require.Len(t, s.b.envelopes(t, "github"), 2)
}

// Bad credentials: GitHub's status and message, never the token.
func TestGitHubErrorsNameTheStatusNotTheToken(t *testing.T) {
	t.Parallel()
	s := ghSetup(t)
	src := *s.b.cfg.Sources["github"]
	bf := *src.Backfill
	bf.Token = "ghp_WrongTokenForBackfillTests0000000000"
	src.Backfill = &bf
	_, err := s.b.runner.Run(context.Background(), backfill.Request{Source: &src, Since: s.since, Actor: "frank"})
	require.ErrorContains(t, err, "GitHub API answered 401 Unauthorized: Bad credentials")
	require.NotContains(t, err.Error(), bf.Token)
	require.NotContains(t, s.b.logs.String(), bf.Token)
}

// An organization hook's deliveries are under /orgs/{org}/hooks.
func TestGitHubBackfillOfAnOrganizationHook(t *testing.T) {
	t.Parallel()
	s := ghSetup(t)
	s.fake.mu.Lock()
	s.fake.path = "/orgs/octo/hooks/42/deliveries"
	s.fake.mu.Unlock()
	src := *s.b.cfg.Sources["github"]
	bf := *src.Backfill
	bf.Repo, bf.Org = "", "octo"
	src.Backfill = &bf
	res, err := s.b.runner.Run(context.Background(), backfill.Request{Source: &src, Since: s.since, Actor: "hank"})
	require.NoError(t, err)
	require.Equal(t, [3]int{5, 2, 2}, [3]int{res.Listed, res.Found, res.Stored})
}
