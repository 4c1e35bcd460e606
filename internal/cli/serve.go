package cli

import (
	"fmt"
	"net"
	"net/http"
	"time"
)

// Listen binds addr and serves h on it in the background with bounded
// read, write and idle times. It returns the server (for Shutdown), the bound
// address (useful with port 0) and a channel that receives Serve's error.
func Listen(addr string, h http.Handler, writeTimeout time.Duration) (*http.Server, string, <-chan error, error) {
	return ListenLimited(addr, 0, h, writeTimeout, nil)
}

// ListenLimited is Listen with at most maxConns connections open at once
// (0: no cap). At the cap, the connection that has waited longest without a
// request in progress (idle keep-alive, or opened and silent) is closed to
// make room, and evicted (when not nil) is called; only when every
// connection is serving a request does a new one wait to be accepted, for
// the first to finish (see connLimiter).
func ListenLimited(addr string, maxConns int, h http.Handler, writeTimeout time.Duration, evicted func()) (*http.Server, string, <-chan error, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	if maxConns > 0 {
		lim := newConnLimiter(ln, maxConns, evicted)
		srv.ConnState = lim.connState
		ln = lim
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	return srv, ln.Addr().String(), errc, nil
}
