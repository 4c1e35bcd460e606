package cli

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// connLimiter caps the connections a listener has open, like
// golang.org/x/net/netutil.LimitListener, with one difference that keeps
// the endpoint open to senders: when the cap is reached, the connection
// that has waited longest without a request in progress (idle between
// keep-alive requests, or opened and not yet sending; for at least
// evictAfter) is closed to make room, rather than the new connection
// waiting in the kernel's accept queue until some client lets go. When none
// qualifies, a new one waits for the first to finish, or with an overflow
// handler is answered by it at once (Accept).
//
// An idle keep-alive connection is a cache, not a commitment: an HTTP
// client whose idle connection is closed opens another (it is the same
// event as the server's idle timeout). So --max-conns clients that each send one
// request and then idle cannot shut the endpoint to everyone else, which
// the plain cap let them do for the whole idle timeout.
//
// The server must report connection states to track (http.Server.ConnState).
type connLimiter struct {
	net.Listener
	slots chan struct{} // one token per open connection
	done  chan struct{}

	mu sync.Mutex
	// waiting holds the open connections with no request in progress and
	// since when: new ones (no byte of a request yet) and idle ones.
	waiting map[*limitedConn]time.Time
	onEvict func()
	close   sync.Once
	// overflow holds one token per connection accepted past the cap
	// (overflowConn); nil when there is no overflow handler.
	overflow chan struct{}
	// evictAfter: the const of that name, but for tests.
	evictAfter time.Duration
}

func newConnLimiter(ln net.Listener, n int, onEvict func()) *connLimiter {
	return &connLimiter{Listener: ln, slots: make(chan struct{}, n), done: make(chan struct{}),
		waiting: map[*limitedConn]time.Time{}, onEvict: onEvict, evictAfter: evictAfter}
}

// evictAfter is how long a connection must have been without a request
// before it may be closed for a new one: a client that just connected, or
// just got its answer, is about to send its next request (its bytes may be
// in flight), and closing it then would only move the problem.
const evictAfter = 250 * time.Millisecond

// Accept takes the next connection, then a slot for it: a free one, else
// one freed by closing the connection that has waited longest without a
// request (at least evictAfter), else the first that a finished connection
// gives back (checked again every evictAfter/5 for one to evict). With an
// overflow handler, a connection that finds no slot free and none to evict
// takes an overflow token instead and is answered at once: every slot is
// busy with a request or about to be (a connection just opened or just
// answered, whose next request may be in flight), and under load waiting
// for one of them only queues senders in the accept loop, one behind the
// other. So at most one connection past the cap and its overflow is held,
// the one waiting for its slot.
func (l *connLimiter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	for {
		select {
		case l.slots <- struct{}{}:
			return l.track(c), nil
		default:
		}
		evicted := l.evictOne(time.Now().Add(-l.evictAfter))
		if l.overflow != nil && !evicted {
			// No slot will be free for this one soon enough: answer it
			// at once rather than hold it (and every sender behind it).
			// A slot freed meanwhile (a connection closing) comes first:
			// select would pick at random.
			select {
			case l.slots <- struct{}{}:
				return l.track(c), nil
			default:
			}
			select {
			case l.overflow <- struct{}{}:
				return &overflowConn{Conn: c, l: l, until: time.Now().Add(overflowHold)}, nil
			default:
			}
		}
		select {
		case l.slots <- struct{}{}:
			return l.track(c), nil
		case <-l.done:
			c.Close()
			return nil, net.ErrClosed
		case <-time.After(l.evictAfter / 5):
		}
	}
}

func (l *connLimiter) track(c net.Conn) *limitedConn {
	lc := &limitedConn{Conn: c, l: l}
	l.mu.Lock()
	l.wait(lc)
	l.mu.Unlock()
	return lc
}

// wait and unwait put c in and out of waiting; called with l.mu held.
func (l *connLimiter) wait(c *limitedConn) {
	l.waiting[c] = time.Now()
	c.waiting.Store(true)
}

func (l *connLimiter) unwait(c *limitedConn) {
	delete(l.waiting, c)
	c.waiting.Store(false)
}

// Close stops Accept and closes the listener; open connections are the
// server's to close.
func (l *connLimiter) Close() error {
	l.close.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// evictOne closes the connection that has waited longest without a
// request in progress, if it has waited since before and no byte of a next
// request sits unread in its socket, and reports whether there was one. The choice and the close happen under l.mu, so a
// connection whose next request's first bytes arrived (limitedConn.Read
// takes it out of waiting under the same lock) is never the one closed.
func (l *connLimiter) evictOne(before time.Time) bool {
	l.mu.Lock()
	var oldest *limitedConn
	var since time.Time
	for c, t := range l.waiting {
		if t.Before(before) && (oldest == nil || t.Before(since)) && !hasPendingBytes(c.Conn) {
			oldest, since = c, t
		}
	}
	if oldest != nil {
		l.unwait(oldest)
		_ = oldest.Conn.Close() // the server's read fails; its Close gives the slot back
	}
	l.mu.Unlock()
	if oldest == nil {
		return false
	}
	_ = oldest.Close()
	if l.onEvict != nil {
		l.onEvict()
	}
	return true
}

// connState tracks which connections have a request in progress.
func (l *connLimiter) connState(c net.Conn, s http.ConnState) {
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch s {
	case http.StateIdle:
		if !lc.closed.Load() {
			l.wait(lc)
		}
	case http.StateActive, http.StateHijacked, http.StateClosed:
		l.unwait(lc)
	}
}

// limitedConn gives its slot back once, when closed.
type limitedConn struct {
	net.Conn
	l       *connLimiter
	closed  atomic.Bool
	waiting atomic.Bool // in l.waiting (a hint read without l.mu)
}

// Read takes the connection out of waiting as soon as bytes of a request
// arrive: net/http reports it active only once the whole header is read,
// and a connection whose request is arriving must not be closed for room.
func (c *limitedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.waiting.Load() {
		c.l.mu.Lock()
		c.l.unwait(c)
		c.l.mu.Unlock()
	}
	return n, err
}

// CloseWrite half-closes the connection when it can, as net/http does
// before closing one whose request it did not read to the end, so that the
// client reads the answer rather than a reset. Without it the wrapper would
// hide the TCP connection's own CloseWrite.
func (c *limitedConn) CloseWrite() error { return closeWrite(c.Conn) }

// CloseWrite: as limitedConn's (the overflow answer must reach the client).
func (c *overflowConn) CloseWrite() error { return closeWrite(c.Conn) }

func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.l.mu.Lock()
		c.l.unwait(c)
		c.l.mu.Unlock()
		<-c.l.slots
	}
	return err
}

// overflowHold bounds how long a connection accepted past the cap stays
// open: long enough to read a request's header and answer it.
const overflowHold = 2 * time.Second

// overflowConn is a connection accepted past the cap: it serves one request
// with the overflow handler, is never evicted nor counted in the cap, and
// cannot be kept open longer than overflowHold by a slow sender.
type overflowConn struct {
	net.Conn
	l      *connLimiter
	until  time.Time
	closed atomic.Bool
}

// SetDeadline and SetReadDeadline keep net/http's deadlines (header read
// timeout, body read, keep-alive) within overflowHold.
func (c *overflowConn) SetDeadline(t time.Time) error { return c.Conn.SetDeadline(c.clamp(t)) }

func (c *overflowConn) SetReadDeadline(t time.Time) error {
	return c.Conn.SetReadDeadline(c.clamp(t))
}

func (c *overflowConn) clamp(t time.Time) time.Time {
	if t.IsZero() || t.After(c.until) {
		return c.until
	}
	return t
}

func (c *overflowConn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		<-c.l.overflow
	}
	return err
}

type overflowKey struct{}

// markOverflow is the server's ConnContext: it marks the requests of an
// overflowConn.
func markOverflow(ctx context.Context, c net.Conn) context.Context {
	if _, ok := c.(*overflowConn); ok {
		return context.WithValue(ctx, overflowKey{}, true)
	}
	return ctx
}

// serveOverflow sends the requests of overflow connections to overflow,
// closing the connection after the answer, and the others to h.
func serveOverflow(h, overflow http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Context().Value(overflowKey{}) == nil {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Connection", "close")
		overflow.ServeHTTP(w, r)
	})
}

// closeNearCap answers with "Connection: close" while at least n of l's
// slots are taken (Limits.CloseAt). It is read as the request starts: a
// request that finds room keeps its connection.
func closeNearCap(h http.Handler, l *connLimiter, n int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(l.slots) >= n {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}
