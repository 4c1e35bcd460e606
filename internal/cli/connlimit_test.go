package cli

import (
	"io"
	"net"
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
