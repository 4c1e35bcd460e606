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
	return ListenLimited(addr, h, writeTimeout, Limits{})
}

// Limits cap a listener's connections (ListenLimited).
type Limits struct {
	// MaxConns is how many connections may be open at once (0: no cap).
	// At the cap, the connection that has waited longest without a request
	// in progress (idle keep-alive, or opened and silent) is closed to make
	// room, and Evicted (when not nil) is called.
	MaxConns int
	Evicted  func()
	// Overflow, when not nil, serves the requests of connections accepted
	// past the cap while no slot is free and no connection has gone 250 ms
	// without a request (so none can be closed for room): one request
	// each, with "Connection: close", so a sender hears an answer at once
	// (a 503, say) instead of waiting in the kernel's accept queue for a
	// slot. At most MaxConns/4 (at least 16) such connections are open at
	// once, each for at most 2 s; past that, new ones wait as without
	// Overflow. Nil: new connections wait for the first slot to free.
	Overflow http.Handler
	// CloseAt, when above 0, is how many connections open make answers
	// carry "Connection: close": a client then opens a new connection for
	// its next request instead of keeping one the cap would evict. Past it
	// a keep-alive connection would sit idle among others until evicted,
	// and a client that sends on one just as it is closed gets an error,
	// not an answer (an HTTP/1.1 race no server can close: only not keeping
	// the connection avoids it). 0: answers never say close for the cap.
	CloseAt int
}

// ListenLimited is Listen with lim's cap on connections (see connLimiter).
func ListenLimited(addr string, h http.Handler, writeTimeout time.Duration, lim Limits) (*http.Server, string, <-chan error, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv, ln := newLimitedServer(ln, h, writeTimeout, lim, evictAfter)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	return srv, ln.Addr().String(), errc, nil
}

// newLimitedServer is ListenLimited's server on ln, and the listener to
// serve (ln wrapped in the cap); a test may shorten or stretch evictAfter.
func newLimitedServer(ln net.Listener, h http.Handler, writeTimeout time.Duration, lim Limits, evictAfter time.Duration) (*http.Server, net.Listener) {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	if lim.MaxConns > 0 {
		l := newConnLimiter(ln, lim.MaxConns, lim.Evicted)
		l.evictAfter = evictAfter
		srv.ConnState = l.connState
		if lim.Overflow != nil {
			l.overflow = make(chan struct{}, max(16, lim.MaxConns/4))
			srv.ConnContext = markOverflow
			srv.Handler = serveOverflow(h, lim.Overflow)
		}
		if lim.CloseAt > 0 {
			srv.Handler = closeNearCap(srv.Handler, l, lim.CloseAt)
		}
		ln = l
	}
	return srv, ln
}
