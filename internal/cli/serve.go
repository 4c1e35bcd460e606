package cli

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// Listen binds addr and serves h on it in the background with bounded
// read, write and idle times. It returns the server (for Shutdown), the bound
// address (useful with port 0) and a channel that receives Serve's error.
func Listen(addr string, h http.Handler, writeTimeout time.Duration) (*http.Server, string, <-chan error, error) {
	return ListenLimited(addr, 0, h, writeTimeout)
}

// ListenLimited is Listen with at most maxConns connections open at once
// (0: no cap). Past the cap, new connections wait in the kernel's accept
// queue until one closes (golang.org/x/net/netutil.LimitListener).
func ListenLimited(addr string, maxConns int, h http.Handler, writeTimeout time.Duration) (*http.Server, string, <-chan error, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	if maxConns > 0 {
		ln = netutil.LimitListener(ln, maxConns)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	return srv, ln.Addr().String(), errc, nil
}
