package cli_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/cli"
)

// ListenLimited serves at most maxConns connections at once: a third
// connection's request is not served while two are open, and is served as
// soon as one closes. (The negative check cannot fail spuriously: with the
// cap in place the request is never served early, however slow the machine.)
func TestListenLimitedCapsConnections(t *testing.T) {
	t.Parallel()
	served := make(chan string, 10)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served <- r.URL.Path
		fmt.Fprint(w, "ok")
	})
	srv, addr, _, err := cli.ListenLimited("127.0.0.1:0", 2, h, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })

	get := func(c net.Conn, path string) {
		t.Helper()
		_, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
		require.NoError(t, err)
	}
	read := func(c net.Conn) {
		t.Helper()
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	var open []net.Conn
	for _, p := range []string{"/a", "/b"} {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		get(c, p)
		read(c) // served, and the connection stays open (keep-alive)
		require.Equal(t, p, <-served)
		open = append(open, c)
	}
	third, err := net.Dial("tcp", addr) // completes in the kernel's accept queue
	require.NoError(t, err)
	t.Cleanup(func() { third.Close() })
	get(third, "/c")
	select {
	case p := <-served:
		t.Fatalf("%s served past the cap of 2 connections", p)
	case <-time.After(300 * time.Millisecond):
	}
	open[0].Close()
	require.NoError(t, third.SetDeadline(time.Now().Add(10*time.Second)))
	read(third)
	require.Equal(t, "/c", <-served)
}
