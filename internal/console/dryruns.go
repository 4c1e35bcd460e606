package console

import (
	"net/url"
	"sync"
	"time"
)

// dryRuns are the dry runs this console showed, by their form's nonce: a
// replay runs only against one of them, as the server recorded it (its
// pinned selection, its count) and only for the operator it was shown to.
// What the browser sends back for those fields is ignored, so a forged or
// edited form (expect=1000000 with no dry run ever loaded) replays nothing.
// They live in memory, for dryRunTTL, at most maxDryRuns of them (the
// oldest forgotten first): a worker restart asks for the dry run again.
type dryRuns struct {
	mu    sync.Mutex
	byKey map[string]dryRun
	order []string // nonces, oldest first
}

type dryRun struct {
	actor string
	// form is what the confirmed replay takes: the pinned filter, within,
	// expect (the count), nonce.
	form url.Values
	at   time.Time
}

const (
	dryRunTTL  = time.Hour
	maxDryRuns = 1000
)

func newDryRuns() *dryRuns { return &dryRuns{byKey: map[string]dryRun{}} }

// record remembers the dry run shown to actor under nonce.
func (d *dryRuns) record(nonce, actor string, form url.Values) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for len(d.order) >= maxDryRuns {
		delete(d.byKey, d.order[0])
		d.order = d.order[1:]
	}
	d.byKey[nonce] = dryRun{actor: actor, form: form, at: time.Now()}
	d.order = append(d.order, nonce)
}

// get returns the dry run of nonce while it is fresh.
func (d *dryRuns) get(nonce string) (dryRun, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.byKey[nonce]
	if !ok || time.Since(r.at) > dryRunTTL {
		return dryRun{}, false
	}
	return r, true
}

// forget drops the dry run of nonce: it was confirmed, and is not run again.
func (d *dryRuns) forget(nonce string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.byKey, nonce) // its nonce leaves order when it is the oldest
}
