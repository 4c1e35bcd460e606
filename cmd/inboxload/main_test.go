package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/webhooktest"
)

// -h says how to use it and succeeds (issue 23: it exited 1 with
// `unknown command "-h"`); an unknown command is still an error.
func TestHelpSucceeds(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"-h", "--help", "help"} {
		var out bytes.Buffer
		require.NoError(t, run(context.Background(), []string{arg}, func(string) string { return "" }, &out, &out), arg)
		require.Contains(t, out.String(), "usage: inboxload send|drain|rss")
	}
	var out bytes.Buffer
	require.ErrorContains(t, run(context.Background(), []string{"sned"}, func(string) string { return "" }, &out, &out), `unknown command "sned"`)
}

// The open-loop sender counts every request: 2xx, 503s and the ones left
// unanswered past --timeout (never dropped from the figures), times each
// from when it was due (the 503s from when they were written too, the
// server's share), counts those later than --deadline, and resends
// each one that got no 2xx, several at once. The timeout is 2 s and the
// slow answers 3 s: with 500 ms, a loaded CI machine running the race
// detector once left all nine unanswered.
func TestSendCountsRefusalsAndUnanswered(t *testing.T) {
	t.Parallel()
	var resends, resending, mostResending atomic.Int64
	seen := sync.Map{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("webhook-id")
		n, err := strconv.Atoi(id[strings.LastIndex(id, "-")+1:])
		require.NoError(t, err)
		_, again := seen.LoadOrStore(id, true)
		if again {
			resends.Add(1)
			if n%3 == 0 {
				// A refused one's resend, answered within --timeout:
				// counted while the sender waits for it.
				k := resending.Add(1)
				for m := mostResending.Load(); k > m && !mostResending.CompareAndSwap(m, k); m = mostResending.Load() {
				}
				time.Sleep(100 * time.Millisecond)
				resending.Add(-1)
			}
		}
		switch n % 3 {
		case 0:
			if !again {
				time.Sleep(200 * time.Millisecond) // the server's share of the refusal's latency
			}
			w.Header().Set("Retry-After", "5")
			w.WriteHeader(http.StatusServiceUnavailable)
		case 1:
			w.WriteHeader(http.StatusAccepted)
		default:
			time.Sleep(3 * time.Second) // past --timeout
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	t.Cleanup(srv.Close)
	res := sendTo(t, srv.URL, "--rate", "100", "--count", "9", "--timeout", "2s", "--deadline", "1900ms", "--resend-refused", "--prefix", "t")
	require.Equal(t, []int64{9, 3, 3, 3}, []int64{res.Sent, res.Acknowledged, res.Non2xx, res.Errors})
	require.Equal(t, map[string]int{"202": 3, "503": 3, "unanswered": 3}, res.Codes)
	require.Equal(t, map[string]int{"timeout": 3}, res.Unanswered, "why they were left unanswered")
	require.NotNil(t, res.Late)
	require.GreaterOrEqual(t, *res.Late, int64(3), "the unanswered ones count as late")
	require.GreaterOrEqual(t, res.Maxms, 2000.0, "an unanswered request counts at the time it was given up")
	require.GreaterOrEqual(t, res.RefusedServedP99ms, 200.0, "the refusals' time from when they were written")
	require.LessOrEqual(t, res.RefusedServedP99ms, res.RefusedP99ms, "the time from when they were due includes it")
	require.NotNil(t, res.Resent)
	require.Equal(t, map[string]int{"503": 3, "unanswered": 3}, res.Resent.Codes)
	require.Equal(t, int64(6), resends.Load())
	require.GreaterOrEqual(t, mostResending.Load(), int64(2), "the refused ones are resent at once, not one after another")
}

// --body-bytes grows a payment to the size asked, still one valid JSON
// object with the payment's fields; each delivery's digests differ.
func TestPadBodyReachesTheSizeAsked(t *testing.T) {
	base := webhooktest.StandardPayment("pay_1", "m_001", 1000, "EUR")
	require.Equal(t, base, padBody(base, 0, "a"), "0: the bare payment")
	require.Equal(t, base, padBody(base, len(base), "a"))
	for _, n := range []int{300, 1700, 8000} {
		got := padBody(base, n, "load-1")
		require.Equal(t, n, len(got))
		var doc struct {
			Type string
			Data struct {
				PaymentID string `json:"payment_id"`
			}
			Metadata struct{ Fingerprint, Note string }
		}
		require.NoError(t, json.Unmarshal(got, &doc), "%s", got)
		require.Equal(t, "payment.succeeded", doc.Type)
		require.Equal(t, "pay_1", doc.Data.PaymentID)
		require.NotEmpty(t, doc.Metadata.Fingerprint)
		require.NotEqual(t, got, padBody(base, n, "load-2"))
	}
}

// An unanswered request is named by what happened to it.
func TestErrorKind(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&net.OpError{Op: "read", Err: syscall.ECONNRESET}, "reset"},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, "refused"},
		{fmt.Errorf("post: %w", io.EOF), "closed"},
		{errors.New("http: server closed idle connection"), "closed"},
		{context.DeadlineExceeded, "timeout"},
		{errors.New("something else"), "other"},
		// As http.Client returns them.
		{&url.Error{Op: "Post", URL: "http://x", Err: &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}}, "reset"},
		{&url.Error{Op: "Post", URL: "http://x", Err: io.EOF}, "closed"},
	} {
		require.Equal(t, tc.want, errorKind(tc.err), "%v", tc.err)
	}
}

// --timeline groups requests by when they were due: each window counts its
// own answers and its own acknowledged and refused latencies (a refusal's
// also from when it was written), so a slow second shows apart from the
// rest.
func TestWindowsGroupByDueTime(t *testing.T) {
	t.Parallel()
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	answers := map[int64]answer{
		1: {code: 202, due: ms(0), late: ms(10), written: ms(1), dialed: true},
		2: {code: 202, due: ms(400), late: ms(30), written: ms(4)},
		3: {code: 503, due: ms(900), late: ms(5), written: ms(2), dialed: true},
		4: {code: 202, due: ms(1000), late: ms(700), written: ms(600)},
		5: {code: 0, due: ms(2500), late: ms(3000), dialed: true}, // never written
		6: {code: 400, due: ms(2600), late: ms(2), written: ms(1)},
	}
	got := windows(answers, time.Second)
	require.Equal(t, []window{
		{At: 0, Sent: 3, Acked: 2, Refused: 1, AckP50ms: 30, AckP99ms: 30, WrittenP99ms: 4, Dialed: 2, RefusedP99ms: 5, RefusedServedP99ms: 3},
		{At: 1, Sent: 1, Acked: 1, AckP50ms: 700, AckP99ms: 700, WrittenP99ms: 600},
		{At: 2, Sent: 2, Other: 1, Unanswered: 1, WrittenP99ms: 1, Dialed: 1},
	}, got)
}

// --warm-conns opens the connections before the clock starts (GETs of
// /readyz, concurrently, one connection each), and the load reuses them.
// Here every request is answered only once five are in (the warm GETs, then
// the load's POSTs), so each takes a connection of its own and the load
// needs five at once: a cold sender dials all five, a warm one none (one at
// most: a connection whose answer was just read can be back in the client's
// pool a moment after the load's first request looked).
func TestWarmConnsAreOpenBeforeTheLoad(t *testing.T) {
	t.Parallel()
	var conns, readyz, arrived atomic.Int64
	var five atomic.Value // the current round's channel, closed when its fifth request is in
	five.Store(make(chan struct{}))
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		round := five.Load().(chan struct{})
		if arrived.Add(1)%5 == 0 {
			five.Store(make(chan struct{}))
			close(round)
		}
		select {
		case <-round:
		case <-time.After(2 * time.Second):
		}
		if r.URL.Path == "/readyz" {
			readyz.Add(1)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	send := func(extra ...string) sendResult {
		res := sendTo(t, srv.URL, append([]string{"--rate", "50", "--count", "5", "--timeline", "1s"}, extra...)...)
		require.EqualValues(t, 5, res.Acknowledged)
		require.Positive(t, res.WrittenP99ms, "every request was written")
		require.Equal(t, res.Dialed, int64(res.Timeline[0].Dialed), "the window counts what the run counts")
		return res
	}
	warm := send("--warm-conns", "5", "--prefix", "warm")
	require.EqualValues(t, 5, readyz.Load())
	require.LessOrEqual(t, warm.Dialed, int64(1), "the load reused the connections opened before it")
	require.GreaterOrEqual(t, conns.Load(), int64(5), "five opened before the load")
	require.LessOrEqual(t, conns.Load(), int64(6), "and one more at most for the load")

	cold := send("--prefix", "cold")
	require.EqualValues(t, 5, cold.Dialed, "a sender with no connection open dials one for each request in flight")
}

// --warmup sends at --warmup-rate first, from the same process, with ids
// of its own that none of the load's figures or checks count; the load's
// first delivery is due when the warm-up's time is up.
func TestWarmupPrecedesTheLoadUncounted(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var warmAt, loadAt []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("webhook-id")
		mu.Lock()
		if strings.HasPrefix(id, "stepw-") {
			warmAt = append(warmAt, time.Now())
		} else if strings.HasPrefix(id, "step-") {
			loadAt = append(loadAt, time.Now())
		}
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(srv.Close)
	res := sendTo(t, srv.URL, "--rate", "100", "--count", "5", "--warmup", "300ms", "--warmup-rate", "5", "--prefix", "step")
	require.EqualValues(t, 5, res.Sent, "the load's deliveries only")
	require.EqualValues(t, 5, res.Acknowledged)
	require.NotNil(t, res.Warmup)
	require.EqualValues(t, 2, res.Warmup.Sent, "300 ms at 5/s: due at 0 and 200 ms")
	require.Equal(t, map[string]int{"202": 2}, res.Warmup.Codes)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, warmAt, 2)
	require.Len(t, loadAt, 5)
	// The warm-up's first is due at its start, the load's first when the
	// warm-up's 300 ms are up, not after its last delivery (200 ms); each
	// is sent when due, never early.
	require.GreaterOrEqual(t, slices.MinFunc(loadAt, time.Time.Compare).Sub(slices.MinFunc(warmAt, time.Time.Compare)), 270*time.Millisecond)

	var out bytes.Buffer
	err := run(context.Background(), []string{"send", "--url", srv.URL, "--secret-env", "S", "--count", "5", "--warmup", "1s"},
		func(string) string { return testSecret }, &out, &out)
	require.ErrorContains(t, err, "--warmup needs --rate")
}

// testSecret is the Standard Webhooks secret the tests' sender signs with.
const testSecret = "whsec_ZTJlLXN0YW5kYXJkLXNlY3JldC0xMjM0NTY3OA=="

// sendTo runs `inboxload send --url url --secret-env S args...`, S holding
// testSecret, and returns the result it prints.
func sendTo(t *testing.T, url string, args ...string) sendResult {
	t.Helper()
	var out, errOut bytes.Buffer
	args = append([]string{"send", "--url", url, "--secret-env", "S"}, args...)
	require.NoError(t, run(context.Background(), args, func(k string) string {
		if k == "S" {
			return testSecret
		}
		return ""
	}, &out, &errOut), errOut.String())
	var res sendResult
	require.NoError(t, json.Unmarshal(out.Bytes(), &res), out.String())
	return res
}

// A server may answer before it has read a request's body (ingest refuses
// at once when its store is behind): the request's write then ends after
// the answer came back, and recording when it ended must not race with
// reading the answer (run with -race).
func TestAnswerBeforeTheBodyIsRead(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "5")
		w.WriteHeader(http.StatusServiceUnavailable) // the body is never read
	}))
	t.Cleanup(srv.Close)
	res := sendTo(t, srv.URL, "--rate", "50", "--count", "5", "--body-bytes", "1000000", "--timeline", "1s", "--prefix", "early")
	require.EqualValues(t, 5, res.Sent)
	require.Zero(t, res.Acknowledged)
	require.EqualValues(t, 5, res.Non2xx+res.Errors, "each refused, or cut off while it was still being written")
}
