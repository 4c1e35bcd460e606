package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"
)

// The admin listener (metrics, River UI) binds loopback unless an address
// is given.
func TestAdminListenerDefaultsToLoopback(t *testing.T) {
	t.Parallel()
	_, stderr, err := admRun(context.Background(), "", "run", "-h")
	require.Error(t, err)
	require.Contains(t, stderr, `(default "127.0.0.1:9090")`)
}

func TestUIPasswordStrength(t *testing.T) {
	t.Parallel()
	for _, weak := range []string{"", " ", "admin", "elevenchars", strings.Repeat(" ", 20), strings.Repeat("x", 20), strings.Repeat("é", 30), "\t\t\t\t\n\n\n\n    "} {
		err := checkUIPassword(weak)
		require.Error(t, err, "%q", weak)
		if weak != "" && strings.TrimSpace(weak) != "" {
			require.NotContains(t, err.Error(), weak, "the error never quotes the password")
		}
	}
	for _, ok := range []string{"twelve chars", "correct horse battery staple", "日本語のパスワードです十二"} {
		require.NoError(t, checkUIPassword(ok), "%q", ok)
	}
}

func TestLoopback(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{"127.0.0.1:9090": true, "[::1]:9090": true, "0.0.0.0:9090": false, "[::]:9090": false, "10.0.0.5:9090": false, "bad": false} {
		require.Equal(t, want, loopback(addr), addr)
	}
}

// River UI credentials come from River's own variable names or the older
// ones; both set differently is refused without quoting either value.
func TestUICredentialNames(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"RIVER_BASIC_AUTH_PASS": "from-river-name"}, "from-river-name"},
		{map[string]string{"RIVERUI_PASSWORD": "from-old-name"}, "from-old-name"},
		{map[string]string{"RIVER_BASIC_AUTH_PASS": "same-value", "RIVERUI_PASSWORD": "same-value"}, "same-value"},
		{map[string]string{}, ""},
	} {
		got, err := uiCredential(env(tc.env), "RIVER_BASIC_AUTH_PASS", "RIVERUI_PASSWORD")
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
	}
	_, err := uiCredential(env(map[string]string{"RIVER_BASIC_AUTH_PASS": "secret-one-xyz", "RIVERUI_PASSWORD": "secret-two-xyz"}), "RIVER_BASIC_AUTH_PASS", "RIVERUI_PASSWORD")
	require.EqualError(t, err, "RIVER_BASIC_AUTH_PASS and RIVERUI_PASSWORD are both set, to different values: set one")
}

func writeUsers(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "users")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

func cheap(t *testing.T) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte("x"), bcrypt.MinCost)
	require.NoError(t, err)
	return string(h)
}

func hashOf(t *testing.T, password string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(password), MinBcryptCost)
	require.NoError(t, err)
	return string(h)
}

// An --admin-users file names each operator; a bad one is refused at start
// with its line, never its hash.
func TestAdminUsersFile(t *testing.T) {
	alice, bob := hashOf(t, "alice password"), hashOf(t, "bob password")
	users, err := readUsers(writeUsers(t, "# operators\n\nalice:"+alice+"\nbob:"+bob+"\n"))
	require.NoError(t, err)
	require.Len(t, users, 2)

	for _, c := range []struct{ content, want string }{
		{"alice", "line 1: want name:bcrypt-hash"},
		{":" + alice, "line 1: want name:bcrypt-hash"},
		{"carol:$apr1$abc$def", "line 1 (carol): not a bcrypt hash"},
		{"carol:$2y$10$tooshort", "line 1 (carol): not a valid bcrypt hash"},
		{"alice:" + alice + "\nalice:" + bob, "line 2: alice is listed twice"},
		{"# nobody\n", "no user in it"},
		{"carol:" + cheap(t), "line 1 (carol): bcrypt cost 4 is too cheap"},
		{"car ol:" + alice, "line 1: a name is at most 192 printable characters without spaces"},
		{strings.Repeat("x", 193) + ":" + alice, "line 1: a name is at most 192"},
	} {
		_, err := readUsers(writeUsers(t, c.content))
		require.ErrorContains(t, err, c.want)
		require.NotContains(t, err.Error(), "$2a$", "no hash in the error")
	}
	_, err = readUsers(filepath.Join(t.TempDir(), "missing"))
	require.ErrorContains(t, err, "--admin-users")
}

// Each listed operator signs in with their own password, the single
// environment user with theirs; a verified bcrypt login is remembered for a
// while (basic auth sends it with every request), a wrong one never is.
func TestCredentialsCheck(t *testing.T) {
	path := writeUsers(t, "alice:"+hashOf(t, "alice password")+"\n")
	c, err := newCredentials("admin", "the admin password", path)
	require.NoError(t, err)
	require.True(t, c.any())
	calls := 0
	compare := c.compareBcrypt
	c.compareBcrypt = func(h, p []byte) error { calls++; return compare(h, p) }
	// As basicAuth signs in: a remembered login, else a check.
	signIn := func(u, p string) bool {
		if c.verifiedRecently(u, p) {
			return true
		}
		ok, err := c.check(context.Background(), u, p)
		require.NoError(t, err)
		return ok
	}

	require.True(t, signIn("admin", "the admin password"))
	require.Zero(t, calls, "the single user needs no bcrypt")
	require.False(t, signIn("admin", "alice password"))
	require.True(t, signIn("alice", "alice password"))
	require.True(t, signIn("alice", "alice password"))
	require.Equal(t, 2, calls, "the second sign-in is remembered (the failed admin try cost one)")
	require.False(t, signIn("alice", "wrong"))
	require.False(t, signIn("mallory", "alice password"), "an unknown user")
	require.Equal(t, 4, calls, "an unknown user costs a bcrypt check too (no timing difference)")
	require.True(t, c.verifiedRecently("admin", "the admin password"), "the single user is remembered too")
	require.False(t, c.verifiedRecently("admin", "wrong"))

	c.verifiedFor = -time.Second // expired at once
	c.verified = map[[32]byte]time.Time{}
	require.True(t, signIn("alice", "alice password"))
	require.True(t, signIn("alice", "alice password"))
	require.Equal(t, 6, calls, "an expired check is done again")

	none, err := newCredentials("admin", "", "")
	require.NoError(t, err)
	require.False(t, none.any())
	ok, err := none.check(context.Background(), "admin", "")
	require.NoError(t, err)
	require.False(t, ok, "no password set: nobody signs in")
}

// While logins are throttled, an operator who signed in recently stays in;
// anyone else, the right password included, waits.
func TestThrottledLoginsKeepVerifiedOperatorsIn(t *testing.T) {
	// Not parallel: no token may come back while the failures are checked,
	// however slow the machine (each is a bcrypt comparison).
	refill := clientRefill
	clientRefill = time.Hour
	t.Cleanup(func() { clientRefill = refill })
	path := writeUsers(t, "alice:"+hashOf(t, "alice password")+"\n")
	creds, err := newCredentials("admin", "", path)
	require.NoError(t, err)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	h := guardUI(creds, ok, slog.New(slog.DiscardHandler))
	get := func(user, pass string) int {
		req := httptest.NewRequest(http.MethodGet, "/console/", nil)
		req.RemoteAddr = "192.0.2.1:1234"
		req.SetBasicAuth(user, pass)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	require.Equal(t, http.StatusNoContent, get("alice", "alice password"), "alice signs in")
	for range failuresPerClient {
		require.Equal(t, http.StatusUnauthorized, get("alice", "guess"))
	}
	require.Equal(t, http.StatusTooManyRequests, get("mallory", "guess"), "throttled")
	require.Equal(t, http.StatusNoContent, get("alice", "alice password"), "alice's verified login still works")
	require.Equal(t, "DENY", func() string {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/riverui/", nil))
		return rec.Header().Get("X-Frame-Options")
	}(), "never framed, even unauthenticated")
}

// guessRig is guardUI over creds with every bcrypt comparison counted, and
// the most that ran at once.
type guessRig struct {
	h                  http.Handler
	calls, now, maxNow atomic.Int64
}

func newGuessRig(t *testing.T, creds *credentials) *guessRig {
	t.Helper()
	g := &guessRig{}
	// Cheap hashes: what is counted is how many comparisons run, not their
	// cost (cost 10 under the race detector would take a minute here).
	for u := range creds.users {
		h, err := bcrypt.GenerateFromPassword([]byte(u+" password"), bcrypt.MinCost)
		require.NoError(t, err)
		creds.users[u] = h
	}
	compare := creds.compareBcrypt
	creds.compareBcrypt = func(h, p []byte) error {
		g.calls.Add(1)
		n := g.now.Add(1)
		for m := g.maxNow.Load(); n > m && !g.maxNow.CompareAndSwap(m, n); m = g.maxNow.Load() {
		}
		defer g.now.Add(-1)
		return compare(h, p)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	g.h = guardUI(creds, ok, slog.New(slog.DiscardHandler))
	return g
}

func (g *guessRig) get(addr, user, pass string) int {
	req := httptest.NewRequest(http.MethodGet, "/console/", nil)
	req.RemoteAddr = addr
	req.SetBasicAuth(user, pass)
	rec := httptest.NewRecorder()
	g.h.ServeHTTP(rec, req)
	return rec.Code
}

// guess sends n wrong guesses at once, guess i from addrs(i), and counts
// the answers by status.
func (g *guessRig) guess(n int, addrs func(int) string) map[int]int {
	codes := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- g.get(addrs(i), "alice", fmt.Sprintf("guess %d", i))
		}()
	}
	wg.Wait()
	close(codes)
	out := map[int]int{}
	for c := range codes {
		out[c]++
	}
	return out
}

// Concurrent guesses cannot outrun the throttle (issue 22): each takes a
// slot before any bcrypt, so 100 at once from one address reach bcrypt at
// most 5 times, and 400 from 250 addresses at most 50 times (plus what
// refills meanwhile, one a second); bcrypt runs one comparison at a time.
func TestConcurrentGuessesAreThrottledBeforeBcrypt(t *testing.T) {
	t.Parallel()
	path := writeUsers(t, "alice:"+hashOf(t, "alice password")+"\n") // cost 10, as the file requires; the rig swaps in cheap ones
	t.Run("one address", func(t *testing.T) {
		t.Parallel()
		creds, err := newCredentials("", "", path)
		require.NoError(t, err)
		g := newGuessRig(t, creds)
		codes := g.guess(100, func(int) string { return "192.0.2.7:1234" })
		require.EqualValues(t, failuresPerClient, g.calls.Load(), "bcrypt calls")
		require.Equal(t, map[int]int{http.StatusUnauthorized: failuresPerClient, http.StatusTooManyRequests: 100 - failuresPerClient}, codes)
		require.EqualValues(t, 1, g.maxNow.Load(), "one bcrypt at a time")
	})
	t.Run("many addresses", func(t *testing.T) {
		t.Parallel()
		creds, err := newCredentials("", "", path)
		require.NoError(t, err)
		g := newGuessRig(t, creds)
		start := time.Now()
		codes := g.guess(400, func(i int) string { return fmt.Sprintf("198.51.100.%d:1234", i%250) })
		refilled := int64(time.Since(start)/allRefill) + 1
		require.GreaterOrEqual(t, g.calls.Load(), int64(failuresAll))
		require.LessOrEqual(t, g.calls.Load(), failuresAll+refilled, "bcrypt calls")
		require.EqualValues(t, g.calls.Load(), codes[http.StatusUnauthorized])
		require.EqualValues(t, 400-g.calls.Load(), codes[http.StatusTooManyRequests])
		require.EqualValues(t, 1, g.maxNow.Load(), "one bcrypt at a time")
	})
}

// The single environment user, signed in, stays signed in while guesses
// from their own address exhaust its budget (before, 5 failures locked them
// out mid-session); anyone else waits.
func TestThrottledLoginsKeepTheSingleUserIn(t *testing.T) {
	t.Parallel()
	creds, err := newCredentials("admin", "the admin password", "")
	require.NoError(t, err)
	g := newGuessRig(t, creds)
	const addr = "192.0.2.9:1234"
	require.Equal(t, http.StatusNoContent, g.get(addr, "admin", "the admin password"))
	for range failuresPerClient {
		require.Equal(t, http.StatusUnauthorized, g.get(addr, "admin", "guess"))
	}
	require.Equal(t, http.StatusTooManyRequests, g.get(addr, "admin", "another guess"))
	require.Equal(t, http.StatusNoContent, g.get(addr, "admin", "the admin password"), "signed in: still in")
	require.Zero(t, g.calls.Load(), "the single user needs no bcrypt")
}

// The single environment user and an --admin-users operator cannot share a
// name: one actor, two passwords (issue 22).
func TestSingleUserNameCannotBeAnOperatorsToo(t *testing.T) {
	t.Parallel()
	path := writeUsers(t, "alice:"+cheapCost10(t)+"\n")
	_, err := newCredentials("alice", "a long single-user password", path)
	require.ErrorContains(t, err, `lists "alice", the name of RIVER_BASIC_AUTH_USER`)
	require.NotContains(t, err.Error(), "a long single-user password")
	_, err = newCredentials("admin", "a long single-user password", path)
	require.NoError(t, err)
}

// cheapCost10 is a bcrypt hash at the least cost the file accepts.
func cheapCost10(t *testing.T) string { return hashOf(t, "alice password") }

// River UI's JSON answers are never cached (issue 22); the guard's headers
// are on every answer, authenticated or not.
func TestRiverUIJSONIsNotCached(t *testing.T) {
	t.Parallel()
	creds, err := newCredentials("admin", "the admin password", "")
	require.NoError(t, err)
	g := newGuessRig(t, creds)
	for _, path := range []string{"/riverui/api/jobs?state=running", "/riverui/api/queues"} {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.SetBasicAuth("admin", "the admin password")
		rec := httptest.NewRecorder()
		g.h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusNoContent, rec.Code)
		require.Equal(t, "no-store", rec.Header().Get("Cache-Control"), path)
	}
	rec := httptest.NewRecorder()
	g.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/riverui/api/jobs", nil))
	require.Equal(t, http.StatusUnauthorized, rec.Code)
	require.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
}

// A guess at the single user's password is compared at once; when the
// client hangs up while the check waits for the bcrypt slot (the name is
// not an operator's), the guess still counts as a failure, or hanging up
// would give free guesses (review of issue 22). With no single user nothing
// was compared, and the check reports the context's end.
func TestAGuessThatHangsUpStillCounts(t *testing.T) {
	t.Parallel()
	path := writeUsers(t, "alice:"+hashOf(t, "alice password")+"\n")
	creds, err := newCredentials("admin", "the admin password", path)
	require.NoError(t, err)
	creds.bcryptSlot <- struct{}{} // another check holds the slot
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ok, err := creds.check(ctx, "admin", "a wrong guess")
	require.NoError(t, err, "compared: a failure, not a cancelled check")
	require.False(t, ok)
	ok, err = creds.check(ctx, "admin", "the admin password")
	require.NoError(t, err)
	require.True(t, ok, "the right single-user password needs no bcrypt")

	usersOnly, err := newCredentials("", "", path)
	require.NoError(t, err)
	usersOnly.bcryptSlot <- struct{}{}
	_, err = usersOnly.check(ctx, "alice", "alice password")
	require.ErrorIs(t, err, context.Canceled, "nothing compared")
}
