package cli_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/cli"
)

type limitedServer struct {
	addr    string
	served  chan string
	release chan struct{}
	evicted atomic.Int64
}

// serveLimited serves maxConns connections at most; a request to /busy
// holds its connection until release is closed.
func serveLimited(t *testing.T, maxConns int) *limitedServer {
	t.Helper()
	return serveLimitedOverflow(t, maxConns, nil)
}

// serveLimitedOverflow is serveLimited with an overflow handler.
func serveLimitedOverflow(t *testing.T, maxConns int, overflow http.Handler) *limitedServer {
	t.Helper()
	s := &limitedServer{served: make(chan string, 100), release: make(chan struct{})}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/busy" {
			<-s.release
		}
		s.served <- r.URL.Path
		fmt.Fprint(w, "ok")
	})
	srv, addr, _, err := cli.ListenLimited("127.0.0.1:0", h, 5*time.Second, cli.Limits{MaxConns: maxConns, Evicted: func() { s.evicted.Add(1) }, Overflow: overflow})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	s.addr = addr
	return s
}

func (s *limitedServer) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", s.addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func send(t *testing.T, c net.Conn, path string) {
	t.Helper()
	_, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
	require.NoError(t, err)
}

func readOK(t *testing.T, c net.Conn, r *bufio.Reader) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(r, nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// Connections that each sent one request and then idle (keep-alive) fill
// the cap; a new sender is still served at once: the connection idle the
// longest is closed to make room, and the others stay open.
func TestListenLimitedEvictsTheLongestIdleConnectionForANewOne(t *testing.T) {
	t.Parallel()
	s := serveLimited(t, 8)
	idle := make([]net.Conn, 8)
	readers := make([]*bufio.Reader, 8)
	for i := range idle {
		idle[i] = s.dial(t)
		readers[i] = bufio.NewReader(idle[i])
		send(t, idle[i], fmt.Sprintf("/idle-%d", i))
		readOK(t, idle[i], readers[i])
		<-s.served
	}
	start := time.Now()
	c := s.dial(t)
	send(t, c, "/new")
	readOK(t, c, bufio.NewReader(c))
	require.Less(t, time.Since(start), time.Second, "a new sender served at once")
	require.Equal(t, "/new", <-s.served)
	require.EqualValues(t, 1, s.evicted.Load())

	// One idle connection was closed (which one is TestEvictOneClosesTheLongestWaiting's
	// concern: the order in which the server marks connections idle is the
	// scheduler's); the other seven are still served on the connections
	// they have.
	closed := 0
	for i, c := range idle {
		require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
		if _, err := fmt.Fprintf(c, "GET /again-%d HTTP/1.1\r\nHost: x\r\n\r\n", i); err != nil {
			closed++
			continue
		}
		resp, err := http.ReadResponse(readers[i], nil)
		if err != nil {
			require.True(t, errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET), "%v", err)
			closed++
			continue
		}
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, fmt.Sprintf("/again-%d", i), <-s.served)
	}
	require.Equal(t, 1, closed, "one idle connection made room")
}

// A connection opened and left silent (no byte of a request) holds no
// slot against a sender either.
func TestListenLimitedEvictsSilentConnections(t *testing.T) {
	t.Parallel()
	s := serveLimited(t, 4)
	for range 4 {
		s.dial(t)
	}
	c := s.dial(t)
	send(t, c, "/new")
	readOK(t, c, bufio.NewReader(c))
	require.Equal(t, "/new", <-s.served)
	require.EqualValues(t, 1, s.evicted.Load())
}

// When every connection is serving a request, the cap holds: a new
// connection's request is not served until one of them finishes, and
// nothing is evicted. (The negative check cannot fail spuriously: with the
// cap in place the request is never served early, however slow the
// machine.)
func TestListenLimitedWaitsWhenEveryConnectionIsBusy(t *testing.T) {
	t.Parallel()
	s := serveLimited(t, 2)
	var busy []net.Conn
	for range 2 {
		c := s.dial(t)
		send(t, c, "/busy")
		busy = append(busy, c)
	}
	third := s.dial(t) // completes in the kernel's accept queue
	send(t, third, "/third")
	select {
	case p := <-s.served:
		t.Fatalf("%s served past the cap of 2 busy connections", p)
	case <-time.After(300 * time.Millisecond):
	}
	require.Zero(t, s.evicted.Load(), "a connection serving a request is never closed")
	close(s.release)
	for _, c := range busy {
		readOK(t, c, bufio.NewReader(c))
	}
	// Both busy connections are idle now: the third takes the slot of one.
	readOK(t, third, bufio.NewReader(third))
}

// With an overflow handler, a connection that arrives while every one at
// the cap is busy with a request is answered by it at once (here 503 with
// Retry-After) and closed, rather than waiting for a slot; the busy ones
// are untouched, and once they finish a new connection is served normally.
func TestListenLimitedAnswersOverflowAtOnce(t *testing.T) {
	t.Parallel()
	s := serveLimitedOverflow(t, 2, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "5")
		http.Error(w, "too many connections", http.StatusServiceUnavailable)
	}))
	var busy []net.Conn
	for range 2 {
		c := s.dial(t)
		send(t, c, "/busy")
		busy = append(busy, c)
	}
	// Both are busy once the handler holds them: the server has read their
	// requests. (A connection not yet active would be waiting, and a new
	// one would wait for it instead.)
	// answer sends path on a new connection and returns the answer.
	answer := func(path string) *http.Response {
		c := s.dial(t)
		send(t, c, path)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	require.Eventually(t, func() bool {
		resp := answer("/probe")
		if resp.StatusCode != http.StatusServiceUnavailable {
			return false
		}
		require.Equal(t, "5", resp.Header.Get("Retry-After"))
		require.True(t, resp.Close, "the overflow answer closes its connection")
		return true
	}, 10*time.Second, 10*time.Millisecond)
	select {
	case p := <-s.served:
		t.Fatalf("%s served by the handler while both slots were busy", p)
	default:
	}
	require.Zero(t, s.evicted.Load(), "a connection serving a request is never closed")
	close(s.release)
	for _, c := range busy {
		readOK(t, c, bufio.NewReader(c))
	}
	// The server marks a connection idle just after writing its answer,
	// which the client may read first: until it has, both slots still look
	// busy and a new connection is overflow. Once it has, a new sender is
	// served (a slot's idle connection makes room).
	require.Eventually(t, func() bool {
		return answer("/after").StatusCode == http.StatusOK
	}, 10*time.Second, 10*time.Millisecond, "a new sender served once the busy connections finished")
}

// With CloseAt, an answer given while that many connections are open says
// "Connection: close" and the server closes the connection after it, so a
// client does not keep a connection the cap would later evict under it;
// below CloseAt connections are kept alive.
func TestListenLimitedClosesAnswersNearTheCap(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })
	srv, addr, _, err := cli.ListenLimited("127.0.0.1:0", h, 5*time.Second, cli.Limits{MaxConns: 8, CloseAt: 2})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	get := func(c net.Conn, r *bufio.Reader) *http.Response {
		t.Helper()
		resp := cli.GetOn(t, c, r)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		return resp
	}
	first, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { first.Close() })
	fr := bufio.NewReader(first)
	require.False(t, get(first, fr).Close, "one connection open: kept alive")

	second, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { second.Close() })
	sr := bufio.NewReader(second)
	require.True(t, get(second, sr).Close, "two open, CloseAt 2: the answer closes its connection")
	_, err = sr.ReadByte()
	require.ErrorIs(t, err, io.EOF, "and the server closed it")

	// Back under CloseAt once both are gone (the server gives a slot back
	// just after closing): a new connection is kept alive again.
	first.Close()
	var kept bool
	for deadline := time.Now().Add(10 * time.Second); !kept && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		kept = !get(c, bufio.NewReader(c)).Close
		c.Close()
	}
	require.True(t, kept, "a new connection kept alive once under CloseAt again")
}
