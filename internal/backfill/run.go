package backfill

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/inboxhq/inbox/internal/config"
	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/provider"
)

// ErrUnsupported is returned for a source whose provider keeps no log to
// backfill from (Shopify, Standard Webhooks senders, HMAC senders).
var ErrUnsupported = errors.New("cannot backfill")

// ErrNotConfigured is returned for a source with no backfill section.
var ErrNotConfigured = errors.New("no backfill section")

// Runner runs backfills. Its fields are read, never changed, by Run.
type Runner struct {
	// Store stores recovered events: the envelope store ingest uses.
	Store *envelope.Store
	// Client tunes the provider API clients (rate, retries, timeouts).
	Client ClientOptions
	// Now is the clock of the window (default time.Now).
	Now func() time.Time
	// Logger gets one line per run (default: discard). Credentials are
	// never logged.
	Logger *slog.Logger
}

// Request is one backfill run.
type Request struct {
	Source *config.Source
	// Since is the window's start: events created (GitHub: delivered) at or
	// after it.
	Since time.Time
	// Until is the window's end (zero: when the run starts).
	Until time.Time
	// DryRun lists what is missing and stores (or redelivers) nothing. It
	// still writes its backfill_run row.
	DryRun bool
	// Actor is who runs it (backfill_run.actor).
	Actor string
	// Resume continues backfill_run Resume (same window, same row) from its
	// last recorded cursor instead of starting a new run.
	Resume int64
	// ProgressFunc, when set, is called after each page.
	ProgressFunc func(Progress)
}

// Progress is a run's state after a page.
type Progress struct {
	Pages, Listed, Found, Stored int
	// Oldest is the creation (GitHub: delivery) time of the page's oldest
	// item: how far back the run has come.
	Oldest time.Time
}

// Missing is one event the provider never delivered (Stripe), or one
// delivery that failed and has no envelope (GitHub).
type Missing struct {
	ID      string    `json:"id"` // Stripe event id; GitHub delivery GUID
	Type    string    `json:"type"`
	Created time.Time `json:"created"`
	Account string    `json:"account,omitempty"`
	// EnvelopeID is the envelope that now holds it (Stripe, not dry run).
	EnvelopeID int64 `json:"envelope_id,omitempty"`
	// Raced is true when a webhook of the event was stored between the
	// lookup and the insert: a duplicate, stored once.
	Raced bool `json:"raced,omitempty"`
	// DeliveryID is the GitHub delivery asked to be redelivered.
	DeliveryID int64 `json:"delivery_id,omitempty"`
}

// MaxListed bounds Result.Missing; counts go on past it.
const MaxListed = 10000

// Result is what a run did.
type Result struct {
	RunID    int64     `json:"run_id"`
	Source   string    `json:"source"`
	Provider string    `json:"provider"`
	DryRun   bool      `json:"dry_run"`
	Since    time.Time `json:"since"`
	Until    time.Time `json:"until"`
	// Listed is how many events (GitHub: distinct delivery GUIDs) the
	// provider listed in the window.
	Listed int `json:"listed"`
	// Found is how many of those have no envelope: never delivered.
	Found int `json:"found"`
	// Stored is how many this run stored (Stripe) or had redelivered
	// (GitHub); 0 in a dry run.
	Stored int `json:"stored"`
	// Raced is how many of Found a webhook stored first (Stripe).
	Raced    int           `json:"raced"`
	Missing  []Missing     `json:"missing"`
	Status   string        `json:"status"`
	Cursor   string        `json:"cursor,omitempty"`
	Duration time.Duration `json:"duration_ns"`
}

// Run backfills one source. It writes a backfill_run row first and
// records its counts and cursor after every page, so a run cut short
// (Ctrl-C, a provider that keeps failing) shows how far it came and can be
// resumed (Request.Resume). The returned Result is valid when RunID is set,
// also with an error.
func (r *Runner) Run(ctx context.Context, req Request) (Result, error) {
	src := req.Source
	if !config.BackfillSupported(src.Provider) {
		if src.Provider == provider.Shopify {
			return Result{}, fmt.Errorf("%w source %q: %w", ErrUnsupported, src.Name, config.ErrNoDeliveryLog)
		}
		return Result{}, fmt.Errorf("%w source %q: provider %s keeps no event log to list (only stripe and github sources can be backfilled)", ErrUnsupported, src.Name, src.Provider)
	}
	if src.Backfill == nil {
		return Result{}, fmt.Errorf("%w for source %q in the config: add backfill: {api_key: ...} (stripe) or {token, repo, hook_id} (github); see docs/operations.md", ErrNotConfigured, src.Name)
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	start := time.Now()
	row := runRow{Source: src.Name, Provider: src.Provider, Actor: req.Actor, DryRun: req.DryRun, Since: req.Since, Until: req.Until}
	if row.Until.IsZero() {
		row.Until = now()
	}
	if req.Resume != 0 {
		var err error
		if row, err = loadRun(ctx, r.Store.Pool(), req.Resume); err != nil {
			return Result{}, err
		}
		if row.Source != src.Name {
			return Result{}, fmt.Errorf("backfill run %d is of source %q, not %q", row.ID, row.Source, src.Name)
		}
		if row.Status == StatusDone {
			return Result{}, fmt.Errorf("backfill run %d is done: nothing to resume", row.ID)
		}
		if row.Provider != provider.Stripe {
			return Result{}, fmt.Errorf("backfill run %d is of a %s source: start a new run (it lists the window again and redelivers only what is still missing)", row.ID, row.Provider)
		}
		req.DryRun = row.DryRun // a resumed run is what it was
		if err := saveProgress(ctx, r.Store.Pool(), &row); err != nil {
			return Result{}, err
		}
	} else {
		if row.Since.After(row.Until) {
			return Result{}, fmt.Errorf("since %s is after the window's end %s", row.Since.Format(time.RFC3339), row.Until.Format(time.RFC3339))
		}
		if err := startRun(ctx, r.Store.Pool(), &row); err != nil {
			return Result{}, err
		}
	}
	res := Result{RunID: row.ID, Source: row.Source, Provider: row.Provider, DryRun: row.DryRun, Since: row.Since, Until: row.Until}
	st := &runState{r: r, req: req, row: &row, res: &res}
	var err error
	switch src.Provider {
	case provider.Stripe:
		err = st.stripe(ctx)
	case provider.GitHub:
		err = st.github(ctx)
	}
	status, msg := StatusDone, ""
	switch {
	case err != nil && ctx.Err() != nil:
		status, msg = StatusInterrupted, ctx.Err().Error()
	case err != nil:
		status, msg = StatusFailed, err.Error()
	}
	if ferr := finishRun(ctx, r.Store.Pool(), &row, status, msg); ferr != nil && err == nil {
		err = ferr
	}
	res.Listed, res.Found, res.Stored, res.Cursor, res.Status = row.Listed, row.Found, row.Stored, row.Cursor, status
	res.Duration = time.Since(start)
	log := r.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	attrs := []any{"run_id", res.RunID, "source", res.Source, "provider", res.Provider, "dry_run", res.DryRun, "actor", row.Actor,
		"since", res.Since, "until", res.Until, "listed", res.Listed, "found", res.Found, "stored", res.Stored, "raced", res.Raced,
		"status", status, "duration", res.Duration}
	if err != nil {
		log.Warn("backfill stopped", append(attrs, "error", err)...)
		return res, fmt.Errorf("backfill run %d: %w", res.RunID, err)
	}
	if res.Found > 0 {
		log.Warn("backfill found events the provider never delivered", attrs...)
	} else {
		log.Info("backfill done", attrs...)
	}
	return res, nil
}

type runState struct {
	r     *Runner
	req   Request
	row   *runRow
	res   *Result
	pages int
}

func (s *runState) progress(oldest time.Time) {
	if s.req.ProgressFunc != nil {
		s.req.ProgressFunc(Progress{Pages: s.pages, Listed: s.row.Listed, Found: s.row.Found, Stored: s.row.Stored, Oldest: oldest})
	}
}

func (s *runState) list(m Missing) {
	if len(s.res.Missing) < MaxListed {
		s.res.Missing = append(s.res.Missing, m)
	}
}

func (s *runState) clientOptions() ClientOptions {
	opts := s.r.Client
	if rps := s.req.Source.Backfill.RequestsPerSecond; rps > 0 {
		opts.RequestsPerSecond = rps
	}
	return opts
}

// stripeCursor is "account:event id" (account empty for the key's own).
func stripeCursor(account, after string) string { return account + ":" + after }

// stripe lists each configured account's events in the window, newest
// first, and stores those with no envelope.
func (s *runState) stripe(ctx context.Context) error {
	b := s.req.Source.Backfill
	client := NewStripeClient(b.APIURL, b.APIKey, b.APIVersion, s.clientOptions())
	client.Types = b.Events
	accounts := b.Accounts
	if len(accounts) == 0 {
		accounts = []string{""}
	}
	resumeAcct, after, resuming := strings.Cut(s.row.Cursor, ":")
	for _, acct := range accounts {
		if resuming {
			if acct != resumeAcct {
				continue // done before the interruption
			}
			resuming = false
		} else {
			after = ""
		}
		for {
			page, err := client.ListEvents(ctx, acct, s.row.Since, s.row.Until, after)
			if err != nil {
				return err
			}
			s.pages++
			if len(page.Events) == 0 {
				break
			}
			if err := s.storeStripe(ctx, s.inWindow(page.Events)); err != nil {
				return err
			}
			after = page.Events[len(page.Events)-1].ID
			s.row.Cursor = stripeCursor(acct, after)
			if err := saveProgress(ctx, s.r.Store.Pool(), s.row); err != nil {
				return err
			}
			s.progress(page.Events[len(page.Events)-1].Created)
			if !page.HasMore {
				break
			}
		}
	}
	return nil
}

// inWindow drops events created outside the run's window, which the API
// was asked not to list (Stripe's own mock server lists them anyway).
func (s *runState) inWindow(events []StripeEvent) []StripeEvent {
	out := events[:0:0]
	for _, e := range events {
		if !e.Created.Before(s.row.Since.Truncate(time.Second)) && !e.Created.After(s.row.Until) {
			out = append(out, e)
		}
	}
	return out
}

// storeStripe stores a page's events that have no envelope, concurrently,
// so the store's group commit writes them in few transactions.
func (s *runState) storeStripe(ctx context.Context, events []StripeEvent) error {
	src := s.req.Source
	if len(events) == 0 {
		return nil
	}
	ids := make([]string, len(events))
	for i, e := range events {
		ids[i] = e.ID
	}
	present, err := s.r.Store.Stored(ctx, src.Name, ids)
	if err != nil {
		return err
	}
	var missing []Missing
	var bodies [][]byte
	for _, e := range events {
		if present[e.ID] {
			continue
		}
		missing = append(missing, Missing{ID: e.ID, Type: e.Type, Created: e.Created, Account: e.Account})
		bodies = append(bodies, e.Body())
	}
	// The page counts once it is done: a page cut short is listed again by
	// a resume, which then finds the events stored meanwhile present.
	stored := 0
	if !s.req.DryRun && len(missing) > 0 {
		var mu sync.Mutex
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(32)
		for i := range missing {
			g.Go(func() error {
				headers := map[string]string{}
				if missing[i].Account != "" {
					headers["Stripe-Account"] = missing[i].Account
				}
				ir, err := s.r.Store.Insert(gctx, envelope.NewDelivery{
					Source:        src.Name,
					Provider:      src.Provider,
					DeliveryID:    missing[i].ID,
					EventType:     missing[i].Type,
					Body:          bodies[i],
					Payload:       bodies[i],
					Headers:       headers,
					MaxAttempts:   src.MaxAttempts,
					Origin:        envelope.OriginBackfill,
					BackfillRunID: s.row.ID,
				})
				if err != nil {
					return fmt.Errorf("store event %s: %w", missing[i].ID, err)
				}
				mu.Lock()
				defer mu.Unlock()
				missing[i].EnvelopeID = ir.EnvelopeID
				if ir.Duplicate {
					missing[i].Raced = true
					s.res.Raced++
				} else {
					stored++
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			s.row.Found += stored
			s.row.Stored += stored
			return err
		}
	}
	s.row.Listed += len(events)
	s.row.Found += len(missing)
	s.row.Stored += stored
	for _, m := range missing {
		s.list(m)
	}
	return nil
}

// github lists the hook's deliveries in the window and has GitHub
// redeliver, once per GUID, the latest failed delivery of each event that
// was never answered 2xx and has no envelope.
func (s *runState) github(ctx context.Context) error {
	b := s.req.Source.Backfill
	client := NewGitHubClient(b.APIURL, b.Token, cmp.Or(b.Repo, b.Org), b.HookID, s.clientOptions())
	type event struct {
		ok     bool
		latest GitHubDelivery // latest failed attempt
	}
	events := map[string]*event{}
	var order []string
	cursor := ""
	for {
		page, next, err := client.ListDeliveries(ctx, cursor)
		if err != nil {
			return err
		}
		s.pages++
		older := false
		for _, d := range page {
			if d.DeliveredAt.Before(s.row.Since) {
				older = true
				continue
			}
			if d.DeliveredAt.After(s.row.Until) || d.GUID == "" {
				continue
			}
			e := events[d.GUID]
			if e == nil {
				e = &event{}
				events[d.GUID] = e
				order = append(order, d.GUID)
			}
			if d.OK() {
				e.ok = true
			} else if e.latest.ID == 0 || d.DeliveredAt.After(e.latest.DeliveredAt) {
				e.latest = d
			}
		}
		s.row.Listed = len(events)
		var oldest time.Time
		if len(page) > 0 {
			oldest = page[len(page)-1].DeliveredAt
		}
		s.progress(oldest)
		if older || next == "" || len(page) == 0 {
			break
		}
		cursor = next
	}
	var failed []string
	for _, guid := range order {
		if !events[guid].ok {
			failed = append(failed, guid)
		}
	}
	stored := map[string]bool{}
	if len(failed) > 0 {
		var err error
		if stored, err = s.r.Store.Stored(ctx, s.req.Source.Name, failed); err != nil {
			return err
		}
	}
	for _, guid := range failed {
		if stored[guid] {
			continue // stored, but the answer was lost: nothing missing
		}
		d := events[guid].latest
		typ := d.Event
		if d.Action != nil && *d.Action != "" {
			typ += "." + *d.Action
		}
		m := Missing{ID: guid, Type: typ, Created: d.DeliveredAt, DeliveryID: d.ID}
		s.row.Found++
		if !s.req.DryRun {
			if err := client.Redeliver(ctx, d.ID); err != nil {
				return err
			}
			s.row.Stored++
		}
		s.list(m)
	}
	return saveProgress(ctx, s.r.Store.Pool(), s.row)
}

// Window is the default lookback of a source's periodic reconcile.
func Window(src *config.Source) time.Duration {
	if src.Backfill != nil && src.Backfill.Window > 0 {
		return src.Backfill.Window
	}
	return cmp.Or(provider.RetryWindow(src.Provider)+8*time.Hour, 24*time.Hour)
}
