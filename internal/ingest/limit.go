package ingest

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/inboxhq/inbox/internal/labels"
)

// FreeBodyBytes is how much of each request's body is read without drawing
// on the shared body budget: a typical webhook (a few KiB) never waits for
// memory, and what all requests hold this way is bounded by the listener's
// connection cap (--max-conns x FreeBodyBytes).
const FreeBodyBytes = 16 << 10

// Defaults of the body budget.
const (
	DefaultMaxInflightBodyBytes = 64 << 20
	DefaultBodyWait             = 500 * time.Millisecond
)

// refusal is a delivery refused at once, before it is stored, because
// ingest is short of a resource: 503 with Retry-After, outcome overloaded,
// counted by reason. Nothing is acknowledged, so the provider's retry is
// the delivery's next chance.
type refusal struct {
	reason labels.RefusalReason
	msg    string // what the sender reads
}

func (e *refusal) Error() string { return e.msg }

// The refusals, one per resource.
var (
	// errOverloaded: the body budget stayed full for the whole wait.
	errOverloaded = &refusal{labels.RefusedBodyMemory, "too many deliveries in flight, not acknowledged; retry later"}
	// errStoreBehind: the oldest delivery being stored has waited past
	// ShedAfter, so a new one would only queue behind it until its deadline.
	errStoreBehind = &refusal{labels.RefusedStoreBehind, "storage is behind, delivery not acknowledged; retry later"}
	// errTooManyConns: the request came on a connection past --max-conns.
	errTooManyConns = &refusal{labels.RefusedConnections, "too many connections, delivery not acknowledged; retry later"}
)

// bodyBudget bounds the bytes of request bodies held in memory at once
// across all requests, beyond each one's FreeBodyBytes. Memory is drawn as
// bytes arrive (a sender that announces 1 MiB and sends nothing holds
// nothing) and given back when the request ends.
type bodyBudget struct {
	sem      *semaphore.Weighted
	wait     time.Duration
	inflight atomic.Int64 // bytes of bodies held, free tier included
}

func newBodyBudget(max int64, wait time.Duration) *bodyBudget {
	if max <= 0 {
		max = DefaultMaxInflightBodyBytes
	}
	if wait <= 0 {
		wait = DefaultBodyWait
	}
	return &bodyBudget{sem: semaphore.NewWeighted(max), wait: wait}
}

// read reads r's body, at most limit bytes (more is an *http.MaxBytesError),
// into a buffer grown as bytes arrive, drawing each growth past
// FreeBodyBytes from the budget. release gives the memory back; call it
// once the body is no longer needed (it is safe to call on error).
func (b *bodyBudget) read(ctx context.Context, w http.ResponseWriter, r *http.Request, limit int64) (body []byte, release func(), err error) {
	rd := http.MaxBytesReader(w, r.Body, limit)
	ceiling := limit
	if r.ContentLength >= 0 && r.ContentLength < ceiling {
		ceiling = r.ContentLength
	}
	var held, counted int64 // drawn from the semaphore; counted in inflight
	release = func() {
		if held > 0 {
			b.sem.Release(held)
		}
		b.inflight.Add(-counted)
		held, counted = 0, 0
	}
	grow := func(newCap int64) error {
		extra := max(0, newCap-FreeBodyBytes) - max(0, int64(cap(body))-FreeBodyBytes)
		if extra > 0 {
			wctx, cancel := context.WithTimeout(ctx, b.wait)
			err := b.sem.Acquire(wctx, extra)
			cancel()
			if err != nil {
				return errOverloaded
			}
			held += extra
		}
		b.inflight.Add(newCap - int64(cap(body)))
		counted += newCap - int64(cap(body))
		nb := make([]byte, len(body), newCap)
		copy(nb, body)
		body = nb
		return nil
	}
	if err := grow(min(ceiling, 4<<10)); err != nil {
		return nil, release, err
	}
	for {
		if len(body) == cap(body) {
			if int64(cap(body)) >= ceiling {
				// At the ceiling: only the end (or the over-limit error)
				// may follow.
				var one [1]byte
				n, err := rd.Read(one[:])
				switch {
				case n > 0:
					return nil, release, &http.MaxBytesError{Limit: limit}
				case err == io.EOF:
					return body, release, nil
				case err != nil:
					return nil, release, err
				}
				continue
			}
			if err := grow(min(ceiling, int64(cap(body))*2)); err != nil {
				return nil, release, err
			}
		}
		n, err := rd.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		if err == io.EOF {
			return body, release, nil
		}
		if err != nil {
			return nil, release, err
		}
	}
}
