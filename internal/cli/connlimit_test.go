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
