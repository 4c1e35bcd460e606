package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/provider"
	"github.com/inboxhq/inbox/internal/webhooktest"
)

// consoleShots is where TestConsoleInABrowser saves its screenshots when
// set (make screenshots sets it to docs/console); a temporary directory
// otherwise.
const consoleShots = "CONSOLE_SCREENSHOTS"

// The operator console in headless Chromium, against the real binaries: an
// incident's failed Stripe payments are found by filter, one is opened
// (attempts with their cause, its duplicate, a conflicting resend diffed
// against the stored body, headers redacted), replayed with a reason, then
// the whole filter is replayed, and envelope_replay holds the signed-in
// operator and the reason for each. No page writes to the browser's console
// (no script error, no refused resource, no CSP violation).
func TestConsoleInABrowser(t *testing.T) {
	t.Parallel()
	chrome := pgtest.Tool(t, "chromium", "install Debian's chromium (scripts/ensure-tools does)")
	dbURL := pgtest.NewURL(t)
	const user, pass = "ops", "correct horse battery"
	s := startStackEnv(t, dbURL, []string{
		"RIVERUI_USER=" + user, "RIVERUI_PASSWORD=" + pass,
		"CONSOLE_DATABASE_URL=" + pgtest.RoleURL(t, dbURL, pgtest.RoleAdmin),
	}, "--console", "--riverui")

	// An incident: four payments in a currency the ledger does not know
	// fail permanently (unknown_currency); six post. One good payment is
	// delivered twice (a duplicate) and one failed one is resent with
	// another body (a conflict).
	secret := e2eSecrets["E2E_STRIPE_SECRET"]
	stripe := func(evt string, amount int64, currency string) webhooktest.Delivery {
		return webhooktest.Delivery{Provider: provider.Stripe, Secret: secret, DeliveryID: evt,
			Body: webhooktest.StripePayment(evt, "pi_"+evt, amount, currency)}
	}
	var sends []webhooktest.Delivery
	for i := range 6 {
		sends = append(sends, stripe(fmt.Sprintf("evt_ok_%d", i), int64(1000+i), "usd"))
	}
	for i := range 4 {
		sends = append(sends, stripe(fmt.Sprintf("evt_bad_%d", i), int64(2000+i), "xyz"))
	}
	sends = append(sends, stripe("evt_ok_0", 1000, "usd"))  // duplicate
	sends = append(sends, stripe("evt_bad_0", 2999, "xyz")) // conflict: another amount
	sends = append(sends, webhooktest.Delivery{Provider: provider.GitHub, Secret: e2eSecrets["E2E_GITHUB_SECRET"],
		DeliveryID: "gh-console-1", EventType: "push", Body: webhooktest.GitHubPush("refs/heads/main")})
	for i, d := range sends {
		source := "stripe"
		if d.Provider == provider.GitHub {
			source = "github"
		}
		code, err := s.send(d, source)
		require.NoError(t, err)
		require.Contains(t, []int{http.StatusAccepted, http.StatusOK}, code, "delivery %d", i)
	}
	eventually(t, 60*time.Second, "11 envelopes final", func(ctx context.Context) (bool, string) {
		n := s.scalar(t, `SELECT count(*) FROM envelope WHERE status <> 'pending'`)
		return n == 11, fmt.Sprintf("%d final", n)
	})
	require.EqualValues(t, 4, s.scalar(t, `SELECT count(*) FROM envelope WHERE status = 'failed' AND last_cause = 'unknown_currency'`))
	conflicted := s.scalar(t, `SELECT id FROM envelope WHERE delivery_id = 'evt_bad_0'`)
	require.EqualValues(t, 1, s.scalar(t, `SELECT count(*) FROM envelope_conflict WHERE envelope_id = $1`, conflicted))

	// What the console refuses without a browser: no credentials, a
	// cross-site POST, a POST without its form token.
	base := s.workerAdmin + "/console"
	resp, err := http.Get(base + "/envelopes")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	post := func(header http.Header, form url.Values) int {
		req, err := http.NewRequest(http.MethodPost, base+"/replay", strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header = header
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.SetBasicAuth(user, pass)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	form := url.Values{"id": {fmt.Sprint(conflicted)}, "reason": {"forged"}}
	require.Equal(t, http.StatusForbidden, post(http.Header{"Sec-Fetch-Site": {"cross-site"}, "Origin": {"https://evil.example"}}, form))
	require.Equal(t, http.StatusForbidden, post(http.Header{}, form), "no form token")
	form.Set("csrf", "not-the-token")
	require.Equal(t, http.StatusForbidden, post(http.Header{}, form), "a wrong form token")
	require.Zero(t, s.scalar(t, `SELECT count(*) FROM envelope_replay`), "nothing was replayed")
	// Neither River UI nor the console may be framed by another page.
	for _, path := range []string{"/riverui/", "/console/envelopes"} {
		req, err := http.NewRequest(http.MethodGet, s.workerAdmin+path, nil)
		require.NoError(t, err)
		req.SetBasicAuth(user, pass)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"), path)
		require.Contains(t, resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'", path)
	}

	// The browser.
	shots := os.Getenv(consoleShots)
	if shots == "" {
		shots = t.TempDir()
	}
	require.NoError(t, os.MkdirAll(shots, 0o755))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1360, 900),
		chromedp.UserDataDir(t.TempDir()))...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	require.NoError(t, chromedp.Do(bctx))
	var mu sync.Mutex
	var consoleMessages []string
	messages := chromedp.Console(bctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			mu.Lock()
			consoleMessages = append(consoleMessages, m.String()+" ("+m.URL+")")
			mu.Unlock()
		}
	}()
	_, err = chromedp.Call(bctx, network.Enable, network.EnableParams{})
	require.NoError(t, err)
	_, err = chromedp.Call(bctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{
		"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass)),
	}})
	require.NoError(t, err)
	// do runs steps, each bounded; on a failure the test log gets the
	// page's address and text.
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, scancel := context.WithTimeout(bctx, 30*time.Second)
		defer scancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			dctx, dcancel := context.WithTimeout(bctx, 5*time.Second)
			defer dcancel()
			where, _ := chromedp.Run(dctx, chromedp.Location())
			page, _ := chromedp.Run(dctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
			t.Fatalf("%s: %v\nat %s:\n%s", what, err, where, page)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
		require.NoError(t, err, sel)
		return s
	}
	count := func(sel string) int {
		t.Helper()
		n, err := chromedp.Run(bctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, sel)))
		require.NoError(t, err, sel)
		return n
	}
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		require.NoError(t, err)
		require.True(t, bytes.HasPrefix(png, []byte("\x89PNG")), "a PNG")
		require.NoError(t, os.WriteFile(filepath.Join(shots, name), png, 0o644))
	}
	location := func() string {
		t.Helper()
		u, err := chromedp.Run(bctx, chromedp.Location())
		require.NoError(t, err)
		return u
	}
	// waitText reloads nothing: the run page refreshes itself until done.
	waitText := func(sel, want string) {
		t.Helper()
		pgtest.EventuallyEvery(t, 60*time.Second, 200*time.Millisecond, sel+" showing "+want, func() (bool, string) {
			tctx, tcancel := context.WithTimeout(bctx, 3*time.Second)
			defer tcancel()
			got, err := chromedp.Run(tctx, chromedp.Text(chromedp.CSS(sel)))
			return err == nil && strings.Contains(got, want), fmt.Sprintf("%q, %v", got, err)
		})
	}

	// The list: every envelope, newest first.
	do("open the list", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#envelopes")))
	require.Equal(t, 11, count("#envelopes tbody tr"))
	require.Contains(t, text("header.top"), "signed in as "+user)
	// Status tabs with counts, the conflict marker, placeholders that are
	// not values.
	require.Contains(t, text("#status-tabs"), "failed 4")
	require.Contains(t, text("#status-tabs"), "done 7")
	require.Equal(t, 1, count("#envelopes .conflict-mark"), "the conflicted envelope, marked in the list")
	placeholder, err := chromedp.Run(bctx, chromedp.Evaluate[string](`(() => { const i = document.querySelector("input[name=source]"); return i.value + "|" + i.placeholder })()`))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(placeholder, "|any (e.g."), "an empty field with an example, not a value: %q", placeholder)
	shot("envelopes.png")

	// Auto-refresh: off by default, on with the link (a meta refresh, no
	// script), off again with stop.
	require.Zero(t, count(`meta[http-equiv="refresh"]`))
	do("auto-refresh", chromedp.Click(chromedp.CSS("#refresh a")), chromedp.WaitVisible(chromedp.CSS(`#refresh`)))
	require.Contains(t, text("#refresh"), "refreshing every")
	require.Equal(t, 1, count(`meta[http-equiv="refresh"]`))
	do("stop refreshing", chromedp.Click(chromedp.CSS("#refresh a")), chromedp.WaitVisible(chromedp.CSS(`#envelopes`)))
	require.Zero(t, count(`meta[http-equiv="refresh"]`))

	// The search box jumps to an envelope by its delivery id.
	delivery := pgtest.Scalar[string](t, s.pool, `SELECT delivery_id FROM envelope WHERE id = $1`, conflicted)
	do("search", chromedp.SendKeys(chromedp.CSS("#q"), delivery), chromedp.Submit(chromedp.CSS("#q")), chromedp.WaitVisible(chromedp.CSS("#attempts")))
	require.True(t, strings.HasSuffix(location(), fmt.Sprintf("/console/envelopes/%d", conflicted)), location())
	do("back to the list", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#envelopes")))

	// Filter: failed Stripe envelopes with cause unknown_currency.
	do("filter",
		chromedp.SetValue(chromedp.CSS(`select[name=status]`), "failed"),
		chromedp.SetValue(chromedp.CSS(`select[name=cause]`), "unknown_currency"),
		chromedp.SendKeys(chromedp.CSS(`input[name=source]`), "stripe"),
		chromedp.Click(chromedp.CSS("#search")),
		chromedp.WaitVisible(chromedp.CSS("#replay-filter")))
	require.Contains(t, location(), "cause=unknown_currency")
	require.Equal(t, 4, count("#envelopes tbody tr"))
	require.Contains(t, text("#envelopes"), `unknown currency`)

	// The conflicted envelope's page.
	do("open an envelope",
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`#envelopes a[href="/console/envelopes/%d"]`, conflicted))),
		chromedp.WaitVisible(chromedp.CSS("#attempts")))
	require.Contains(t, text("#attempts"), "unknown_currency")
	require.Contains(t, text("#headers"), "[redacted]", "the signature header, redacted")
	require.NotContains(t, text("#headers"), "v1=", "no signature value")
	require.Contains(t, text("#conflicts"), "conflict")
	require.Positive(t, count("#conflicts pre.diff .ddel"), "the stored body's side of the diff")
	require.Positive(t, count("#conflicts pre.diff .dadd"), "the resent body's side")
	require.Contains(t, text("#conflicts pre.diff"), "2999", "the resent amount")
	require.Contains(t, text("#body"), `"currency": "xyz"`, "the body, pretty")
	require.Equal(t, 1, count(`#jobs a[href^="/riverui/jobs/"]`), "its job, linked to River UI")
	require.Equal(t, 1, count("#cancelled-note"), "a failed envelope's page explains its cancelled job")
	bodyFirst, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`(document.querySelector("#body").compareDocumentPosition(document.querySelector("#attempts")) & Node.DOCUMENT_POSITION_FOLLOWING) !== 0`))
	require.NoError(t, err)
	require.True(t, bodyFirst, "the body comes before the attempts")
	shot("envelope.png")

	// Replay it alone: the dry run first, then the reason.
	const reason1 = "INC-42: xyz added to the currency table"
	do("preview", chromedp.Click(chromedp.CSS("#replay-one")), chromedp.WaitVisible(chromedp.CSS("#preview")))
	require.Equal(t, "1", text("#would-replay"))
	require.Zero(t, s.scalar(t, `SELECT count(*) FROM envelope_replay`), "a dry run changes nothing")
	do("replay", chromedp.SendKeys(chromedp.CSS("#reason"), reason1), chromedp.Click(chromedp.CSS("#confirm")),
		chromedp.WaitVisible(chromedp.CSS("#state")))
	require.Contains(t, location(), "/console/replays/")
	waitText("#state", "Done.")
	require.Equal(t, "1", text("#replayed"))
	require.EqualValues(t, 1, s.scalar(t, `SELECT count(*) FROM envelope_replay WHERE envelope_id = $1 AND actor = $2 AND reason = $3`,
		conflicted, "console:"+user, reason1), "the audit row: who and why")

	// The envelope page shows the replay.
	do("back to the envelope", chromedp.Navigate(fmt.Sprintf("%s/envelopes/%d", base, conflicted)), chromedp.WaitVisible(chromedp.CSS("#replays")))
	require.Contains(t, text("#replays"), reason1)
	require.Contains(t, text("#replays"), "console:"+user)

	// Replay the whole filter, once the first replay was processed again
	// and its job ended: a failed envelope's job is cancelled by River's
	// completer after the worker's transaction commits, and while it is
	// still running the dry run counts the envelope as already queued.
	eventually(t, 60*time.Second, "the replayed envelope final again, its job ended", func(ctx context.Context) (bool, string) {
		n := s.scalar(t, `SELECT count(*) FROM envelope WHERE status = 'pending'`)
		live := s.scalar(t, `SELECT count(*) FROM river_job WHERE kind = $1 AND state::text = ANY($2)`,
			envelope.ProcessArgs{}.Kind(), envelope.LiveJobStates())
		return n == 0 && live == 0, fmt.Sprintf("%d pending, %d live jobs", n, live)
	})
	const reason2 = "INC-42: replay every unknown_currency failure"
	do("the filtered list", chromedp.Navigate(base+"/envelopes?source=stripe&status=failed&cause=unknown_currency"),
		chromedp.WaitVisible(chromedp.CSS("#replay-filter")), chromedp.Click(chromedp.CSS("#replay-filter")),
		chromedp.WaitVisible(chromedp.CSS("#preview")))
	require.Equal(t, "4", text("#would-replay"))
	require.Contains(t, text("#selection"), "unknown_currency", "the dry run says which selection it replays")
	do("a reason", chromedp.SendKeys(chromedp.CSS("#reason"), reason2))
	shot("replay.png")
	do("replay the filter", chromedp.Click(chromedp.CSS("#confirm")),
		chromedp.WaitVisible(chromedp.CSS("#state")))
	require.Contains(t, text("#selection"), "unknown_currency", "so does the run's page")
	waitText("#state", "Done.")
	require.Equal(t, "4", text("#replayed"))
	require.EqualValues(t, 4, s.scalar(t, `SELECT count(*) FROM envelope_replay WHERE actor = $1 AND reason = $2`, "console:"+user, reason2))
	require.EqualValues(t, 1, s.scalar(t, `SELECT count(DISTINCT batch_id) FROM envelope_replay WHERE reason = $1`, reason2), "one run")

	// The replays page lists both runs from envelope_replay.
	do("replays", chromedp.Navigate(base+"/replays"), chromedp.WaitVisible(chromedp.CSS("#recorded")))
	require.Contains(t, text("#recorded"), reason1)
	require.Contains(t, text("#recorded"), reason2)
	require.Contains(t, text("#runs"), "unknown_currency", "and the Replays list")

	// Failures by cause: the four, with their attempts in the window.
	do("failures", chromedp.Navigate(base+"/failures"), chromedp.WaitVisible(chromedp.CSS("#causes")))
	eventually(t, 60*time.Second, "the replayed envelopes failed again", func(ctx context.Context) (bool, string) {
		n := s.scalar(t, `SELECT count(*) FROM envelope WHERE status = 'failed'`)
		return n == 4, fmt.Sprintf("%d failed", n)
	})
	do("failures again", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#causes")))
	row := text("#causes tbody tr")
	require.Contains(t, row, "unknown_currency")
	require.Contains(t, row, "4")
	require.Positive(t, count("#causes svg rect[height]:not([height='0'])"), "a bar for the failed attempts")
	shot("failures.png")

	// No replay fixes an unknown currency: the operator resolves the
	// conflicted one from its page, then the other three from Failures.
	const reason3 = "INC-42: xyz payments refunded by hand"
	do("resolve one", chromedp.Navigate(fmt.Sprintf("%s/envelopes/%d", base, conflicted)), chromedp.WaitVisible(chromedp.CSS("#resolve")),
		chromedp.SendKeys(chromedp.CSS(`#resolve input[name=reason]`), reason3), chromedp.Click(chromedp.CSS("#resolve-submit")),
		chromedp.WaitVisible(chromedp.CSS("#resolutions table")))
	require.Contains(t, text("h1"), "resolved")
	require.Contains(t, text("#resolutions"), reason3)
	require.Contains(t, text("#resolutions"), "console:"+user)
	require.EqualValues(t, 1, s.scalar(t, `SELECT count(*) FROM envelope_resolution WHERE envelope_id = $1 AND action = 'resolve' AND actor = $2`, conflicted, "console:"+user))
	shot("resolved.png")
	do("resolve the rest", chromedp.Navigate(base+"/failures"), chromedp.WaitVisible(chromedp.CSS("#causes")),
		chromedp.Click(chromedp.CSS(`#causes a[href^="/console/resolve?"]`)), chromedp.WaitVisible(chromedp.CSS("#preview")))
	require.Equal(t, "3", text("#matched"))
	do("confirm", chromedp.SendKeys(chromedp.CSS("#reason"), reason3), chromedp.Click(chromedp.CSS("#confirm-resolve")),
		chromedp.WaitVisible(chromedp.CSS("#resolved")))
	require.Equal(t, "3", text("#changed"))
	require.Zero(t, s.scalar(t, `SELECT count(*) FROM envelope WHERE status = 'failed'`))
	require.EqualValues(t, 4, s.scalar(t, `SELECT count(*) FROM envelope WHERE status = 'resolved'`))
	do("resolved in the list", chromedp.Navigate(base+"/envelopes?status=resolved"), chromedp.WaitVisible(chromedp.CSS("#envelopes")))
	require.Equal(t, 4, count("#envelopes tbody .badge.st-resolved"), "marked resolved in the list")
	require.Contains(t, text("#envelopes"), reason3, "with the operator's reason")
	done := s.scalar(t, `SELECT min(id) FROM envelope WHERE status = 'done'`)
	do("a done envelope", chromedp.Navigate(fmt.Sprintf("%s/envelopes/%d", base, done)), chromedp.WaitVisible(chromedp.CSS("#attempts")))
	require.Zero(t, count("#cancelled-note"), "no cancelled-job note where no job was cancelled")

	// The overview: every envelope arrived in the last hour, the four
	// resolved ones counted as such, none failed.
	do("overview", chromedp.Navigate(base+"/overview"), chromedp.WaitVisible(chromedp.CSS("#sources")))
	received := s.scalar(t, `SELECT count(*) FROM envelope`)
	require.Equal(t, fmt.Sprintf("%d (0.0/s)", received), text("#received-last-hour"))
	require.Equal(t, "4", text("#totals td:nth-of-type(5)"), "the totals' resolved cell")
	require.Contains(t, text("#failures"), "None failed.")
	shot("overview.png")

	// River UI's job id leads back to the envelope.
	job := s.scalar(t, `SELECT max(id) FROM river_job WHERE kind = 'process_envelope' AND (args->>'envelope_id')::bigint = $1`, conflicted)
	do("from River UI's job id", chromedp.Navigate(fmt.Sprintf("%s/jobs/%d", base, job)), chromedp.WaitVisible(chromedp.CSS("#attempts")))
	require.Contains(t, location(), fmt.Sprintf("/console/envelopes/%d", conflicted))

	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, consoleMessages, "the pages wrote to the browser's console")
	require.NotContains(t, s.worker.out.String(), pass, "the password is never logged")
}

// With an --admin-users file, each operator signs in as themselves and
// their replays record them.
func TestConsoleOperatorsFromUsersFile(t *testing.T) {
	t.Parallel()
	hash, err := bcrypt.GenerateFromPassword([]byte("alice's own password"), bcrypt.DefaultCost)
	require.NoError(t, err)
	users := filepath.Join(t.TempDir(), "operators")
	require.NoError(t, os.WriteFile(users, []byte("# on-call\nalice:"+string(hash)+"\n"), 0o600))
	dbURL := pgtest.NewURL(t)
	s := startStackEnv(t, dbURL, []string{
		"WORKER_ADMIN_USERS=" + users, "WORKER_CONSOLE=true",
		"CONSOLE_DATABASE_URL=" + pgtest.RoleURL(t, dbURL, pgtest.RoleAdmin),
	})
	code, err := s.send(webhooktest.Delivery{Provider: provider.Stripe, Secret: e2eSecrets["E2E_STRIPE_SECRET"], DeliveryID: "evt_users_1",
		Body: webhooktest.StripePayment("evt_users_1", "pi_users_1", 100, "xyz")}, "stripe")
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, code)
	// Failed, and its job finalized (until then a replay would skip it as
	// already queued).
	eventually(t, 60*time.Second, "the envelope failed and its job ended", func(ctx context.Context) (bool, string) {
		n := s.scalar(t, `SELECT count(*) FROM envelope WHERE status = 'failed'`)
		live := s.scalar(t, `SELECT count(*) FROM river_job WHERE kind = 'process_envelope' AND finalized_at IS NULL`)
		return n == 1 && live == 0, fmt.Sprintf("%d failed, %d live jobs", n, live)
	})
	id := s.scalar(t, `SELECT id FROM envelope`)

	do := func(method, path, pass string, form url.Values) (int, string) {
		req, err := http.NewRequest(method, s.workerAdmin+path, strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.SetBasicAuth("alice", pass)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var b bytes.Buffer
		_, err = b.ReadFrom(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, b.String()
	}
	code, _ = do(http.MethodGet, "/console/envelopes", "not alice's", nil)
	require.Equal(t, http.StatusUnauthorized, code)
	code, page := do(http.MethodGet, fmt.Sprintf("/console/replay?id=%d", id), "alice's own password", nil)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, "signed in as <b>alice</b>")
	form := url.Values{}
	for _, m := range regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`).FindAllStringSubmatch(page, -1) {
		form.Add(m[1], html.UnescapeString(m[2]))
	}
	form.Set("reason", "alice's fix")
	code, body := do(http.MethodPost, "/console/replay", "alice's own password", form)
	require.Equal(t, http.StatusSeeOther, code, "%s\n%s", body, form)
	eventually(t, 30*time.Second, "alice's replay recorded", func(ctx context.Context) (bool, string) {
		n := s.scalar(t, `SELECT count(*) FROM envelope_replay WHERE actor = 'console:alice' AND reason = $1`, "alice's fix")
		return n == 1, fmt.Sprintf("%d rows", n)
	})
	require.NotContains(t, s.worker.out.String(), "alice's own password")
	require.NotContains(t, s.worker.out.String(), string(hash), "the hash is never logged")
}
