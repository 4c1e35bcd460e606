package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

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

	w, lines := start(t, "worker", append(env, "RIVERUI_USER=ops", "RIVERUI_PASSWORD=s3cret-ui"), "run", "--riverui", "--admin-addr", "127.0.0.1:0")
	waitLine(t, lines, "worker started", 30*time.Second)
	admin := "http://" + waitLine(t, lines, "admin listening on ", 30*time.Second)

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
	code, body := get("ops", "s3cret-ui")
	require.Equal(t, http.StatusOK, code)
	require.True(t, strings.Contains(strings.ToLower(body), "<html"), "River UI's page")
	// The metrics stay open to the scraper.
	resp, err := http.Get(admin + "/metrics")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NotContains(t, w.out.String(), "s3cret-ui", "the password is never logged")
	require.NoError(t, w.stop(30*time.Second))
}
