package console_test

import (
	"context"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/admin"
	"github.com/inboxhq/inbox/internal/console"
	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/envelope/envelopetest"
	"github.com/inboxhq/inbox/internal/pgtest"
)

// bundle is a console over a real database, served by httptest with the
// signed-in operator "ops" (the worker puts it behind basic auth; here
// every request is that operator's).
type bundle struct {
	pool *pgxpool.Pool
	srv  *httptest.Server
}

func setup(t *testing.T, opts ...func(*console.Options)) *bundle {
	t.Helper()
	pool := pgtest.NewPool(t)
	logger := slog.New(slog.DiscardHandler)
	jobs, err := envelope.NewInsertClient(pool, logger)
	require.NoError(t, err)
	o := console.Options{Pool: pool, Jobs: jobs, Actor: func(*http.Request) string { return "ops" }, RiverUI: "/riverui", Logger: logger}
	for _, f := range opts {
		f(&o)
	}
	c, err := console.New(o)
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	return &bundle{pool: pool, srv: srv}
}

// noRedirect is a client that returns redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func (b *bundle) get(t *testing.T, path string) (int, string, http.Header) {
	t.Helper()
	resp, err := noRedirect.Get(b.srv.URL + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body), resp.Header
}

func (b *bundle) post(t *testing.T, path string, form url.Values) (int, string, http.Header) {
	t.Helper()
	resp, err := noRedirect.PostForm(b.srv.URL+path, form)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body), resp.Header
}

// as sends a request signed in as user (the X-Test-User header, for a
// console whose Actor reads it), a form body when form is set.
func (b *bundle) as(t *testing.T, user, method, path string, form url.Values) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, b.srv.URL+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("X-Test-User", user)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := noRedirect.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body), resp.Header
}

func (b *bundle) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), q, args...)
	require.NoError(t, err)
}

// waitDone polls a run's page until it says done, and returns it.
func (b *bundle) waitDone(t *testing.T, run string) string {
	t.Helper()
	var body string
	pgtest.Eventually(t, 30*time.Second, "the replay run done", func() (bool, string) {
		_, body, _ = b.get(t, run)
		return strings.Contains(body, "<b>Done.</b>"), body
	})
	return body
}

// seed inserts n failed unknown_currency envelopes of source "stripe" and
// one done one, and returns the failed ids.
func seed(t *testing.T, pool *pgxpool.Pool, n int) []int64 {
	t.Helper()
	var ids []int64
	for i := range n {
		ids = append(ids, envelopetest.Insert(t, pool, envelopetest.Row{
			Source: "stripe", Provider: "stripe", EventType: "payment_intent.succeeded", Status: "failed",
			Body:      []byte(fmt.Sprintf(`{"id":"evt_%d","data":{"object":{"currency":"xyz","metadata":{"merchant_id":"m_%d"}}}}`, i, i%2)),
			Headers:   map[string]string{"Stripe-Signature": "[redacted]", "X-Custom-Token": "leaked-token-value"},
			Attempts:  1,
			LastError: fmt.Sprintf(`permanent: unknown currency "XYZ" (evt_%d)`, i), LastCause: "unknown_currency",
		}))
	}
	envelopetest.Insert(t, pool, envelopetest.Row{Source: "github", Provider: "github", EventType: "push", Status: "done"})
	return ids
}

var (
	csrfField   = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	hiddenField = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)
)

// hidden returns the hidden fields of a page's form, as a browser submits
// them.
func hidden(t *testing.T, page string) url.Values {
	t.Helper()
	v := url.Values{}
	for _, m := range hiddenField.FindAllStringSubmatch(page, -1) {
		v.Add(m[1], html.UnescapeString(m[2]))
	}
	require.NotEmpty(t, v.Get("csrf"), "the form has its token")
	return v
}

// token reads the form token of a page.
func token(t *testing.T, page string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(page)
	require.NotNil(t, m, "the page has a form token")
	return m[1]
}

func TestPagesRenderWithSecurityHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := seed(t, b.pool, 3)
	for _, path := range []string{
		"/console/overview",
		"/console/envelopes",
		"/console/envelopes?status=failed&cause=unknown_currency&source=stripe",
		"/console/envelopes?field=data.object.metadata.merchant_id%3Dm_1",
		"/console/envelopes?header=Stripe-Signature%3D%5Bredacted%5D",
		fmt.Sprintf("/console/envelopes/%d", ids[0]),
		fmt.Sprintf("/console/envelopes/%d?body=raw", ids[0]),
		"/console/failures",
		"/console/failures?window=1h&source=stripe",
		"/console/failures?window=7d",
		"/console/replay?status=failed&cause=unknown_currency",
		fmt.Sprintf("/console/replay?id=%d", ids[1]),
		"/console/replays",
	} {
		code, body, h := b.get(t, path)
		require.Equal(t, http.StatusOK, code, "%s: %s", path, body)
		require.Contains(t, h.Get("Content-Security-Policy"), "default-src 'none'", path)
		require.Contains(t, h.Get("Content-Security-Policy"), "frame-ancestors 'none'", path)
		require.Equal(t, "no-store", h.Get("Cache-Control"), path)
		require.Equal(t, "nosniff", h.Get("X-Content-Type-Options"), path)
		require.Contains(t, body, "signed in as <b>ops</b>", path)
		require.NotContains(t, body, "leaked-token-value", "%s: a credential-like header is redacted on display", path)
	}
	// Another site's page may link here, but not embed or fetch it.
	for _, c := range []struct {
		mode, dest string
		code       int
	}{{"navigate", "document", http.StatusOK}, {"no-cors", "image", http.StatusForbidden}, {"cors", "empty", http.StatusForbidden}} {
		req, err := http.NewRequest(http.MethodGet, b.srv.URL+"/console/envelopes?contains=%7B%7D", nil)
		require.NoError(t, err)
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		req.Header.Set("Sec-Fetch-Mode", c.mode)
		req.Header.Set("Sec-Fetch-Dest", c.dest)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, c.code, resp.StatusCode, "cross-site %s/%s", c.mode, c.dest)
	}
	code, body, h := b.get(t, "/console/")
	require.Equal(t, http.StatusFound, code, body)
	require.Equal(t, "/console/envelopes", h.Get("Location"))
	code, _, h = b.get(t, "/console/static/console.css")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, h.Get("Content-Type"), "text/css")
}

func TestListFiltersAndPages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := seed(t, b.pool, 3)
	_, body, _ := b.get(t, "/console/envelopes?status=failed")
	for _, id := range ids {
		require.Contains(t, body, fmt.Sprintf(`href="/console/envelopes/%d"`, id))
	}
	require.NotContains(t, body, ">push<", "the done GitHub envelope is filtered out")
	require.Contains(t, body, `href="/console/replay?status=failed"`, "the replay link keeps the filter, unescaped")
	require.Regexp(t, `id="scanned"><small>Read the window [-\d: Z]+ to now \(the default: the last 24 hours; set <i>since</i> to look further back\): \d+ partitions?, ~\d+ envelopes, in [\d.]+ m?s\.`, body)
	_, body, _ = b.get(t, "/console/envelopes?field=data.object.metadata.merchant_id%3Dm_1")
	require.Equal(t, 1, strings.Count(body, `href="/console/envelopes/`), "only evt_1 has merchant m_1")
	require.Contains(t, body, fmt.Sprintf(`href="/console/envelopes/%d"`, ids[1]))
	require.Regexp(t, `the body/header search read ~\d+ of them`, body)
	require.NotContains(t, body, `id="stopped"`)
	// A header search, through the day's headers index (00204): every
	// seeded Stripe envelope has this header.
	_, body, _ = b.get(t, "/console/envelopes?header=stripe-signature%3D%5Bredacted%5D")
	require.Equal(t, 3, strings.Count(body, `href="/console/envelopes/`), body)
	require.Regexp(t, `the body/header search read ~0 of them one by one and ~\d+ through an index \(3 index matches read\)`, body)

	// Pages of 2, newest first, by id cursor.
	_, body, _ = b.get(t, "/console/envelopes?status=failed&limit=2")
	require.Contains(t, body, fmt.Sprintf(`href="/console/envelopes/%d"`, ids[2]))
	require.Contains(t, body, fmt.Sprintf(`href="/console/envelopes/%d"`, ids[1]))
	require.NotContains(t, body, fmt.Sprintf(`href="/console/envelopes/%d"`, ids[0]))
	require.Contains(t, body, "<b>3</b> envelopes match", "every page's count, not this page's")
	next := regexp.MustCompile(`id="next" href="([^"]+)"`).FindStringSubmatch(body)
	require.NotNil(t, next, "a next page")
	code, body, _ := b.get(t, strings.ReplaceAll(next[1], "&amp;", "&"))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, fmt.Sprintf(`href="/console/envelopes/%d"`, ids[0]))
	require.NotContains(t, body, `id="next"`, "the last page")
}

func TestBadInputIsAClearError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seed(t, b.pool, 1)
	for _, c := range []struct {
		path string
		code int
		want string
	}{
		{"/console/envelopes?status=lost", http.StatusBadRequest, "status"},
		{"/console/envelopes?cause=nope", http.StatusBadRequest, "cause: &#34;nope&#34;: want one of"},
		{"/console/envelopes?since=yesterday", http.StatusBadRequest, "since:"},
		{"/console/envelopes?field=nodot", http.StatusBadRequest, "field:"},
		{"/console/envelopes?header=novalue", http.StatusBadRequest, "header:"},
		{"/console/envelopes?contains=%7Bnot+json", http.StatusBadRequest, "not valid JSON"},
		{"/console/envelopes?before=x", http.StatusBadRequest, "before:"},
		{"/console/envelopes?source=%ff", http.StatusBadRequest, "source: holds invalid UTF-8"},
		{"/console/envelopes?contains=%7B%22a%22%3A%22%5Cu0000%22%7D", http.StatusBadRequest, "contains: holds invalid UTF-8 or a NUL"},
		{"/console/envelopes?limit=100000", http.StatusBadRequest, "limit:"},
		{"/console/envelopes/abc", http.StatusBadRequest, "not an envelope id"},
		{"/console/envelopes/999999", http.StatusNotFound, "envelope 999999 not found"},
		{"/console/failures?window=2y", http.StatusBadRequest, "window"},
		{"/console/replay", http.StatusBadRequest, "replaying everything is not allowed"},
		{"/console/replay?id=999999", http.StatusNotFound, "not found"},
		{"/console/replay?id=-1", http.StatusBadRequest, "not an envelope id"},
		{"/console/replays/nope", http.StatusNotFound, "no such replay run"},
		{"/console/jobs/999999", http.StatusNotFound, "not a live processing job"},
		{"/console/nowhere", http.StatusNotFound, "no such page"},
	} {
		code, body, _ := b.get(t, c.path)
		require.Equal(t, c.code, code, "%s: %s", c.path, body)
		require.Contains(t, body, c.want, c.path)
	}
}

// A replay needs the operator's form token, then a reason; without either
// nothing is written. With both it runs, and the audit rows name the
// signed-in operator and the reason.
func TestReplayNeedsTokenAndReason(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := seed(t, b.pool, 3)
	_, page, _ := b.get(t, "/console/replay?status=failed&cause=unknown_currency")
	require.Contains(t, page, `<b id="would-replay">3</b>`)
	tok := token(t, page)

	form := url.Values{"status": {"failed"}, "cause": {"unknown_currency"}, "reason": {"INC-7"}}
	code, _, _ := b.post(t, "/console/replay", form)
	require.Equal(t, http.StatusForbidden, code, "no token")
	form.Set("csrf", tok+"x")
	code, _, _ = b.post(t, "/console/replay", form)
	require.Equal(t, http.StatusForbidden, code, "a wrong token")
	form.Set("csrf", tok)
	code, body, _ := b.post(t, "/console/replay", form)
	require.Equal(t, http.StatusBadRequest, code, "a form no dry run produced")
	require.Contains(t, body, "dry run")
	form.Set("nonce", "0123456789abcdef")
	code, body, _ = b.post(t, "/console/replay", form)
	require.Equal(t, http.StatusBadRequest, code, "a dry run this worker never showed")
	require.Contains(t, body, "no record of that dry run")
	form = hidden(t, page)
	form.Set("reason", "   ")
	code, body, _ = b.post(t, "/console/replay", form)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, "a reason is required")
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay`), "nothing was replayed")
	require.Equal(t, 3, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE status = 'failed'`), "nothing changed")

	form = hidden(t, page)
	form.Set("reason", "INC-7: currency added")
	form.Set("limit", "2")
	code, _, h := b.post(t, "/console/replay", form)
	require.Equal(t, http.StatusSeeOther, code)
	run := h.Get("Location")
	require.True(t, strings.HasPrefix(run, "/console/replays/"), run)
	body = b.waitDone(t, run)
	require.Contains(t, body, `<b id="replayed">2</b>`, "the limit holds")
	require.Regexp(t, `(?s)id="outcome".*st-pending">pending</span></td><td>unknown_currency</td><td class="num">2</td>`, body, "what became of them: pending again (the cause is the last failure's)")
	require.NotContains(t, body, `http-equiv="refresh"`, "a finished run stops refreshing")
	require.Equal(t, 2, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay WHERE actor = 'console:ops' AND reason = 'INC-7: currency added'`))
	require.Equal(t, 2, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE status = 'pending' AND id = ANY($1)`, ids))
	require.Equal(t, 2, pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'process_envelope'`))

	// The replays page and the envelope page show it.
	_, body, _ = b.get(t, "/console/replays")
	require.Contains(t, body, "INC-7: currency added")
	_, body, _ = b.get(t, fmt.Sprintf("/console/envelopes/%d", ids[0]))
	require.Contains(t, body, "INC-7: currency added")
	require.Contains(t, body, "console:ops")

	// The job leads back to its envelope.
	var job int64
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT id FROM river_job WHERE (args->>'envelope_id')::bigint = $1`, ids[0]).Scan(&job))
	code, _, h = b.get(t, fmt.Sprintf("/console/jobs/%d", job))
	require.Equal(t, http.StatusFound, code)
	require.Equal(t, fmt.Sprintf("/console/envelopes/%d", ids[0]), h.Get("Location"))
}

func TestReadOnlyConsoleRefusesReplay(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *console.Options) { o.ReadOnly, o.ReadOnlyReason = true, "no privilege" })
	ids := seed(t, b.pool, 1)
	code, body, _ := b.get(t, fmt.Sprintf("/console/replay?id=%d", ids[0]))
	require.Equal(t, http.StatusOK, code, "the dry run still shows")
	require.Contains(t, body, "Read-only: no privilege")
	require.NotContains(t, body, `id="replay-form"`, "no form to submit")
	code, body, _ = b.post(t, "/console/replay", url.Values{"id": {fmt.Sprint(ids[0])}, "reason": {"x"}})
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, body, "replay is off in this console: no privilege")
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay`))
}

func TestFailuresGroupByCause(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seed(t, b.pool, 3)
	envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "shop", Status: "failed", LastError: "forward: 503", LastCause: "forward_5xx"})
	_, body, _ := b.get(t, "/console/failures")
	i, j := strings.Index(body, "<b>unknown_currency</b>"), strings.Index(body, "<b>forward_5xx</b>")
	require.Positive(t, i)
	require.Greater(t, j, i, "the most frequent cause first")
	require.Contains(t, body, "<b>4</b> envelopes are failed now")
	_, body, _ = b.get(t, "/console/failures?source=shop")
	require.NotContains(t, body, "<b>unknown_currency</b>", "one source")
	require.Contains(t, body, "<b>forward_5xx</b>")
}

// A running replay stops on request: the batch in flight rolls back and
// nothing of it is recorded. The batch is held in flight by a transaction
// that locks the envelopes first.
func TestStopARunningReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := seed(t, b.pool, 2)
	ctx := context.Background()
	hold := pgtest.Tx(t, b.pool)
	_, err := hold.Exec(ctx, `SELECT id FROM envelope WHERE id = ANY($1) FOR UPDATE`, ids)
	require.NoError(t, err)

	_, page, _ := b.get(t, "/console/replay?status=failed")
	tok := token(t, page)
	form := hidden(t, page)
	form.Set("reason", "INC-9")
	code, _, h := b.post(t, "/console/replay", form)
	require.Equal(t, http.StatusSeeOther, code)
	run := h.Get("Location")
	_, body, _ := b.get(t, run)
	require.Contains(t, body, `id="stop"`, "a running replay can be stopped")
	require.Contains(t, body, `http-equiv="refresh"`, "and its page refreshes")

	code, _, _ = b.post(t, run+"/stop", url.Values{})
	require.Equal(t, http.StatusForbidden, code, "stopping needs the form token too")
	code, _, h = b.post(t, run+"/stop", url.Values{"csrf": {token(t, body)}})
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, run, h.Get("Location"))
	pgtest.Eventually(t, 30*time.Second, "the replay run stopped", func() (bool, string) {
		_, body, _ = b.get(t, run)
		return strings.Contains(body, "Stopped:"), body
	})
	require.Contains(t, body, "stopped on request")
	require.NoError(t, hold.Rollback(ctx))
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay`), "the batch in flight rolled back")
	require.Equal(t, 2, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE status = 'failed'`))
	require.NotContains(t, body, `id="stop"`, "a finished run has nothing to stop")
	code, _, _ = b.post(t, "/console/replays/nope/stop", url.Values{"csrf": {tok}})
	require.Equal(t, http.StatusNotFound, code)
}

// The replay takes what its dry run showed: envelopes that match only
// afterwards (stored since, or failed since) are left out, and relative
// times are fixed at the dry run's clock.
func TestReplayTakesWhatTheDryRunShowed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Older than the failed ones (a lower id, so within the pinned max_id),
	// pending at the dry run, failed by the time it is confirmed.
	pendingThen := envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "stripe", LastCause: "unknown_currency"})
	ids := seed(t, b.pool, 2)
	_, page, _ := b.get(t, "/console/replay?status=failed&cause=unknown_currency&since=1h")
	require.Contains(t, page, `<b id="would-replay">2</b>`)
	form := hidden(t, page)
	require.Equal(t, fmt.Sprint(ids[1]), form.Get("max_id"), "pinned to the newest match")
	require.Equal(t, "2", form.Get("expect"))
	since, err := time.Parse(time.RFC3339Nano, form.Get("since"))
	require.NoError(t, err, "the relative bound is sent as the instant it meant: %q", form.Get("since"))
	require.WithinDuration(t, time.Now().Add(-time.Hour), since, time.Minute)

	// After the dry run: one more fails, one that was pending fails too.
	seed(t, b.pool, 1)
	b.exec(t, `UPDATE envelope SET status = 'failed', processed_at = now() WHERE id = $1`, pendingThen)
	require.Equal(t, 4, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE status = 'failed' AND last_cause = 'unknown_currency'`))

	form.Set("reason", "INC-8")
	code, _, h := b.post(t, "/console/replay", form)
	require.Equal(t, http.StatusSeeOther, code)
	b.waitDone(t, h.Get("Location"))
	require.Equal(t, fmt.Sprintf("%d,%d", ids[0], ids[1]), form.Get("within"), "few enough to name: the form pins the dry run's ids")
	replayed := pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay WHERE reason = 'INC-8'`)
	require.Equal(t, 2, replayed, "as many as the dry run showed, no more")
	require.Equal(t, 2, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay WHERE reason = 'INC-8' AND envelope_id = ANY($1)`, ids),
		"exactly the envelopes the dry run showed: not the one that failed since (a lower id), nor the one stored since")

	// A form without its dry run's mark is refused.
	form.Del("nonce")
	code, body, _ := b.post(t, "/console/replay", form)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, "dry run")
}

// A replay runs against the dry run the server recorded (issue 22: one POST
// with expect=1000000 and no dry run ever loaded replayed 20,109): a form
// edited in the browser (a bigger count, its pinned ids and its selection
// removed) replays what the dry run showed, no more.
func TestAnEditedReplayFormReplaysOnlyTheRecordedDryRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := seed(t, b.pool, 3)
	others := envelopetest.InsertMany(t, b.pool, 5, func(int) envelopetest.Row {
		return envelopetest.Row{Source: "other", Status: "failed", LastCause: "unknown_currency"}
	})
	_, page, _ := b.get(t, "/console/replay?source=stripe&status=failed")
	require.Contains(t, page, `<b id="would-replay">3</b>`)
	form := hidden(t, page)
	form.Set("expect", "1000000")
	for _, k := range []string{"within", "source", "max_id"} {
		form.Del(k)
	}
	form.Set("reason", "INC-10 forged")
	code, _, h := b.post(t, "/console/replay", form)
	require.Equal(t, http.StatusSeeOther, code)
	b.waitDone(t, h.Get("Location"))
	require.Equal(t, 3, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay WHERE reason = 'INC-10 forged' AND envelope_id = ANY($1)`, ids))
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay WHERE envelope_id = ANY($1)`, others), "outside the dry run")
}

// The console's ceiling caps a run, and the page says so before it starts.
func TestConsoleReplayCeiling(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *console.Options) { o.MaxReplay = 2 })
	seed(t, b.pool, 3)
	_, page, _ := b.get(t, "/console/replay?source=stripe&status=failed")
	require.Contains(t, page, `<b id="would-replay">3</b>`)
	require.Contains(t, page, "replays at most 2 envelopes per run")
	require.Contains(t, page, `id="confirm">Replay 2 envelopes`)
	form := hidden(t, page)
	form.Set("reason", "INC-11")
	code, _, h := b.post(t, "/console/replay", form)
	require.Equal(t, http.StatusSeeOther, code)
	b.waitDone(t, h.Get("Location"))
	require.Equal(t, 2, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay WHERE reason = 'INC-11'`))
}

// An operator confirms only their own dry run and stops only their own
// run; a supervisor may stop anyone's.
func TestDryRunsAndStopsAreTheOperators(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *console.Options) {
		o.Actor = func(r *http.Request) string { return r.Header.Get("X-Test-User") }
		o.Supervisors = map[string]bool{"sam": true}
	})
	ids := seed(t, b.pool, 2)
	_, alicePage, _ := b.as(t, "alice", http.MethodGet, fmt.Sprintf("/console/replay?id=%d", ids[0]), nil)
	_, bobPage, _ := b.as(t, "bob", http.MethodGet, fmt.Sprintf("/console/replay?id=%d", ids[1]), nil)
	form := hidden(t, alicePage)
	form.Set("csrf", token(t, bobPage)) // bob's own token, alice's dry run
	form.Set("reason", "not mine")
	code, _, _ := b.as(t, "bob", http.MethodPost, "/console/replay", form)
	require.Equal(t, http.StatusForbidden, code, "another operator's dry run")
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay`))

	form = hidden(t, alicePage)
	form.Set("reason", "mine")
	code, _, h := b.as(t, "alice", http.MethodPost, "/console/replay", form)
	require.Equal(t, http.StatusSeeOther, code)
	run := h.Get("Location")
	stop := url.Values{"csrf": {token(t, bobPage)}}
	code, body, _ := b.as(t, "bob", http.MethodPost, run+"/stop", stop)
	require.Equal(t, http.StatusForbidden, code, "bob may not stop alice's run")
	require.Contains(t, body, "console:alice")
	_, samPage, _ := b.as(t, "sam", http.MethodGet, fmt.Sprintf("/console/replay?id=%d", ids[1]), nil)
	code, _, _ = b.as(t, "sam", http.MethodPost, run+"/stop", url.Values{"csrf": {token(t, samPage)}})
	require.Equal(t, http.StatusSeeOther, code, "a supervisor may")
	code, _, _ = b.as(t, "alice", http.MethodPost, run+"/stop", url.Values{"csrf": {token(t, alicePage)}})
	require.Equal(t, http.StatusSeeOther, code, "and so may its operator")
}

// Beyond MaxIDs matches the form cannot name them: it pins the dry run's
// newest match and count instead, so nothing stored since is replayed.
func TestLargeReplayPinnedByMaxIDAndCount(t *testing.T) {
	t.Parallel()
	b := setup(t)
	n := admin.MaxIDs + 1
	pendingThen := envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "stripe", LastCause: "unknown_currency"})
	ids := envelopetest.InsertMany(t, b.pool, n, func(int) envelopetest.Row {
		return envelopetest.Row{Source: "stripe", Status: "failed", LastCause: "unknown_currency"}
	})
	_, page, _ := b.get(t, "/console/replay?status=failed&source=stripe")
	require.Contains(t, page, fmt.Sprintf(`<b id="would-replay">%d</b>`, n))
	form := hidden(t, page)
	require.Empty(t, form.Get("within"), "too many to name")
	require.Equal(t, fmt.Sprint(ids[n-1]), form.Get("max_id"))
	later := envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "stripe", Status: "failed", LastCause: "unknown_currency"})
	b.exec(t, `UPDATE envelope SET status = 'failed', processed_at = now() WHERE id = $1`, pendingThen)
	form.Set("reason", "INC-9 bulk")
	code, _, h := b.post(t, "/console/replay", form)
	require.Equal(t, http.StatusSeeOther, code)
	b.waitDone(t, h.Get("Location"))
	require.Equal(t, n, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay WHERE reason = 'INC-9 bulk'`),
		"at most the dry run's count, though one more (failed since, with a lower id) matches now")
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay WHERE envelope_id = $1`, later), "stored after the dry run")
}

// Another operator's form token is refused: the token is bound to the
// signed-in user.
func TestFormTokenIsTheOperators(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *console.Options) {
		o.Actor = func(r *http.Request) string { return r.Header.Get("X-Test-User") }
	})
	ids := seed(t, b.pool, 1)
	_, page, _ := b.as(t, "alice", http.MethodGet, fmt.Sprintf("/console/replay?id=%d", ids[0]), nil)
	form := hidden(t, page)
	form.Set("reason", "mine")
	code, _, _ := b.as(t, "bob", http.MethodPost, "/console/replay", form)
	require.Equal(t, http.StatusForbidden, code, "alice's token, bob's request")
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay`))
	code, _, _ = b.as(t, "alice", http.MethodPost, "/console/replay", form)
	require.Equal(t, http.StatusSeeOther, code)
}

// Stored values are data, never markup: a hostile body, header and error
// are escaped on every page.
func TestStoredValuesAreEscaped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const evil = `<script>alert(1)</script>`
	id := envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "stripe", Status: "failed", EventType: evil,
		Body: []byte(`{"x":"` + `<img src=x onerror=alert(1)>` + `"}`), Headers: map[string]string{"X-Evil": evil},
		LastError: evil, LastCause: "internal"})
	for _, path := range []string{"/console/envelopes", fmt.Sprintf("/console/envelopes/%d", id), fmt.Sprintf("/console/envelopes/%d?body=raw", id),
		"/console/failures", fmt.Sprintf("/console/replay?id=%d", id)} {
		_, body, _ := b.get(t, path)
		require.NotContains(t, body, "<script>alert", path)
		require.NotContains(t, body, "<img src=x", path)
	}
}

// At most two replays run at once per console; a third is refused with 429
// and starts nothing.
func TestAThirdConcurrentReplayIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := seed(t, b.pool, 3)
	ctx := context.Background()
	hold := pgtest.Tx(t, b.pool) // holds every envelope: the runs wait on their first batch
	_, err := hold.Exec(ctx, `SELECT id FROM envelope WHERE id = ANY($1) FOR UPDATE`, ids)
	require.NoError(t, err)
	start := func(id int64) (int, string) {
		_, page, _ := b.get(t, fmt.Sprintf("/console/replay?id=%d", id))
		form := hidden(t, page)
		form.Set("reason", "concurrent")
		code, body, _ := b.post(t, "/console/replay", form)
		return code, body
	}
	code, _ := start(ids[0])
	require.Equal(t, http.StatusSeeOther, code)
	code, _ = start(ids[1])
	require.Equal(t, http.StatusSeeOther, code)
	code, body := start(ids[2])
	require.Equal(t, http.StatusTooManyRequests, code)
	require.Contains(t, body, "two replays are already running")
	require.NoError(t, hold.Rollback(ctx))
	pgtest.Eventually(t, 30*time.Second, "the two runs done", func() (bool, string) {
		n := pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay`)
		return n == 2, fmt.Sprint(n)
	})
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay WHERE envelope_id = $1`, ids[2]), "the third started nothing")
}

// The dry run splits its matches by status and warns when done envelopes
// are among them; rows ticked on the list are replayed by id.
func TestPreviewByStatusAndSelectedRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := seed(t, b.pool, 2)
	_, body, _ := b.get(t, "/console/replay?source=github")
	require.Contains(t, body, `id="done-warning"`, "the GitHub envelope is done")
	require.Contains(t, body, `st-done">done</span> 1`)
	_, body, _ = b.get(t, "/console/replay?status=failed")
	require.NotContains(t, body, `id="done-warning"`)

	_, list, _ := b.get(t, "/console/envelopes?status=failed")
	require.Contains(t, list, fmt.Sprintf(`<input type="checkbox" name="id" value="%d"`, ids[0]))
	require.Contains(t, list, `id="replay-selected"`)
	_, body, _ = b.get(t, fmt.Sprintf("/console/replay?id=%d&id=%d", ids[0], ids[1]))
	require.Contains(t, body, `<b id="would-replay">2</b>`)
	require.Equal(t, []string{fmt.Sprint(ids[0]), fmt.Sprint(ids[1])}, hidden(t, body)["id"])
}

// A form submitted twice (a double click, a resubmitted page) starts one
// replay: the second answer leads to the first run.
func TestConfirmFormSubmittedTwiceReplaysOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := seed(t, b.pool, 1)
	_, page, _ := b.get(t, fmt.Sprintf("/console/replay?id=%d", ids[0]))
	form := hidden(t, page)
	require.NotEmpty(t, form.Get("nonce"))
	form.Set("reason", "once")
	code, _, h1 := b.post(t, "/console/replay", form)
	require.Equal(t, http.StatusSeeOther, code)
	b.waitDone(t, h1.Get("Location"))
	code, _, h2 := b.post(t, "/console/replay", form)
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, h1.Get("Location"), h2.Get("Location"), "the same run")
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay`))
	form.Del("nonce")
	code, body, _ := b.post(t, "/console/replay", form)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, "dry run")
}

// A bad "at most" keeps the dry run, the form and the reason typed: it only
// asks for a number.
func TestBadLimitKeepsTheForm(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := seed(t, b.pool, 1)
	_, page, _ := b.get(t, fmt.Sprintf("/console/replay?id=%d", ids[0]))
	form := hidden(t, page)
	form.Set("reason", "INC-11 typed carefully")
	form.Set("limit", "ten")
	code, body, _ := b.post(t, "/console/replay", form)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, "limit: &#34;ten&#34;: want a whole number")
	require.Contains(t, body, `id="replay-form"`, "the form is still there")
	require.Contains(t, body, `value="INC-11 typed carefully"`, "with the reason")
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_replay`))
}

// An envelope resent with 300 other bodies lists the first 50 and says how
// many there are (issue 22: 3,000 conflicts made a 2.7 MB page).
func TestEnvelopePageListsAtMost50Conflicts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := seed(t, b.pool, 1)[0]
	b.exec(t, `INSERT INTO envelope_conflict (envelope_id, source, delivery_id, body_sha256, body_size, body, headers)
		SELECT e.id, e.source, e.delivery_id, sha256(convert_to(g::text, 'UTF8')), 3, convert_to(g::text, 'UTF8'), '{"X-Variant":"v"}'
		  FROM envelope e, generate_series(1, 300) g WHERE e.id = $1`, id)
	code, page, _ := b.get(t, fmt.Sprintf("/console/envelopes/%d", id))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, "<h2>Conflicts <small>300</small></h2>")
	require.Contains(t, page, "the first 50 of 300 shown")
	require.Equal(t, 50, strings.Count(page, `<article class="conflict">`))
	require.Less(t, len(page), 200_000)
}

// The header's search box jumps to an envelope by its id, its delivery id
// (any source) or its Shopify event id, lists a delivery id two sources
// share, and says what it
// looked for when nothing matches.
func TestSearchBoxJumps(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := seed(t, b.pool, 1)
	var delivery string
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT delivery_id FROM envelope WHERE id = $1`, ids[0]).Scan(&delivery))
	shared := envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "a", DeliveryID: "evt_shared"})
	envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "b", DeliveryID: "evt_shared"})
	shop := envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "shop", Provider: "shopify", DeliveryID: "b54557e4-bdd9",
		EventType: "orders/paid", Headers: map[string]string{"X-Shopify-Event-Id": "98880550-7158-44d4-b7cd-2c97c8a091b5"}})

	_, page, _ := b.get(t, "/console/envelopes")
	require.Contains(t, page, `<form class="search" method="get" action="/console/search" role="search">`, "every page has the box")

	for _, c := range []struct{ q, location string }{
		{fmt.Sprint(ids[0]), fmt.Sprintf("/console/envelopes/%d", ids[0])},
		{" " + delivery + " ", fmt.Sprintf("/console/envelopes/%d", ids[0])},
		{fmt.Sprint(shared), fmt.Sprintf("/console/envelopes/%d", shared)},
		{"evt_shared", "/console/envelopes?delivery_id=evt_shared"},
		{"98880550-7158-44d4-b7cd-2c97c8a091b5", fmt.Sprintf("/console/envelopes/%d", shop)}, // Shopify's event id
		{"", "/console/envelopes"},
	} {
		code, _, h := b.get(t, "/console/search?q="+url.QueryEscape(c.q))
		require.Equal(t, http.StatusFound, code, c.q)
		require.Equal(t, c.location, h.Get("Location"), c.q)
	}
	code, body, _ := b.get(t, "/console/search?q=evt_nowhere")
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, body, "no envelope has the id, delivery id or Shopify event id &#34;evt_nowhere&#34;")
	code, _, _ = b.get(t, "/console/search?q="+strings.Repeat("x", 513))
	require.Equal(t, http.StatusBadRequest, code)
	// A number that is no envelope's id is looked up as a delivery id too.
	code, _, _ = b.get(t, "/console/search?q=987654321")
	require.Equal(t, http.StatusNotFound, code)
}

// The list refreshes itself when asked (a meta refresh: no script), off by
// default; the envelope page shows the body before the jobs, and the note
// about cancelled jobs only on a failed envelope's page.
func TestListAutoRefreshAndEnvelopeLayout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	failed := seed(t, b.pool, 1)[0]
	done := envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "stripe", Status: "done", ProcessedAt: time.Now(), Attempts: 1})

	_, page, _ := b.get(t, "/console/envelopes?status=failed")
	require.NotContains(t, page, `http-equiv="refresh"`, "off by default")
	require.Contains(t, page, `<a href="/console/envelopes?refresh=on&amp;status=failed">auto-refresh</a>`)
	_, page, _ = b.get(t, "/console/envelopes?status=failed&refresh=on")
	require.Contains(t, page, `<meta http-equiv="refresh" content="10">`)
	require.Contains(t, page, `refreshing every 10 s · <a href="/console/envelopes?status=failed">stop</a>`)

	for _, id := range []int64{failed, done} { // each with its finished job
		b.exec(t, `INSERT INTO river_job (args, kind, max_attempts, queue, state, finalized_at)
			VALUES (jsonb_build_object('envelope_id', $1::bigint), 'process_envelope', 25, 'default',
			        CASE WHEN $1::bigint = $2::bigint THEN 'cancelled' ELSE 'completed' END::river_job_state, now())`, id, failed)
	}
	_, page, _ = b.get(t, fmt.Sprintf("/console/envelopes/%d", failed))
	require.Contains(t, page, `id="cancelled-note"`)
	require.Less(t, strings.Index(page, `<section id="body">`), strings.Index(page, `<section id="jobs">`), "the body comes before the jobs")
	_, page, _ = b.get(t, fmt.Sprintf("/console/envelopes/%d", done))
	require.Contains(t, page, `<td>completed</td>`)
	require.NotContains(t, page, `id="cancelled-note"`, "a done envelope's page")
}

// The dry run, the run page and both Replays tables say which selection in
// words, not URL-encoded.
func TestReplayPagesStateTheSelection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seed(t, b.pool, 2)
	_, page, _ := b.get(t, "/console/replay?status=failed&cause=unknown_currency&since=1h")
	require.Regexp(t, `<p id="selection">Selection: <a href="/console/envelopes\?[^"]+">cause unknown_currency · since 1h ago · status failed</a></p>`, page)
	form := hidden(t, page)
	form.Set("reason", "INC-9")
	code, _, h := b.post(t, "/console/replay", form)
	require.Equal(t, http.StatusSeeOther, code)
	run := b.waitDone(t, h.Get("Location"))
	require.Regexp(t, `<dd id="selection"><a href="/console/envelopes\?[^"]+">cause unknown_currency · [^<]*status failed[^<]*</a></dd>`, run)
	_, page, _ = b.get(t, "/console/replays")
	require.Regexp(t, `<td>INC-9</td><td><a href="/console/envelopes\?[^"]+">cause unknown_currency · [^<]*status failed`, page, "the console's runs")
	require.Regexp(t, `<td>INC-9</td><td><small>cause unknown_currency · [^<]*status failed[^<]*</small></td>`, page, "the recorded runs")
}

// A conflicting resend marks its envelope in the list.
func TestListMarksConflicts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := seed(t, b.pool, 2)
	b.exec(t, `INSERT INTO envelope_conflict (envelope_id, source, delivery_id, body_sha256, body_size, body, headers, received_at)
		SELECT id, source, delivery_id, sha256(body || 'x'), body_size + 1, body || 'x', headers, now() FROM envelope_with_body WHERE id = $1`, ids[0])
	_, page, _ := b.get(t, "/console/envelopes?status=failed")
	require.Contains(t, page, fmt.Sprintf(`<a class="badge conflict-mark" href="/console/envelopes/%d#conflicts" title="1 resent with another body">1</a>`, ids[0]))
	require.Equal(t, 1, strings.Count(page, "conflict-mark"), "only the conflicting one")
}

// The overview page is worker stats in the console: per-source counts from
// the counters, the oldest pending envelope, failures by cause, each
// linking to what it counts.
func TestOverviewPage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	failed := seed(t, b.pool, 2)
	pending := envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "gh", Provider: "github", Status: "pending", ReceivedAt: time.Now().Add(-time.Hour)})
	envelopetest.InsertMany(t, b.pool, 3, func(int) envelopetest.Row {
		return envelopetest.Row{Source: "gh", Provider: "github", Status: "done", ReceivedAt: time.Now().Add(-5 * time.Minute)}
	})
	code, page, _ := b.get(t, "/console/overview")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, `<a href="/console/overview" aria-current="page">Overview</a>`)
	require.Regexp(t, `<td><a href="/console/envelopes\?source=stripe">stripe</a></td>\s*<td class="num"><a href="/console/envelopes\?source=stripe&amp;status=pending">0</a></td>\s*<td class="num">0</td>\s*<td class="num"><a class="err" href="/console/envelopes\?source=stripe&amp;status=failed">2</a></td>`, page)
	require.Contains(t, page, fmt.Sprintf(`<dd id="oldest-pending"><a href="/console/envelopes/%d">envelope %d</a> (gh)`, pending, pending))
	require.Contains(t, page, `<a href="/console/envelopes?status=failed&amp;cause=unknown_currency">unknown_currency</a>`)
	require.Contains(t, page, fmt.Sprintf(`<a href="/console/envelopes/%d">%d</a>`, failed[1], failed[1]), "the newest failed one as the example")
	// Arrivals: gh received 3 in the last hour (the one an hour old is in
	// the day only), from envelope_arrival.
	require.Regexp(t, `<td><a href="/console/envelopes\?source=gh">gh</a></td>(\s*<td class="num">.*</td>){8}\s*<td class="num">3 <small>\(0\.0/s\)</small></td><td class="num">4</td></tr>`, page)
}

// A failed envelope's page has a Resolve form: without its token it is
// refused (403), without a reason it comes back with the message and
// nothing changes, with both the envelope is resolved by the operator,
// the page says so in its Resolutions, offers Un-resolve instead, and the
// Failures page counts it no more; Un-resolve makes it failed again.
func TestResolveFromTheEnvelopePage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := seed(t, b.pool, 2)
	page := fmt.Sprintf("/console/envelopes/%d", ids[0])
	_, body, _ := b.get(t, page)
	require.Contains(t, body, `action="/console/envelopes/`+fmt.Sprint(ids[0])+`/resolve"`)
	require.Contains(t, body, "Never resolved.")
	tok := token(t, body)
	status := func() string {
		var s string
		require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT status FROM envelope WHERE id = $1`, ids[0]).Scan(&s))
		return s
	}

	code, _, _ := b.post(t, page+"/resolve", url.Values{"reason": {"x"}})
	require.Equal(t, http.StatusForbidden, code)
	code, _, h := b.post(t, page+"/resolve", url.Values{"csrf": {tok}, "reason": {"  "}})
	require.Equal(t, http.StatusSeeOther, code)
	_, body, _ = b.get(t, h.Get("Location"))
	require.Contains(t, body, "a reason is required")
	require.Equal(t, "failed", status())

	code, _, h = b.post(t, page+"/resolve", url.Values{"csrf": {tok}, "reason": {"INC-9: refunded by hand"}})
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, page+"#resolutions", h.Get("Location"))
	require.Equal(t, "resolved", status())
	_, body, _ = b.get(t, page)
	require.Contains(t, body, `<span class="badge st-resolved">resolved</span>`)
	require.Contains(t, body, "INC-9: refunded by hand")
	require.Contains(t, body, "console:ops")
	require.Contains(t, body, `action="/console/envelopes/`+fmt.Sprint(ids[0])+`/unresolve"`)
	_, failures, _ := b.get(t, "/console/failures")
	require.Contains(t, failures, fmt.Sprintf(`href="/console/envelopes/%d"`, ids[1]))
	require.NotContains(t, failures, fmt.Sprintf(`href="/console/envelopes/%d"`, ids[0]), "a resolved envelope is no failure")

	code, _, _ = b.post(t, page+"/unresolve", url.Values{"csrf": {tok}, "reason": {"not refunded after all"}})
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, "failed", status())
	require.Equal(t, 2, pgtest.Count(t, b.pool, fmt.Sprintf(`SELECT count(*) FROM envelope_resolution WHERE envelope_id = %d`, ids[0])))
}

// A read-only console offers no Resolve form and refuses one posted.
func TestReadOnlyConsoleRefusesResolve(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *console.Options) { o.ReadOnly, o.ReadOnlyReason = true, "no privilege" })
	ids := seed(t, b.pool, 1)
	page := fmt.Sprintf("/console/envelopes/%d", ids[0])
	_, body, _ := b.get(t, page)
	require.NotContains(t, body, `id="resolve"`)
	code, body, _ := b.post(t, page+"/resolve", url.Values{"reason": {"x"}})
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, body, "resolve is off in this console: no privilege")
	require.Zero(t, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_resolution`))
}

// Resolve by filter: the dry run counts the failed envelopes the filter
// selects; the confirmed form resolves those (a failed one stored after the
// dry run is left out), needs a reason, and another status is refused.
func TestResolveByFilter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := seed(t, b.pool, 3)
	code, body, _ := b.get(t, "/console/resolve?status=failed&cause=unknown_currency&since=24h")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<b id="matched">3</b>`)
	form := hidden(t, body)
	since, err := time.Parse(time.RFC3339Nano, form.Get("since"))
	require.NoError(t, err, "the relative window is pinned to the instant the dry run meant: %q", form.Get("since"))
	require.WithinDuration(t, time.Now().Add(-24*time.Hour), since, time.Minute)
	later := seed(t, b.pool, 1)[0]

	form.Set("reason", "")
	code, body, _ = b.post(t, "/console/resolve", form)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, "a reason is required")

	form.Set("reason", "INC-3: FX table will not get XYZ")
	code, body, _ = b.post(t, "/console/resolve", form)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<b id="changed">3</b> of 3`)
	for _, id := range ids {
		var s string
		require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT status FROM envelope WHERE id = $1`, id).Scan(&s))
		require.Equal(t, "resolved", s)
	}
	var s string
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT status FROM envelope WHERE id = $1`, later).Scan(&s))
	require.Equal(t, "failed", s, "stored after the dry run: not in what it showed")

	code, body, _ = b.get(t, "/console/resolve?status=done&source=stripe")
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, "only failed envelopes are resolved")
	_, body, _ = b.get(t, "/console/envelopes?status=failed&source=stripe")
	require.Contains(t, body, `id="resolve-filter" href="/console/resolve?`)
	_, body, _ = b.get(t, "/console/envelopes?status=failed")
	require.NotContains(t, body, `id="resolve-filter"`, "every failed envelope at once is not offered")
	code, body, _ = b.get(t, "/console/resolve?status=failed")
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, "besides the status")
}

// The list has a tab per status, each the filter with that status and the
// count it selects; the current one is marked.
func TestListStatusTabs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seed(t, b.pool, 3) // 3 failed stripe, 1 done github
	envelopetest.Insert(t, b.pool, envelopetest.Row{Source: "stripe", Status: "done"})
	_, body, _ := b.get(t, "/console/envelopes?source=stripe&status=failed")
	require.Contains(t, body, `<a href="/console/envelopes?source=stripe">all</a>`)
	require.Contains(t, body, `<a href="/console/envelopes?source=stripe&amp;status=failed" class="current" aria-current="page">failed <span class="count">3</span></a>`)
	require.Contains(t, body, `<a href="/console/envelopes?source=stripe&amp;status=done">done <span class="count">1</span></a>`)
	require.Contains(t, body, `<a href="/console/envelopes?source=stripe&amp;status=resolved">resolved <span class="count">0</span></a>`)
	// A body search no index serves: the tabs, without counts.
	_, body, _ = b.get(t, "/console/envelopes?source=stripe&field=data.object.currency%3Dxyz")
	require.Regexp(t, `<a href="/console/envelopes\?field=[^"]*&amp;source=stripe&amp;status=done">done</a>`, body)
}
