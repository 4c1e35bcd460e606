package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/cli"
	"github.com/inboxhq/inbox/internal/ingest"
	"github.com/inboxhq/inbox/internal/pg"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/testlog"
	"github.com/inboxhq/inbox/internal/webhooktest"
)

// started is a running ingest: its output so far, and stop.
type started struct {
	stdout, stderr *testlog.Buffer
	stop           func() error
}

// start runs ingest's run with env (plus a sources file) until it prints its
// listeners, and returns it; the test stops it at the end.
func start(t *testing.T, env map[string]string, args ...string) *started {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sources.yaml")
	yaml := "sources:\n  github:\n    provider: github\n    secrets: [\"${GH_SECRET}\"]\n"
	require.NoError(t, os.WriteFile(cfg, []byte(yaml), 0o600))
	full := map[string]string{"INBOX_CONFIG": cfg, "GH_SECRET": "gh-main-test-secret-long-enough", "INGEST_ADDR": "127.0.0.1:0", "INGEST_ADMIN_ADDR": "127.0.0.1:0"}
	for k, v := range env {
		full[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &started{stdout: &testlog.Buffer{}, stderr: &testlog.Buffer{}}
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, func(k string) string { return full[k] }, s.stdout, s.stderr) }()
	var once sync.Once
	var runErr error
	s.stop = func() error {
		once.Do(func() { cancel(); runErr = <-done })
		return runErr
	}
	t.Cleanup(func() { _ = s.stop() })
	pgtest.Eventually(t, 20*time.Second, "ingest to start", func() (bool, string) {
		log := s.stderr.String()
		if strings.Contains(log, `"msg":"ingest listening"`) && (full["INGEST_ADMIN_ADDR"] == "" || strings.Contains(log, `"msg":"admin listening"`)) {
			return true, ""
		}
		select {
		case err := <-done:
			done <- err
			t.Fatalf("ingest exited: %v\n%s", err, s.stderr.String())
		default:
		}
		return false, "ingest did not start:\n" + log
	})
	return s
}

// keywordDSN returns the test database as a keyword/value string carrying
// password (the test server trusts local connections, so any password
// works, and must never be logged).
func keywordDSN(t *testing.T, password string) string {
	t.Helper()
	u, err := url.Parse(pgtest.NewURL(t))
	require.NoError(t, err)
	return fmt.Sprintf("host=%s port=%s user=%s dbname=%s sslmode=disable password='%s'",
		u.Hostname(), u.Port(), u.User.Username(), strings.TrimPrefix(u.Path, "/"), password)
}

// The database password never reaches the logs, whichever form
// DATABASE_URL takes.
func TestStartupLogsNoDatabasePassword(t *testing.T) {
	t.Parallel()
	base := pgtest.NewURL(t)
	u, err := url.Parse(base)
	require.NoError(t, err)
	const secret = "Never Log Me 42"
	withQuery := *u
	q := withQuery.Query()
	q.Set("password", secret)
	withQuery.RawQuery = q.Encode()
	withUser := *u
	withUser.User = url.UserPassword(u.User.Username(), secret)
	for name, dsn := range map[string]string{
		"keyword/value": keywordDSN(t, secret),
		"URL ?password": withQuery.String(),
		"URL userinfo":  withUser.String(),
	} {
		t.Run(name, func(t *testing.T) {
			s := start(t, map[string]string{"DATABASE_URL": dsn})
			require.NoError(t, s.stop())
			logs := s.stderr.String()
			require.Contains(t, logs, `"database":`)
			for _, part := range []string{secret, url.QueryEscape(secret), url.PathEscape(secret)} {
				require.NotContains(t, logs, part)
				require.NotContains(t, s.stdout.String(), part)
			}
		})
	}
}

// The admin listener (metrics, unauthenticated) binds loopback unless an
// address is given; the public one serves every interface.
func TestListenerDefaults(t *testing.T) {
	t.Parallel()
	var out testlog.Buffer
	err := run(context.Background(), []string{"-h"}, func(string) string { return "" }, &out, &out)
	require.Error(t, err)
	require.Contains(t, out.String(), `-admin-addr string`)
	require.Contains(t, out.String(), `(default "127.0.0.1:9091")`)
	require.Contains(t, out.String(), `(default ":8080")`)
}

// A database that answers without the inbox's tables (the wrong
// DATABASE_URL, or never migrated): ingest refuses to start and says what to
// do, rather than answer every delivery 500.
func TestRefusesADatabaseWithoutTheSchema(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sources.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("sources:\n  github:\n    provider: github\n    secrets: [\"gh-main-test-secret-long-enough\"]\n"), 0o600))
	env := map[string]string{"INBOX_CONFIG": cfg, "INGEST_ADDR": "127.0.0.1:0", "INGEST_ADMIN_ADDR": "", "DATABASE_URL": pgtest.EmptyURL(t)}
	var stdout, stderr testlog.Buffer
	err := run(context.Background(), nil, func(k string) string { return env[k] }, &stdout, &stderr)
	require.ErrorIs(t, err, pg.ErrNoSchema)
	require.ErrorContains(t, err, "worker migrate")
	require.NotContains(t, stderr.String(), "ingest listening", "it never listened")
}

// listenAddr returns the address a started ingest logged for msg.
func (s *started) listenAddr(t *testing.T, msg string) string {
	t.Helper()
	for _, line := range strings.Split(s.stderr.String(), "\n") {
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == msg {
			return rec.Addr
		}
	}
	t.Fatalf("no %q line in:\n%s", msg, s.stderr.String())
	return ""
}

// Idle connections that fill --max-conns cannot shut ingest to a provider
// (issue 22): with every slot held by a client that sent one request and
// then idles, or that opened a connection and sent nothing, a signed
// delivery on a new connection is stored and answered in under a second,
// and the eviction is counted. From seven eighths of the cap (14 of 16)
// ingest's answers close their connection, so keep-alive ones fill 13
// slots and silent ones the rest.
func TestIdleConnectionsAtTheCapDoNotShutIngest(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"DATABASE_URL": pgtest.NewURL(t)}, "--max-conns", "16")
	addr := s.listenAddr(t, "ingest listening")
	for i := range 16 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		if i >= 13 {
			continue // silent
		}
		_, err = fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.False(t, resp.Close, "connection %d kept alive", i)
	}
	// Idle past the grace a connection has after opening or after its
	// answer (250 ms): within it, a new sender would be answered 503 at once.
	time.Sleep(300 * time.Millisecond)
	d := webhooktest.Delivery{Provider: "github", Secret: "gh-main-test-secret-long-enough", DeliveryID: "held-open-1",
		EventType: "push", Body: webhooktest.GitHubPush("refs/heads/main")}
	req, err := d.Request(context.Background(), "http://"+addr+"/webhooks/github")
	require.NoError(t, err)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	began := time.Now()
	resp, err := client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	require.Less(t, time.Since(began), time.Second)

	mresp, err := http.Get("http://" + s.listenAddr(t, "admin listening") + "/metrics")
	require.NoError(t, err)
	defer mresp.Body.Close()
	body, err := io.ReadAll(mresp.Body)
	require.NoError(t, err)
	require.Regexp(t, `(?m)^inbox_ingest_connections_evicted_total [1-9]`, string(body))
	// The store queue's limits are exported at their defaults (issue 25:
	// how the limit is chosen, as a metric).
	require.Regexp(t, `(?m)^inbox_ingest_shed_after_seconds 0\.25$`, string(body))
	require.Regexp(t, `(?m)^inbox_ingest_shed_after_overload_seconds 0\.07$`, string(body))
	require.Regexp(t, `(?m)^inbox_ingest_shed_limit_seconds 0\.25$`, string(body), "nothing refused for the queue: the limit is --shed-after")
	require.Regexp(t, `(?m)^inbox_ingest_overload_holds_total 0$`, string(body), "nothing refused: no hold")
	require.Regexp(t, `(?m)^inbox_ingest_pressure_surges_total 0$`, string(body), "nothing offered: no surge")
	require.Regexp(t, `(?m)^inbox_ingest_pressure_target_seconds 0\.035$`, string(body))
	require.Regexp(t, `(?m)^inbox_ingest_store_pressure 0$`, string(body))
}

// Every rule between ingest's flags is a usage error (exit status 2)
// before anything is opened (the sources file here does not exist, so a
// rule checked after loading it would say so instead): a --shed-after at or
// past the deadline could never refuse; the connection and body caps; the
// store's batching and pool.
func TestIngestFlagRules(t *testing.T) {
	t.Parallel()
	env := map[string]string{"INBOX_CONFIG": "/nonexistent.yaml"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--store-timeout", "3s", "--shed-after", "3s"}, "--shed-after below it"},
		{[]string{"--store-timeout", "0s"}, "--store-timeout must be positive"},
		{[]string{"--max-conns", "0"}, "--max-conns must be at least 1"},
		{[]string{"--max-inflight-body-bytes", "1024"}, "--max-inflight-body-bytes at least 16384"},
		{[]string{"--store-concurrency", "4", "--db-max-conns", "5"}, "--db-max-conns at least --store-concurrency + 2"},
		{[]string{"--shed-after", "20ms"}, "--pressure-target below --shed-after"},
		{[]string{"--shed-after", "20ms", "--pressure-target", "0"}, "--pressure-target below --shed-after"},
		{[]string{"--shed-after-overload", "300ms"}, "--shed-after-overload must be at most --shed-after"},
		{[]string{"--shed-after-overload", "1ms"}, "above --pressure-target"},
		{[]string{"--pressure-surge", "1"}, "--pressure-surge must be a finite number over 1"},
	} {
		var out bytes.Buffer
		err := run(context.Background(), tc.args, func(k string) string { return env[k] }, &out, &out)
		require.ErrorContains(t, err, tc.want, tc.args)
		require.ErrorAs(t, err, new(cli.UsageError), "%v: exit status 2", tc.args)
	}
	// A negative --shed-after turns refusals off and passes the rules: the
	// run then fails on the missing sources file.
	var out bytes.Buffer
	err := run(context.Background(), []string{"--shed-after", "-1s"}, func(k string) string { return env[k] }, &out, &out)
	require.ErrorContains(t, err, "nonexistent.yaml")
}

// limits.check on its own: the defaults pass, and each rule's boundary is
// where the flags' help puts it.
func TestLimitsCheckBoundaries(t *testing.T) {
	t.Parallel()
	ok := limits{storeTimeout: 3 * time.Second, shedAfter: 250 * time.Millisecond, shedAfterOverload: ingest.DefaultShedAfterOverload, maxConnsOpen: defaultMaxConns,
		pressureTarget: ingest.DefaultPressureTarget, pressureInterval: ingest.DefaultPressureInterval, pressureSurge: ingest.DefaultPressureSurge,
		maxBodies: ingest.DefaultMaxInflightBodyBytes, storeBatch: 64, storeConcurrency: 2, dbMaxConns: 20}
	require.NoError(t, ok.check(), "the defaults")
	for name, c := range map[string]struct {
		edit func(*limits)
		pass bool
	}{
		"shed-after negative: never":      {func(l *limits) { l.shedAfter = -time.Second }, true},
		"shed-after just under deadline":  {func(l *limits) { l.shedAfter = l.storeTimeout - time.Millisecond }, true},
		"shed-after at the deadline":      {func(l *limits) { l.shedAfter = l.storeTimeout }, false},
		"surge just over 1":               {func(l *limits) { l.pressureSurge = 1.01 }, true},
		"surge at 1":                      {func(l *limits) { l.pressureSurge = 1 }, false},
		"surge negative: never":           {func(l *limits) { l.pressureSurge = -1 }, true},
		"surge NaN":                       {func(l *limits) { l.pressureSurge = math.NaN() }, false},
		"surge infinite":                  {func(l *limits) { l.pressureSurge = math.Inf(1) }, false},
		"overload at shed-after":          {func(l *limits) { l.shedAfterOverload = l.shedAfter }, true},
		"overload past shed-after":        {func(l *limits) { l.shedAfterOverload = l.shedAfter + time.Millisecond }, false},
		"overload with shed-after never":  {func(l *limits) { l.shedAfterOverload, l.shedAfter = time.Second, -1 }, true},
		"overload just over the target":   {func(l *limits) { l.shedAfterOverload = l.pressureTarget + time.Millisecond }, true},
		"overload at the target":          {func(l *limits) { l.shedAfterOverload = l.pressureTarget }, false},
		"overload negative: never":        {func(l *limits) { l.shedAfterOverload = -1 }, true},
		"one connection":                  {func(l *limits) { l.maxConnsOpen = 1 }, true},
		"no connection":                   {func(l *limits) { l.maxConnsOpen = 0 }, false},
		"body budget of one free body":    {func(l *limits) { l.maxBodies = ingest.FreeBodyBytes }, true},
		"body budget under one free body": {func(l *limits) { l.maxBodies = ingest.FreeBodyBytes - 1 }, false},
		"pool of concurrency + 2":         {func(l *limits) { l.dbMaxConns = l.storeConcurrency + 2 }, true},
		"pool of concurrency + 1":         {func(l *limits) { l.dbMaxConns = l.storeConcurrency + 1 }, false},
		"batch of one":                    {func(l *limits) { l.storeBatch = 1 }, true},
		"batch of zero":                   {func(l *limits) { l.storeBatch = 0 }, false},
		"pressure just under shed-after":  {func(l *limits) { l.pressureTarget, l.shedAfterOverload = l.shedAfter-time.Millisecond, l.shedAfter }, true},
		"pressure at shed-after":          {func(l *limits) { l.pressureTarget = l.shedAfter }, false},
		"pressure negative: never":        {func(l *limits) { l.pressureTarget, l.shedAfter, l.shedAfterOverload = -1, 10*time.Millisecond, 0 }, true},
		"pressure with shed-after never":  {func(l *limits) { l.pressureTarget, l.shedAfter = time.Second, -1 }, true},
		"pressure interval zero":          {func(l *limits) { l.pressureInterval = 0 }, false},
		"pressure interval 10ms":          {func(l *limits) { l.pressureInterval = 10 * time.Millisecond }, true},
		"pressure interval 9ms":           {func(l *limits) { l.pressureInterval = 9 * time.Millisecond }, false},
	} {
		l := ok
		c.edit(&l)
		if err := l.check(); c.pass {
			require.NoError(t, err, name)
		} else {
			require.ErrorAs(t, err, new(cli.UsageError), name)
		}
	}
}

// Ingest's answers close their connection once seven eighths of
// --max-conns are open (7 of 8), and not before.
func TestIngestClosesConnectionsNearTheCap(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"DATABASE_URL": pgtest.NewURL(t)}, "--max-conns", "8")
	addr := s.listenAddr(t, "ingest listening")
	healthz := func(c net.Conn) *http.Response {
		t.Helper()
		require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
		_, err := fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		return resp
	}
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	require.False(t, healthz(dial()).Close, "one connection open: kept alive")
	for range 5 {
		dial() // silent: each holds a slot (accepted before the next dial's)
	}
	require.True(t, healthz(dial()).Close, "seven of eight open: the answer closes its connection")
}

// Answers close their connection from seven eighths of --max-conns.
func TestCloseAtIsSevenEighthsOfTheCap(t *testing.T) {
	t.Parallel()
	for conns, want := range map[int]int{1024: 896, 16: 14, 8: 7, 7: 7, 1: 1} {
		require.Equal(t, want, closeAt(conns), "--max-conns %d", conns)
	}
}
