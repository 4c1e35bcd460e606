package backfill

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/inboxhq/inbox/internal/backfill/backfillspec"
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
	// HeartbeatEvery is how often a run records that its writer is alive
	// (default 30s); StaleAfter is how old a running run's heartbeat must
	// be for a resume to take it over (default 2m: its writer died).
	HeartbeatEvery, StaleAfter time.Duration
}

// ErrCannotResume is returned when a run cannot be resumed as asked: its
// Stripe accounts or its dry run differ from the request's.
var ErrCannotResume = errors.New("cannot resume")

// Request is one backfill run.
type Request struct {
	Source *config.Source
	// Since is the window's start: events created (GitHub: delivered) at or
	// after it.
	Since time.Time
	// Until is the window's end (zero: when the run starts).
	Until time.Time
	// DryRun lists what is missing and stores (or redelivers) nothing. It
	// still writes its backfill_run row. A resume must ask for what the run
	// was: a dry run resumed as a real one (or the reverse) is refused.
	DryRun bool
	// Actor is who runs it (backfill_run.actor).
	Actor string
	// Resume continues backfill_run Resume (same window, same row) from its
	// last recorded cursor instead of starting a new run.
	Resume int64
	// ProgressFunc, when set, is called after each page.
	ProgressFunc func(Progress)
}

// Validate checks, before anything is read or written, that req's source
// can be backfilled: its provider keeps a log to list (an error wrapping
// ErrUnsupported) and the source has a backfill section (ErrNotConfigured).
func (req Request) Validate() error {
	src := req.Source
	switch {
	case src == nil:
		return errors.New("no source")
	case src.Provider == provider.Shopify:
		return fmt.Errorf("%w source %q: %w", ErrUnsupported, src.Name, backfillspec.ErrNoDeliveryLog)
	case !backfillspec.Supported(src.Provider):
		return fmt.Errorf("%w source %q: provider %s keeps no event log to list (only stripe and github sources can be backfilled)", ErrUnsupported, src.Name, src.Provider)
	case src.Backfill == nil:
		return fmt.Errorf("%w for source %q in the config: add backfill: {api_key: ...} (stripe) or {token, repo, hook_id} (github); see docs/operations.md", ErrNotConfigured, src.Name)
	}
	return nil
}

// Progress is a run's state after a page.
type Progress struct {
	Pages, Listed, Found, Stored int
	// Oldest is the creation (GitHub: delivery) time of the page's oldest
	// item: how far back the run has come.
	Oldest time.Time
}

// Missing is one event with no envelope: the provider never delivered it,
// or has not yet (Retrying: it may still be retrying it).
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
	// Retrying is true for an event created within the provider's retry
	// window: not delivered yet, and the provider may still deliver it.
	Retrying bool `json:"retrying,omitempty"`
	// AckedNoEnvelope is true for a GitHub delivery GitHub saw answered
	// 2xx that has no envelope: something other than ingest answered the
	// hook's URL (misrouting), or its envelope was deleted.
	AckedNoEnvelope bool `json:"acked_no_envelope,omitempty"`
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
	// Found is how many of those have no envelope (GitHub: whatever
	// status GitHub saw): missing from the inbox, the whole run's.
	Found int `json:"found"`
	// Retrying and NeverDelivered split this attempt's Found: events
	// created within the provider's retry window (provider.RetryWindow),
	// which it may still be retrying (stored now anyway; its late webhook
	// is a duplicate), and older ones it gave up on. GitHub never retries.
	Retrying       int `json:"missing_retrying"`
	NeverDelivered int `json:"never_delivered"`
	// Stored is how many this run stored (Stripe) or had redelivered
	// (GitHub); 0 in a dry run.
	Stored int `json:"stored"`
	// Raced is how many of Found a webhook stored first (Stripe).
	Raced int `json:"raced"`
	// PriorFound and PriorStored are the run's Found and Stored before
	// this attempt (a resumed run's counts are the whole run's): Found -
	// PriorFound is this attempt's.
	PriorFound  int `json:"prior_found,omitempty"`
	PriorStored int `json:"prior_stored,omitempty"`
	// AckedMissing is how many of Found GitHub saw answered 2xx although
	// no envelope holds them (GitHub): likely misrouting, see Missing.
	AckedMissing int `json:"acked_missing"`
	// Refused is how many listed events were refused, never stored
	// (Stripe: livemode disagrees with the key's mode).
	Refused int `json:"refused"`
	// RefusedIDs are the refused events' ids (at most MaxListed).
	RefusedIDs []string      `json:"refused_ids,omitempty"`
	Warnings   []string      `json:"warnings,omitempty"`
	Missing    []Missing     `json:"missing"`
	Status     string        `json:"status"`
	Cursor     string        `json:"cursor,omitempty"`
	Duration   time.Duration `json:"duration_ns"`
}

// Run backfills one source. It writes a backfill_run row first and
// records its counts and cursor after every page, so a run cut short
// (Ctrl-C, a provider that keeps failing) shows how far it came and can be
// resumed (Request.Resume). The returned Result is valid when RunID is set,
// also with an error.
func (r *Runner) Run(ctx context.Context, req Request) (Result, error) {
	if err := req.Validate(); err != nil {
		return Result{}, err
	}
	src := req.Source
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	start := time.Now()
	row := runRow{Source: src.Name, Provider: src.Provider, Actor: req.Actor, DryRun: req.DryRun, Since: req.Since, Until: req.Until}
	if row.Until.IsZero() {
		row.Until = now()
	}
	accounts := stripeAccounts(src)
	if src.Provider == provider.Stripe {
		row.Accounts = accounts
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
			return Result{}, fmt.Errorf("backfill run %d is of a %s source: start a new run with --since (it lists the window again and redelivers only what is still missing)", row.ID, row.Provider)
		}
		if row.DryRun != req.DryRun {
			if row.DryRun {
				return Result{}, fmt.Errorf("%w backfill run %d: it is a dry run, resumed without dry run (which would store); resume it as a dry run, or start a new run", ErrCannotResume, row.ID)
			}
			return Result{}, fmt.Errorf("%w backfill run %d: it stores, resumed as a dry run; resume it without dry run, or start a new dry run", ErrCannotResume, row.ID)
		}
		if !slices.Equal(row.Accounts, accounts) {
			return Result{}, fmt.Errorf("%w backfill run %d: it lists the Stripe accounts %q and the config now has %q: resuming would skip or mislist accounts; start a new run", ErrCannotResume, row.ID, row.Accounts, accounts)
		}
		if err := claimRun(ctx, r.Store.Pool(), &row, req.Actor, cmp.Or(r.StaleAfter, 2*time.Minute)); err != nil {
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
	// The heartbeat shows the run's writer alive, so no resume takes the
	// row over; a heartbeat finding the row claimed by another stops the run.
	runCtx, stopRun := context.WithCancelCause(ctx)
	beatDone := make(chan struct{})
	go func() {
		defer close(beatDone)
		t := time.NewTicker(cmp.Or(r.HeartbeatEvery, 30*time.Second))
		defer t.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-t.C:
				if err := heartbeat(runCtx, r.Store.Pool(), &row); errors.Is(err, ErrClaimed) {
					stopRun(err)
					return
				}
			}
		}
	}()
	defer func() { stopRun(nil); <-beatDone }()
	res := Result{RunID: row.ID, Source: row.Source, Provider: row.Provider, DryRun: row.DryRun, Since: row.Since, Until: row.Until,
		PriorFound: row.Found, PriorStored: row.Stored}
	st := &runState{r: r, req: req, row: &row, res: &res}
	var err error
	switch src.Provider {
	case provider.Stripe:
		err = st.stripe(runCtx)
	case provider.GitHub:
		err = st.github(runCtx)
	}
	if cause := context.Cause(runCtx); err != nil && errors.Is(cause, ErrClaimed) {
		err = cause
	}
	stopRun(nil)
	<-beatDone
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
		"never_delivered", res.NeverDelivered, "missing_retrying", res.Retrying, "acked_missing", res.AckedMissing, "refused", res.Refused,
		"status", status, "duration", res.Duration}
	if err != nil {
		log.Warn("backfill stopped", append(attrs, "error", err)...)
		return res, fmt.Errorf("backfill run %d: %w", res.RunID, err)
	}
	if len(res.Warnings) > 0 {
		attrs = append(attrs, "warnings", res.Warnings)
	}
	if res.AckedMissing > 0 {
		log.Warn("backfill found deliveries the provider saw answered 2xx but with no envelope: check the hook's URL routes to ingest", attrs...)
	}
	if res.Found > 0 {
		log.Warn("backfill found events with no envelope (never delivered, or still within the provider's retry window)", attrs...)
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

// count counts m in Retrying or NeverDelivered.
func (s *runState) count(m Missing) {
	if m.Retrying {
		s.res.Retrying++
	} else {
		s.res.NeverDelivered++
	}
}

// retrying reports whether an event created at created may still be
// retried by the provider.
func (s *runState) retrying(created time.Time) bool {
	w := provider.RetryWindow(s.req.Source.Provider)
	return w > 0 && created.After(s.now().Add(-w))
}

func (s *runState) now() time.Time {
	if s.r.Now != nil {
		return s.r.Now()
	}
	return time.Now()
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

// stripeAccounts is the accounts a Stripe source's run lists, in order:
// its Connect accounts, or "" (the key's own).
func stripeAccounts(src *config.Source) []string {
	if src.Provider != provider.Stripe || src.Backfill == nil {
		return nil
	}
	if len(src.Backfill.Accounts) == 0 {
		return []string{""}
	}
	return slices.Clone(src.Backfill.Accounts)
}

// stripeCursor is "account:event id" (account empty for the key's own).
func stripeCursor(account, after string) string { return account + ":" + after }

// stripe lists each configured account's events in the window, newest
// first, and stores those with no envelope.
func (s *runState) stripe(ctx context.Context) error {
	b := s.req.Source.Backfill
	client := NewStripeClient(b.APIURL, b.APIKey, b.APIVersion, s.clientOptions())
	client.Types = b.Events
	live, _ := backfillspec.StripeKeyLive(b.APIKey)
	if b.APIURL != "" && b.APIURL != StripeAPIURL {
		s.warn(fmt.Sprintf("api_url is %s, not Stripe's API: events listed there are stored as this source's", b.APIURL))
	}
	accounts := stripeAccounts(s.req.Source)
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
			if err := s.storeStripe(ctx, s.sameMode(s.inWindow(page.Events), live)); err != nil {
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

// sameMode drops, counting them in Result.Refused, the events whose
// livemode is not the API key's mode (or that have none): a live
// source's test events, or the reverse, are never stored.
func (s *runState) sameMode(events []StripeEvent, live bool) []StripeEvent {
	out := events[:0:0]
	refused := 0
	for _, e := range events {
		if e.Livemode == nil || *e.Livemode != live {
			refused++
			s.row.Listed++
			if len(s.res.RefusedIDs) < MaxListed {
				s.res.RefusedIDs = append(s.res.RefusedIDs, e.ID)
			}
			continue
		}
		out = append(out, e)
	}
	if refused > 0 && s.res.Refused == 0 {
		mode := "test"
		if live {
			mode = "live"
		}
		s.warn(fmt.Sprintf("refused events whose livemode is not the api_key's (%s mode): not stored; is the key the endpoint's account and mode?", mode))
	}
	s.res.Refused += refused
	return out
}

func (s *runState) warn(msg string) {
	s.res.Warnings = append(s.res.Warnings, msg)
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
		missing = append(missing, Missing{ID: e.ID, Type: e.Type, Created: e.Created, Account: e.Account, Retrying: s.retrying(e.Created)})
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
		s.count(m)
		s.list(m)
	}
	return nil
}

// github lists the hook's deliveries in the window and has GitHub
// redeliver, once per GUID, the latest attempt of each event that has no
// envelope. Ingest answers 2xx only once it stored the delivery, so the
// envelope table is the truth, not GitHub's status: a GUID GitHub saw
// answered 2xx but with no envelope (another service answered the hook's
// URL: misrouting) is redelivered too, and counted in Result.AckedMissing.
func (s *runState) github(ctx context.Context) error {
	b := s.req.Source.Backfill
	client := NewGitHubClient(b.APIURL, b.Token, cmp.Or(b.Repo, b.Org), b.HookID, s.clientOptions())
	type event struct {
		ok     bool
		latest GitHubDelivery // latest attempt: the one redelivered
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
			}
			if e.latest.ID == 0 || d.DeliveredAt.After(e.latest.DeliveredAt) {
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
	stored := map[string]bool{}
	if len(order) > 0 {
		var err error
		if stored, err = s.r.Store.Stored(ctx, s.req.Source.Name, order); err != nil {
			return err
		}
	}
	for _, guid := range order {
		if stored[guid] {
			continue // stored (whatever GitHub saw: a lost answer is not missing)
		}
		e := events[guid]
		d := e.latest
		var action string
		if d.Action != nil {
			action = *d.Action
		}
		typ := provider.GitHubEventType(d.Event, action)
		m := Missing{ID: guid, Type: typ, Created: d.DeliveredAt, DeliveryID: d.ID, AckedNoEnvelope: e.ok}
		s.row.Found++
		if e.ok {
			s.res.AckedMissing++
		}
		if !s.req.DryRun {
			if err := client.Redeliver(ctx, d.ID); err != nil {
				return err
			}
			s.row.Stored++
		}
		s.count(m)
		s.list(m)
	}
	return saveProgress(ctx, s.r.Store.Pool(), s.row)
}

// Window is the lookback of a source's periodic reconcile: its
// Backfill.Window, else the provider's retry window plus 8 hours, or 24
// hours for a provider that does not retry (GitHub).
func Window(src *config.Source) time.Duration {
	if src.Backfill != nil && src.Backfill.Window > 0 {
		return src.Backfill.Window
	}
	if w := provider.RetryWindow(src.Provider); w > 0 {
		return w + 8*time.Hour
	}
	return 24 * time.Hour
}
