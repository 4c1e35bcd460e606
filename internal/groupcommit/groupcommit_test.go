package groupcommit_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/groupcommit"
)

// recorder is a Func that records each batch and can be held at its start.
type recorder struct {
	mu      sync.Mutex
	batches [][]int
	hold    chan struct{} // when set, every batch waits for it to close
	started chan int      // receives each batch's size as it starts
	active  atomic.Int32
	maxSeen atomic.Int32
}

func (r *recorder) fn(ctx context.Context, items []int) []groupcommit.Result[int] {
	n := r.active.Add(1)
	defer r.active.Add(-1)
	for {
		m := r.maxSeen.Load()
		if n <= m || r.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	if r.started != nil {
		r.started <- len(items)
	}
	if r.hold != nil {
		<-r.hold
	}
	r.mu.Lock()
	r.batches = append(r.batches, append([]int(nil), items...))
	r.mu.Unlock()
	out := make([]groupcommit.Result[int], len(items))
	for i, it := range items {
		if it < 0 {
			out[i].Err = errors.New("negative")
			continue
		}
		out[i].Value = it * 10
	}
	return out
}

func TestLoneCallCommitsAtOnceAlone(t *testing.T) {
	t.Parallel()
	r := &recorder{}
	c := groupcommit.New(r.fn, groupcommit.Options{})
	v, err := c.Do(context.Background(), 7)
	require.NoError(t, err)
	require.Equal(t, 70, v)
	require.Equal(t, [][]int{{7}}, r.batches)
}

func TestCallsArrivingDuringACommitShareTheNextOneAndEachGetsItsOwnAnswer(t *testing.T) {
	t.Parallel()
	r := &recorder{hold: make(chan struct{}), started: make(chan int, 10)}
	c := groupcommit.New(r.fn, groupcommit.Options{MaxConcurrent: 1, MaxBatch: 100})
	var wg sync.WaitGroup
	results := make([]int, 11)
	errs := make([]error, 11)
	wg.Add(1)
	go func() { defer wg.Done(); results[0], errs[0] = c.Do(context.Background(), 0) }()
	require.Equal(t, 1, <-r.started) // the first commit is in flight
	for i := 1; i <= 10; i++ {
		item := i
		if i == 5 {
			item = -5 // one bad item
		}
		wg.Add(1)
		go func(i, item int) { defer wg.Done(); results[i], errs[i] = c.Do(context.Background(), item) }(i, item)
	}
	require.Eventually(t, func() bool { return c.Queued() == 10 }, 5*time.Second, time.Millisecond)
	close(r.hold)
	require.Equal(t, 10, <-r.started) // the ten waiting calls form one batch
	wg.Wait()
	for i := 0; i <= 10; i++ {
		if i == 5 {
			require.EqualError(t, errs[i], "negative")
			continue
		}
		require.NoError(t, errs[i], i)
		require.Equal(t, i*10, results[i])
	}
	batches, items := c.Stats()
	require.EqualValues(t, 2, batches)
	require.EqualValues(t, 11, items)
}

func TestBatchesAreBoundedBySizeAndConcurrency(t *testing.T) {
	t.Parallel()
	r := &recorder{hold: make(chan struct{})}
	c := groupcommit.New(r.fn, groupcommit.Options{MaxConcurrent: 2, MaxBatch: 3})
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = c.Do(context.Background(), i) }()
	}
	require.Eventually(t, func() bool { return r.active.Load() == 2 }, 5*time.Second, time.Millisecond)
	close(r.hold)
	wg.Wait()
	require.LessOrEqual(t, r.maxSeen.Load(), int32(2))
	total := 0
	for _, b := range r.batches {
		require.LessOrEqual(t, len(b), 3)
		total += len(b)
	}
	require.Equal(t, 20, total)
}

func TestACallWhoseContextEndsWhileQueuedIsNeverCommitted(t *testing.T) {
	t.Parallel()
	r := &recorder{hold: make(chan struct{}), started: make(chan int, 10)}
	c := groupcommit.New(r.fn, groupcommit.Options{MaxConcurrent: 1})
	done := make(chan struct{})
	go func() { defer close(done); _, _ = c.Do(context.Background(), 1) }()
	<-r.started
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := c.Do(ctx, 2); errc <- err }()
	require.Eventually(t, func() bool { return c.Queued() == 1 }, 5*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	close(r.hold)
	<-done
	_, err := c.Do(context.Background(), 3)
	require.NoError(t, err)
	require.Equal(t, [][]int{{1}, {3}}, r.batches, "the abandoned item 2 reached no batch")
}

func TestACallTakenByABatchWaitsForItsAnswerEvenIfItsContextEnds(t *testing.T) {
	t.Parallel()
	r := &recorder{hold: make(chan struct{}), started: make(chan int, 1)}
	c := groupcommit.New(r.fn, groupcommit.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	type answer struct {
		v   int
		err error
	}
	ans := make(chan answer, 1)
	go func() { v, err := c.Do(ctx, 4); ans <- answer{v, err} }()
	<-r.started
	cancel()
	select {
	case a := <-ans:
		t.Fatalf("answered %v before its batch finished", a)
	case <-time.After(50 * time.Millisecond):
	}
	close(r.hold)
	a := <-ans
	require.NoError(t, a.err)
	require.Equal(t, 40, a.v)
}

func TestTheBatchContextHasTheEarliestDeadlineAndIgnoresCancellation(t *testing.T) {
	t.Parallel()
	got := make(chan time.Time, 1)
	gotErr := make(chan error, 1)
	c := groupcommit.New(func(ctx context.Context, items []int) []groupcommit.Result[int] {
		d, _ := ctx.Deadline()
		got <- d
		gotErr <- ctx.Err()
		return make([]groupcommit.Result[int], len(items))
	}, groupcommit.Options{Timeout: time.Hour})
	deadline := time.Now().Add(time.Minute)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	_, err := c.Do(ctx, 1)
	require.NoError(t, err)
	require.WithinDuration(t, deadline, <-got, time.Millisecond)
	require.NoError(t, <-gotErr)
}

func TestAPanickingOrMiscountingBatchFailsEveryItemAndTheCommitterGoesOn(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	c := groupcommit.New(func(_ context.Context, items []int) []groupcommit.Result[int] {
		switch n.Add(1) {
		case 1:
			panic("boom")
		case 2:
			return nil
		}
		return make([]groupcommit.Result[int], len(items))
	}, groupcommit.Options{})
	_, err := c.Do(context.Background(), 1)
	require.ErrorContains(t, err, "boom")
	require.Regexp(t, `(?s)batch panicked: boom\ngoroutine \d+ .*groupcommit_test\.go`, err.Error(), "where it panicked")
	_, err = c.Do(context.Background(), 2)
	require.ErrorContains(t, err, "returned 0 results")
	_, err = c.Do(context.Background(), 3)
	require.NoError(t, err)
}

func TestADoneContextIsRefusedBeforeQueueing(t *testing.T) {
	t.Parallel()
	r := &recorder{}
	c := groupcommit.New(r.fn, groupcommit.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.Do(ctx, 1)
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, r.batches)
}

// Age is zero at idle, the wait of the oldest item not yet answered while a
// batch is held (the held batch's, older than the one queued behind it),
// and zero again once every item is answered.
func TestAgeIsTheOldestUnansweredWait(t *testing.T) {
	t.Parallel()
	r := &recorder{hold: make(chan struct{}), started: make(chan int, 4)}
	c := groupcommit.New(r.fn, groupcommit.Options{MaxConcurrent: 1})
	require.Zero(t, c.Age())
	var wg sync.WaitGroup
	before := time.Now()
	wg.Go(func() { _, _ = c.Do(context.Background(), 1) })
	<-r.started // item 1 is in the held batch
	time.Sleep(50 * time.Millisecond)
	wg.Go(func() { _, _ = c.Do(context.Background(), 2) })
	require.Eventually(t, func() bool { return c.Queued() == 1 }, 5*time.Second, time.Millisecond)
	age := c.Age()
	require.GreaterOrEqual(t, age, 50*time.Millisecond, "the held batch's item (not the one just queued) has waited at least as long as the sleep")
	require.LessOrEqual(t, age, time.Since(before), "and no longer than since it was submitted")
	close(r.hold)
	wg.Wait()
	require.Zero(t, c.Age())
	require.Zero(t, c.Queued())
}
