package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/pgtest"
)

// River UI can cancel and delete jobs: it is served only when enabled, and
// only behind basic auth.
func TestRiverUIBehindBasicAuth(t *testing.T) {
	t.Parallel()
	env := baseEnv(pgtest.NewURL(t), writeConfig(t))
	migrate(t, env)

	// Enabled without a password: refused at startup.
	p, _ := start(t, "worker", env, "run", "--riverui", "--admin-addr", "127.0.0.1:0")
	<-p.done
	require.Error(t, p.err)
	require.Contains(t, p.out.String(), "RIVERUI_PASSWORD")

	w, lines := start(t, "worker", append(env, "RIVERUI_USER=ops", "RIVERUI_PASSWORD=s3cret-ui-long-enough"), "run", "--riverui", "--admin-addr", "127.0.0.1:0")
	waitLog(t, lines, "worker started", 30*time.Second)
	admin := waitListen(t, lines, "admin listening", 30*time.Second)

	get := func(user, pass string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, admin+"/riverui/", nil)
		require.NoError(t, err)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	code, _ := get("", "")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = get("ops", "wrong")
	require.Equal(t, http.StatusUnauthorized, code)
	code, body := get("ops", "s3cret-ui-long-enough")
	require.Equal(t, http.StatusOK, code)
	require.True(t, strings.Contains(strings.ToLower(body), "<html"), "River UI's page")
	// The metrics stay open to the scraper.
	resp, err := http.Get(admin + "/metrics")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NotContains(t, w.out.String(), "s3cret-ui-long-enough", "the password is never logged")
	require.NoError(t, w.stop(30*time.Second))
}

// River UI refuses weak passwords at startup, refuses every cross-site
// state-changing request (the probe: a text/plain form POST from another
// origin that cancelled and deleted jobs), and throttles failed logins.
func TestRiverUIRefusesCrossSiteAndThrottlesLogins(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewURL(t)
	env := baseEnv(dbURL, writeConfig(t))
	migrate(t, env)

	for _, weak := range []string{"short-pw", strings.Repeat(" ", 16), strings.Repeat("a", 16)} {
		p, _ := start(t, "worker", append(env, "RIVERUI_PASSWORD="+weak), "run", "--riverui", "--admin-addr", "127.0.0.1:0")
		<-p.done
		require.Error(t, p.err, "password %q", weak)
		require.Contains(t, p.out.String(), "RIVERUI_PASSWORD")
	}

	const user, pass = "ops", "correct horse battery"
	// As a member of inbox_worker: River UI works with the worker's privileges.
	workerEnv := append(slices.Clip(env), "DATABASE_URL="+pgtest.RoleURL(t, dbURL, pgtest.RoleWorker), "RIVER_BASIC_AUTH_USER="+user, "RIVER_BASIC_AUTH_PASS="+pass) // River's own riverui names
	w, lines := start(t, "worker", workerEnv, "run", "--riverui", "--admin-addr", "127.0.0.1:0")
	waitLog(t, lines, "worker started", 30*time.Second)
	admin := waitListen(t, lines, "admin listening", 30*time.Second)

	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	newJob := func() int64 {
		var id int64
		require.NoError(t, pool.QueryRow(ctx, `INSERT INTO river_job (kind, args, state, scheduled_at, queue, max_attempts, priority)
			VALUES ('riverui_probe', '{}', 'scheduled', now() + interval '1 day', 'default', 1, 1) RETURNING id`).Scan(&id))
		return id
	}
	state := func(id int64) string {
		var s string
		err := pool.QueryRow(ctx, `SELECT state::text FROM river_job WHERE id = $1`, id).Scan(&s)
		if err != nil {
			return "gone"
		}
		return s
	}
	post := func(path string, id int64, header map[string]string) int {
		req, err := http.NewRequest(http.MethodPost, admin+"/riverui/api/jobs/"+path, strings.NewReader(fmt.Sprintf(`{"ids":["%d"],"x":"="}`, id)))
		require.NoError(t, err)
		req.SetBasicAuth(user, pass) // a browser replays cached credentials
		req.Header.Set("Content-Type", "text/plain")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	cross := []map[string]string{
		{"Origin": "http://evil.example"},
		{"Sec-Fetch-Site": "cross-site"},
		{"Sec-Fetch-Site": "same-site", "Origin": "http://evil." + strings.TrimPrefix(admin, "http://")},
	}
	for _, action := range []string{"cancel", "delete"} {
		id := newJob()
		for _, h := range cross {
			require.Equal(t, http.StatusForbidden, post(action, id, h), "%s with %v", action, h)
			require.Equal(t, "scheduled", state(id), "%s with %v", action, h)
		}
	}
	// The UI itself (same origin) still works.
	id := newJob()
	require.Equal(t, http.StatusOK, post("cancel", id, map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": admin}))
	require.Equal(t, "cancelled", state(id))
	id = newJob()
	require.Equal(t, http.StatusOK, post("delete", id, map[string]string{"Origin": admin}))
	require.Equal(t, "gone", state(id))

	// Failed logins: after a few, guesses wait (429); the operator signed in
	// just before stays in.
	get := func(p string) *http.Response {
		req, err := http.NewRequest(http.MethodGet, admin+"/riverui/", nil)
		require.NoError(t, err)
		req.SetBasicAuth(user, p)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	require.Equal(t, http.StatusOK, get(pass).StatusCode)
	codes := []int{}
	for range 8 {
		codes = append(codes, get("guess").StatusCode)
	}
	require.Contains(t, codes, http.StatusUnauthorized)
	require.Equal(t, http.StatusTooManyRequests, codes[len(codes)-1], "codes %v", codes)
	resp := get("another guess")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	require.Equal(t, http.StatusOK, get(pass).StatusCode, "signed in: stays in while guesses are throttled")
	require.NotContains(t, w.out.String(), pass, "the password is never logged")
	require.NoError(t, w.stop(30*time.Second))
}
