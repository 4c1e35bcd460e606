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
	// past the cap while every connection is serving a request: one request
	// each, with "Connection: close", so a sender hears an answer at once
	// (a 503, say) instead of waiting in the kernel's accept queue for a
	// slot. At most MaxConns/4 (at least 16) such connections are open at
	// once, each for at most 2 s; past that, new ones wait as without
	// Overflow. Nil: new connections wait for the first slot to free.
	Overflow http.Handler
}

// ListenLimited is Listen with lim's cap on connections (see connLimiter).
func ListenLimited(addr string, h http.Handler, writeTimeout time.Duration, lim Limits) (*http.Server, string, <-chan error, error) {
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
	if lim.MaxConns > 0 {
		l := newConnLimiter(ln, lim.MaxConns, lim.Evicted)
		srv.ConnState = l.connState
		if lim.Overflow != nil {
			l.overflow = make(chan struct{}, max(16, lim.MaxConns/4))
			srv.ConnContext = markOverflow
			srv.Handler = serveOverflow(h, lim.Overflow)
		}
		ln = l
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	return srv, ln.Addr().String(), errc, nil
}
