package console

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"html/template"
	"log/slog"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/inboxhq/inbox/internal/admin"
)

// maxRuns is how many replay runs the console remembers (the oldest
// finished one is forgotten first), and maxRunning how many run at once.
const (
	maxRuns    = 50
	maxRunning = 2
)

// runs are the replays this process started from the console, with their
// progress. They live in memory only: what a run did is recorded in
// envelope_replay, batch by batch, as it commits.
type runs struct {
	mu      sync.Mutex
	max     int
	order   []*run // oldest first
	byID    map[string]*run
	byNonce map[string]*run // the dry-run form each run was started from
	running int
}

type run struct {
	ID, Actor, Reason string
	nonce             string
	Limit             int // the most it replays: the dry run's count, or lower
	Filter            url.Values
	Started           time.Time

	cancel context.CancelFunc // stops the run after its batch in flight rolls back

	mu       sync.Mutex
	stopped  bool
	progress admin.Progress
	result   *admin.ReplayResult
	err      error
	finished time.Time
}

// runView is a run's state at one moment, for a template.
type runView struct {
	ID, Actor, Reason string
	Limit             int
	Query             template.URL // encoded: safe in an href
	Selection         string       // the filter in words
	CLI               string
	Started           time.Time
	Finished          time.Time
	Done              bool
	Stopping          bool // asked to stop, not finished yet
	Progress          admin.Progress
	Result            *admin.ReplayResult
	Error             string
	Percent           int
}

func newRuns(n int) *runs {
	return &runs{max: n, byID: map[string]*run{}, byNonce: map[string]*run{}}
}

// errBusy is start's error when maxRunning replays already run.
var errBusy = errors.New("two replays are already running from this console: wait for one to finish (see Replays)")

// start runs fn in the background under ctx and returns its run at once.
// A form (nonce) already submitted returns the run it started, and
// started false: a second click or a resubmitted page replays nothing again.
func (rs *runs) start(ctx context.Context, logger *slog.Logger, nonce, actor, reason string, limit int, filter url.Values,
	fn func(context.Context, func(admin.Progress)) (admin.ReplayResult, error)) (r *run, started bool, err error) {
	id, err := randomID()
	if err != nil {
		return nil, false, err
	}
	rctx, cancel := context.WithCancel(ctx)
	r = &run{ID: id, nonce: nonce, Actor: actor, Reason: reason, Limit: limit, Filter: filter, Started: time.Now(), cancel: cancel}
	rs.mu.Lock()
	if prev, ok := rs.byNonce[nonce]; ok {
		rs.mu.Unlock()
		cancel()
		return prev, false, nil
	}
	if rs.running >= maxRunning {
		rs.mu.Unlock()
		cancel()
		return nil, false, errBusy
	}
	rs.running++
	rs.add(r)
	rs.mu.Unlock()
	go func() {
		defer cancel()
		res, err := fn(rctx, func(p admin.Progress) {
			r.mu.Lock()
			r.progress = p
			r.mu.Unlock()
		})
		r.mu.Lock()
		r.result, r.err, r.finished = &res, err, time.Now()
		r.mu.Unlock()
		// What the run did outlives this process only in envelope_replay and
		// here: the log says how it ended, with the command that resumes it.
		attrs := []any{"run", r.ID, "batch_id", res.BatchID, "actor", actor, "matched", res.Matched, "replayed", res.Replayed,
			"skipped", res.Skipped, "batches", res.Batches, "interrupted", res.Interrupted, "limit_reached", res.LimitReached}
		if err != nil {
			logger.Warn("console: replay ended early (the committed batches stay; run the replay again for the rest)", append(attrs, "error", err)...)
		} else {
			logger.Info("console: replay done", attrs...)
		}
		rs.mu.Lock()
		rs.running--
		rs.mu.Unlock()
	}()
	return r, true, nil
}

// startedFrom returns the id of the run a form (nonce) started, if this
// console still remembers it.
func (rs *runs) startedFrom(nonce string) (string, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r, ok := rs.byNonce[nonce]
	if !ok {
		return "", false
	}
	return r.ID, true
}

// randomID is 16 hex digits from crypto/rand: a run's id, a form's nonce.
func randomID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// add remembers r, forgetting the oldest finished run beyond max. Called
// with rs.mu held.
func (rs *runs) add(r *run) {
	rs.order = append(rs.order, r)
	rs.byID[r.ID] = r
	rs.byNonce[r.nonce] = r
	for len(rs.order) > rs.max {
		i := 0
		for ; i < len(rs.order)-1; i++ {
			if rs.order[i].view().Done {
				break
			}
		}
		delete(rs.byID, rs.order[i].ID)
		delete(rs.byNonce, rs.order[i].nonce)
		rs.order = append(rs.order[:i], rs.order[i+1:]...)
	}
}

// stop asks run id to stop; it reports whether there is such a run.
func (rs *runs) stop(id string) bool {
	rs.mu.Lock()
	r, ok := rs.byID[id]
	rs.mu.Unlock()
	if !ok {
		return false
	}
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	r.cancel()
	return true
}

func (rs *runs) get(id string) (runView, bool) {
	rs.mu.Lock()
	r, ok := rs.byID[id]
	rs.mu.Unlock()
	if !ok {
		return runView{}, false
	}
	return r.view(), true
}

// list returns the runs, newest first.
func (rs *runs) list() []runView {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	out := make([]runView, 0, len(rs.order))
	for i := len(rs.order) - 1; i >= 0; i-- {
		out = append(out, rs.order[i].view())
	}
	return out
}

func (r *run) view() runView {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := runView{ID: r.ID, Actor: r.Actor, Reason: r.Reason, Limit: r.Limit, Query: template.URL(r.Filter.Encode()), Selection: selection(r.Filter), CLI: "worker replay" + cliArgs(r.Filter) + " --limit " + strconv.Itoa(r.Limit) + " --reason " + shellQuote(r.Reason),
		Started: r.Started, Finished: r.finished, Done: !r.finished.IsZero(), Progress: r.progress, Result: r.result}
	v.Stopping = r.stopped && !v.Done
	if r.err != nil {
		v.Error = r.err.Error()
		if r.stopped && errors.Is(r.err, context.Canceled) {
			v.Error = "stopped on request (" + v.Error + ")"
		}
	}
	// Of what it may replay: the limit, or what matched at the start when
	// fewer did (skipped envelopes do not count against the limit).
	if most := min(r.Limit, v.Progress.Total); most > 0 {
		v.Percent = min(100, v.Progress.Replayed*100/most)
	}
	if v.Done && v.Error == "" {
		v.Percent = 100
	}
	return v
}
