package cli

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// evictOne closes the connection that has waited longest among those that
// have waited since before the bound, and no other.
func TestEvictOneClosesTheLongestWaiting(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := newConnLimiter(ln, 3, nil)
	t.Cleanup(func() { l.Close() })
	now := time.Now()
	var peers []net.Conn
	for _, age := range []time.Duration{time.Second, 3 * time.Second, 100 * time.Millisecond} {
		server, client := net.Pipe()
		t.Cleanup(func() { client.Close() })
		l.slots <- struct{}{}
		lc := &limitedConn{Conn: server, l: l}
		l.waiting[lc] = now.Add(-age)
		require.NoError(t, client.SetReadDeadline(time.Now().Add(5*time.Second)))
		peers = append(peers, client)
	}
	require.True(t, l.evictOne(now.Add(-evictAfter)))
	// The 3 s one is closed: its peer reads EOF at once (a pipe's read of a
	// closed peer does not block).
	_, err = peers[1].Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)
	require.Len(t, l.slots, 2, "its slot is back")
	require.True(t, l.evictOne(now.Add(-evictAfter)), "then the 1 s one")
	require.False(t, l.evictOne(now.Add(-evictAfter)), "the 100 ms one has not waited long enough")
	require.Len(t, l.waiting, 1)
}

// A connection whose next request's first bytes have arrived is no longer
// waiting (net/http reports it active only once the whole header is in):
// it is not closed to make room.
func TestAConnectionReceivingARequestIsNotEvicted(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := newConnLimiter(ln, 1, nil)
	t.Cleanup(func() { l.Close() })
	server, client := net.Pipe()
	t.Cleanup(func() { client.Close() })
	l.slots <- struct{}{}
	lc := &limitedConn{Conn: server, l: l}
	l.mu.Lock()
	l.wait(lc)
	l.waiting[lc] = time.Now().Add(-time.Minute) // idle for long
	l.mu.Unlock()
	go func() { _, _ = client.Write([]byte("POST /webhooks/x HT")) }()
	n, err := lc.Read(make([]byte, 64))
	require.NoError(t, err)
	require.Positive(t, n)
	require.False(t, l.evictOne(time.Now()), "its request is arriving")
	require.False(t, lc.closed.Load())
}

// A connection idle for long whose next request's bytes have arrived but
// sit unread in its socket (the goroutine that will read them has not run
// yet) is not closed to make room: closing it would reset a request the
// client has sent. Once those bytes are read and it is idle again, it may be.
func TestAConnectionWithUnreadBytesIsNotEvicted(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := newConnLimiter(ln, 1, nil)
	t.Cleanup(func() { l.Close() })
	client, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })
	server, err := ln.Accept()
	require.NoError(t, err)
	l.slots <- struct{}{}
	lc := &limitedConn{Conn: server, l: l}
	l.mu.Lock()
	l.wait(lc)
	l.waiting[lc] = time.Now().Add(-time.Minute)
	l.mu.Unlock()
	_, err = client.Write([]byte("POST /webhooks/x HTTP/1.1\r\n"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return hasPendingBytes(server) }, 5*time.Second, time.Millisecond)
	require.False(t, l.evictOne(time.Now().Add(-evictAfter)), "bytes of a request wait unread: not idle")
	// Read them without taking it out of waiting (as if they were the tail
	// of the last request), and it is evictable again.
	_, err = server.Read(make([]byte, 64))
	require.NoError(t, err)
	require.True(t, l.evictOne(time.Now().Add(-evictAfter)))
}

// With an overflow handler, a connection that finds every slot taken and
// none to evict (here both idle for less than evictAfter, stretched to an
// hour) is answered by it at once. Before, Accept waited for one to become
// evictable, and every sender behind it in the accept queue waited too.
// The idle connections are left alone and still served.
func TestOverflowWhenNoConnectionCanBeEvicted(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })
	refuse := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "5")
		http.Error(w, "too many connections", http.StatusServiceUnavailable)
	})
	srv, ln := newLimitedServer(ln, ok, 5*time.Second, Limits{MaxConns: 2, Overflow: refuse}, time.Hour)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })

	get := func(c net.Conn, r *bufio.Reader) *http.Response { return GetOn(t, c, r) }
	var idle []net.Conn
	var readers []*bufio.Reader
	for range 2 {
		c, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		r := bufio.NewReader(c)
		require.Equal(t, http.StatusOK, get(c, r).StatusCode)
		idle, readers = append(idle, c), append(readers, r)
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	resp := get(c, bufio.NewReader(c))
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "5", resp.Header.Get("Retry-After"))
	require.True(t, resp.Close, "the overflow answer closes its connection")
	for i, c := range idle {
		require.Equal(t, http.StatusOK, get(c, readers[i]).StatusCode, "idle connection %d kept", i)
	}
}

// GetOn sends GET / on c and returns its answer (read from r, c's reader),
// body drained; within 10 s or the test fails. Exported for cli_test.
func GetOn(t *testing.T, c net.Conn, r *bufio.Reader) *http.Response {
	t.Helper()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	_, err := fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	resp, err := http.ReadResponse(r, nil)
	require.NoError(t, err, "answered, not left waiting")
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}
