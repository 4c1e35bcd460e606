// Package groupcommit lets callers that each have one item to commit share a
// database transaction: calls that arrive while a commit is in flight wait
// and are committed together by the next one, and every caller still gets
// its own answer. A lone call at idle commits at once: batches form from
// calls that arrive during a commit, never from a timer.
//
// It is the one batching mechanism of the project: ingest stores deliveries
// with it and the worker processes envelopes with it. It knows nothing of
// SQL; the Func passed to New does the work and must answer each item on its
// own (one bad item must not fail its neighbours).
//
// The package imports only the standard library.
package groupcommit

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Func commits a batch: it must return exactly one Result per item, in the
// same order. ctx carries the earliest deadline of the batch's callers (or
// Options.Timeout when none has one, whichever is sooner) and is not
// cancelled when a caller goes away, so one impatient caller cannot abort
// its neighbours' commit.
type Func[I, O any] func(ctx context.Context, items []I) []Result[O]

// Result is one item's answer.
type Result[O any] struct {
	Value O
	Err   error
}

// Options bound the batches. Zero values take the defaults.
type Options struct {
	// MaxBatch is the most items one call of Func receives (default 64).
	MaxBatch int
	// MaxConcurrent is how many batches may be in flight at once (default 4):
	// each holds one database connection for its transaction.
	MaxConcurrent int
	// Timeout bounds a batch whose callers have no deadline (default 10 s).
	Timeout time.Duration
}

// Committer gathers concurrent Do calls into batches. The zero value is not
// usable; use New. It starts goroutines only while calls are waiting, so it
// needs no Close: when the queue is empty nothing runs.
type Committer[I, O any] struct {
	fn   Func[I, O]
	opts Options

	mu      sync.Mutex
	queue   []*call[I, O]
	running int
	// inflight holds the first (oldest) call of each batch being committed.
	inflight map[*call[I, O]]struct{}

	batches atomic.Int64
	items   atomic.Int64
}

const (
	queued int32 = iota
	taken
	abandoned
)

type call[I, O any] struct {
	ctx   context.Context
	at    time.Time // when Do was called
	item  I
	state atomic.Int32
	done  chan struct{}
	res   Result[O]
}

// New returns a Committer that commits batches with fn.
func New[I, O any](fn Func[I, O], opts Options) *Committer[I, O] {
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 64
	}
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = 4
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	return &Committer[I, O]{fn: fn, opts: opts, inflight: map[*call[I, O]]struct{}{}}
}

// Do commits item, together with whatever other items are waiting, and
// returns its own result. When ctx ends while the item is still queued, Do
// returns ctx's error and the item is never passed to Func; once a batch
// has taken it, Do waits for that batch's answer (bounded by the batch's
// deadline), so the answer always says what happened to the item.
func (c *Committer[I, O]) Do(ctx context.Context, item I) (O, error) {
	if err := ctx.Err(); err != nil {
		var zero O
		return zero, err
	}
	cl := &call[I, O]{ctx: ctx, at: time.Now(), item: item, done: make(chan struct{})}
	c.mu.Lock()
	c.queue = append(c.queue, cl)
	spawn := c.running < c.opts.MaxConcurrent
	if spawn {
		c.running++
	}
	c.mu.Unlock()
	if spawn {
		go c.loop()
	}
	select {
	case <-cl.done:
		return cl.res.Value, cl.res.Err
	case <-ctx.Done():
		if cl.state.CompareAndSwap(queued, abandoned) {
			var zero O
			return zero, ctx.Err()
		}
		<-cl.done
		return cl.res.Value, cl.res.Err
	}
}

// Stats returns how many batches ran and how many items they held.
func (c *Committer[I, O]) Stats() (batches, items int64) {
	return c.batches.Load(), c.items.Load()
}

// Queued returns how many calls wait for a batch (abandoned ones included
// until a batch skips them).
func (c *Committer[I, O]) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// Age returns how long the oldest item not yet answered has waited: zero
// when nothing waits. It is the committer's health in one number: a few
// commit times when the database keeps up, and growing without bound while
// it does not (a stalled disk, a held lock, more offered than it can
// commit), whatever the cause. Callers refuse new work on it.
func (c *Committer[I, O]) Age() time.Duration {
	c.mu.Lock()
	var oldest time.Time
	if len(c.queue) > 0 {
		oldest = c.queue[0].at // FIFO: the first queued is the oldest queued
	}
	for cl := range c.inflight {
		if oldest.IsZero() || cl.at.Before(oldest) {
			oldest = cl.at
		}
	}
	c.mu.Unlock()
	if oldest.IsZero() {
		return 0
	}
	return time.Since(oldest)
}

// loop runs batches until the queue is empty.
func (c *Committer[I, O]) loop() {
	for {
		batch := c.take()
		if batch == nil {
			return
		}
		c.run(batch)
	}
}

// take removes up to MaxBatch live calls from the queue; nil (and one
// fewer running loop) when there are none.
func (c *Committer[I, O]) take() []*call[I, O] {
	c.mu.Lock()
	defer c.mu.Unlock()
	var batch []*call[I, O]
	n := 0
	for n < len(c.queue) && len(batch) < c.opts.MaxBatch {
		cl := c.queue[n]
		n++
		if cl.state.CompareAndSwap(queued, taken) {
			batch = append(batch, cl)
		}
	}
	rest := copy(c.queue, c.queue[n:])
	clear(c.queue[rest:])
	c.queue = c.queue[:rest]
	if len(batch) == 0 {
		c.running--
		return nil
	}
	c.inflight[batch[0]] = struct{}{}
	return batch
}

func (c *Committer[I, O]) run(batch []*call[I, O]) {
	deadline := time.Now().Add(c.opts.Timeout)
	items := make([]I, len(batch))
	for i, cl := range batch {
		items[i] = cl.item
		if d, ok := cl.ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	results := c.call(ctx, items)
	c.mu.Lock()
	delete(c.inflight, batch[0])
	c.mu.Unlock()
	c.batches.Add(1)
	c.items.Add(int64(len(batch)))
	for i, cl := range batch {
		cl.res = results[i]
		close(cl.done)
	}
}

// call runs fn, turning a panic or a wrong number of results into an error
// for every item.
func (c *Committer[I, O]) call(ctx context.Context, items []I) (results []Result[O]) {
	defer func() {
		if r := recover(); r != nil {
			// The stack goes with the error: the caller logs it, and nothing
			// else says where the batch's code panicked.
			results = failAll[O](len(items), fmt.Errorf("groupcommit: batch panicked: %v\n%s", r, debug.Stack()))
		}
	}()
	results = c.fn(ctx, items)
	if len(results) != len(items) {
		return failAll[O](len(items), fmt.Errorf("groupcommit: batch of %d returned %d results", len(items), len(results)))
	}
	return results
}

func failAll[O any](n int, err error) []Result[O] {
	out := make([]Result[O], n)
	for i := range out {
		out[i].Err = err
	}
	return out
}
