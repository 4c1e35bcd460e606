package console

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inboxhq/inbox/internal/admin"
	"github.com/inboxhq/inbox/internal/bodydiff"
	"github.com/inboxhq/inbox/internal/cli"
	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/labels"
)

// pageSize is the list's page size, and maxPageSize the most a limit
// parameter asks for.
const (
	pageSize    = 50
	maxPageSize = 500
)

// form is the filter form's state: the values as typed, and the choices.
type form struct {
	Q        url.Values
	Statuses []envelope.Status
	Causes   []labels.Cause
}

func newForm(q url.Values) form {
	return form{
		Q:        q,
		Statuses: envelope.Statuses(),
		Causes:   labels.Causes,
	}
}

type listData struct {
	Form      form
	Error     string
	Envelopes []admin.Summary
	Query     template.URL // the filter's query string (encoded: safe in an href)
	NextQuery template.URL // the next page's, "" on the last
	Paged     bool         // this is not the first page
	// Tabs are the status tabs, counted when an index serves the filter.
	Tabs []statusTab
	// Resolvable: the filter selects failed envelopes and narrows them
	// (a source, cause, time...): "Resolve matching…" is offered.
	Resolvable bool
	// Matched counts every page's envelopes, up to maxCounted
	// (MatchedMore: more than that).
	Matched     int
	MatchedMore bool
	// Scan is what the page read (nil on an error).
	Scan *admin.Scan
	CLI  string
	// Refresh is the auto-refresh period in seconds (0: off, the default);
	// RefreshQuery the page's query with it toggled.
	Refresh      int
	RefreshQuery template.URL
}

// listRefresh is the list's auto-refresh period when turned on (?refresh=on):
// a meta refresh, no script.
const listRefresh = 10

// statusTab is one of the list's status tabs: the filter with that status
// (all: with none), and how many it selects when counted.
type statusTab struct {
	Label   string
	Query   template.URL
	Current bool
	Count   string
	Counted bool
}

// maxCounted bounds the list's count of matches: a count costs what it
// reads, and "more than 10000" is what an operator needs to know beyond.
const maxCounted = 10000

func (c *Console) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	fq := filterQuery(q)
	d := listData{Form: newForm(q), Query: template.URL(fq.Encode()), CLI: "worker envelopes list" + cliArgs(fq)}
	toggled := filterQuery(q)
	if q.Get("refresh") == "on" {
		d.Refresh = listRefresh
	} else {
		toggled.Set("refresh", "on")
	}
	d.RefreshQuery = template.URL(toggled.Encode())
	in, err := filterInput(q)
	var f admin.Filter
	if err == nil {
		f, err = in.Parse()
	}
	limit, before, perr := paging(q)
	if err == nil {
		err = perr
	}
	if err != nil {
		d.Error = err.Error()
		c.render(w, r, http.StatusBadRequest, "envelopes", "Envelopes", d)
		return
	}
	res, err := admin.List(r.Context(), c.reads(), admin.ListRequest{Filter: f, Limit: limit, BeforeID: before, CountUpTo: maxCounted, ByStatus: true})
	if err != nil {
		c.fail(w, r, statusOf(err), err)
		return
	}
	d.Envelopes, d.Paged = res.Envelopes, before > 0
	d.Resolvable = f.Status == envelope.StatusFailed && f.NarrowsBeyondStatus()
	// The status tabs: the filter with each status, and with none.
	all := maps.Clone(fq)
	all.Del("status")
	d.Tabs = append(d.Tabs, statusTab{Label: "all", Query: template.URL(all.Encode()), Current: fq.Get("status") == ""})
	// A search no index serves has no counts: its tabs show none.
	counts := map[envelope.Status]admin.StatusCount{}
	for _, sc := range res.ByStatus {
		counts[sc.Status] = sc
	}
	for _, st := range envelope.Statuses() {
		tq := maps.Clone(all)
		tq.Set("status", string(st))
		tab := statusTab{Label: string(st), Query: template.URL(tq.Encode()), Current: fq.Get("status") == string(st)}
		if sc, ok := counts[st]; ok {
			tab.Count, tab.Counted = strconv.Itoa(sc.N), true
			if sc.More {
				tab.Count += "+"
			}
		}
		d.Tabs = append(d.Tabs, tab)
	}
	d.Matched, d.MatchedMore, d.Scan = res.Matched, res.MatchedMore, &res.Scan
	if res.NextBeforeID != nil {
		next := filterQuery(q)
		next.Set("before", strconv.FormatInt(*res.NextBeforeID, 10))
		if limit != pageSize {
			next.Set("limit", strconv.Itoa(limit))
		}
		d.NextQuery = template.URL(next.Encode())
	}
	c.render(w, r, http.StatusOK, "envelopes", "Envelopes", d)
}

// paging reads the list's limit and before cursor.
func paging(q url.Values) (limit int, before int64, err error) {
	limit = pageSize
	if s := q.Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 || limit > maxPageSize {
			return 0, 0, &admin.InputError{Field: "limit", Err: fmt.Errorf("%q: want 1 to %d", s, maxPageSize)}
		}
	}
	if s := q.Get("before"); s != "" {
		if before, err = strconv.ParseInt(s, 10, 64); err != nil || before < 1 {
			return 0, 0, &admin.InputError{Field: "before", Err: fmt.Errorf("%q is not an envelope id", s)}
		}
	}
	return limit, before, nil
}

// maxDuplicateTimes is how many duplicates' arrival times the envelope page
// lists.
const maxDuplicateTimes = 50

type envelopeData struct {
	D          *admin.Detail
	Headers    []header
	Body       string // pretty JSON, or as stored
	BodyView   string // "pretty", "raw" or "base64"
	Pretty     bool   // the body is JSON (a pretty view exists)
	Result     string
	Duplicates []time.Time
	Conflicts  []conflictView
	// ConflictsTotal counts them all; Conflicts holds the first
	// maxConflictRows (an envelope resent 3,000 times with other bodies
	// made a 2.7 MB page).
	ConflictsTotal int
	CLI            string
	// CSRF is the resolve form's token.
	CSRF string
	// ResolveError is why the last resolve was refused (a missing reason).
	ResolveError string
}

type header struct{ Name, Value string }

type conflictView struct {
	admin.Conflict
	Headers []header
	Diff    []bodydiff.Line
	// Note says why there is no diff (a body dropped by retention, too
	// large to compare).
	Note string
}

func (c *Console) envelope(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		c.fail(w, r, http.StatusBadRequest, fmt.Errorf("%q is not an envelope id", r.PathValue("id")))
		return
	}
	det, err := admin.Show(r.Context(), c.reads(), id, admin.ShowOptions{CompareConflicts: maxConflictDiffs})
	if err != nil {
		c.fail(w, r, statusOf(err), err)
		return
	}
	d := envelopeData{D: det, Headers: displayHeaders(det.Envelope.Headers), CLI: fmt.Sprintf("worker envelopes show %d", id),
		CSRF: c.csrfToken(c.opts.Actor(r)), ResolveError: r.URL.Query().Get("resolve_error")}
	stored := storedBody(&det.Envelope)
	view := r.URL.Query().Get("body")
	switch {
	case det.Envelope.Body == nil:
	case det.Envelope.BodyEncoding == admin.BodyBase64:
		d.Body, d.BodyView = *det.Envelope.Body, "base64"
	default:
		pretty, ok := prettyJSON(stored)
		d.Pretty = ok
		if ok && view != "raw" {
			d.Body, d.BodyView = pretty, "pretty"
		} else {
			d.Body, d.BodyView = *det.Envelope.Body, "raw"
		}
	}
	if len(det.Envelope.Result) > 0 {
		d.Result, _ = prettyJSON(det.Envelope.Result)
	}
	if d.Duplicates, err = envelope.DuplicateTimes(r.Context(), c.reads(), id, maxDuplicateTimes); err != nil {
		c.fail(w, r, statusOf(err), err)
		return
	}
	d.ConflictsTotal = len(det.Conflicts)
	for i, cf := range det.Conflicts {
		if i >= maxConflictRows {
			break
		}
		v := conflictView{Conflict: cf, Headers: displayHeaders(cf.Headers)}
		if i >= maxConflictDiffs {
			v.Note = fmt.Sprintf("not compared here: only the first %d conflicts are (the SQL below shows every one)", maxConflictDiffs)
			d.Conflicts = append(d.Conflicts, v)
			continue
		}
		cd := det.ConflictDiffs[i]
		v.Diff, v.Note = cd.Diff, cd.Note
		if v.Note == bodydiff.NoteTooLarge {
			v.Note += ": see the SQL below"
		}
		d.Conflicts = append(d.Conflicts, v)
	}
	c.render(w, r, http.StatusOK, "envelope", fmt.Sprintf("Envelope %d", id), d)
}

// maxConflictDiffs is how many of an envelope's conflicts its page diffs,
// and maxConflictRows how many it lists (the SQL it shows lists them all).
const (
	maxConflictDiffs = 5
	maxConflictRows  = 50
)

// storedBody is the envelope's raw body bytes, nil when purged.
func storedBody(e *admin.EnvelopeDetail) []byte {
	if e.Body == nil {
		return nil
	}
	if e.BodyEncoding == admin.BodyBase64 {
		b, err := base64.StdEncoding.DecodeString(*e.Body)
		if err != nil {
			return nil
		}
		return b
	}
	return []byte(*e.Body)
}

// prettyJSON indents b when it is JSON.
func prettyJSON(b []byte) (string, bool) {
	var out bytes.Buffer
	if !json.Valid(b) || json.Indent(&out, b, "", "  ") != nil {
		return string(b), false
	}
	return out.String(), true
}

// credentialNames are parts of header names whose values are redacted on
// display, in case a header was stored that ingest did not know to redact.
var credentialNames = []string{"signature", "sig", "authorization", "auth", "secret", "token", "cookie", "session", "hmac", "password", "api-key", "apikey", "api_key", "credential"}

// displayHeaders sorts headers by name and redacts credentials' values.
func displayHeaders(h map[string]string) []header {
	out := make([]header, 0, len(h))
	for k, v := range h {
		lk := strings.ToLower(k)
		for _, c := range credentialNames {
			if strings.Contains(lk, c) {
				v = "[redacted]"
				break
			}
		}
		out = append(out, header{k, v})
	}
	slices.SortFunc(out, func(a, b header) int { return strings.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name)) })
	return out
}

// Windows of the failures page.
var windows = []struct {
	Name   string
	Span   time.Duration
	Bucket time.Duration
	SQL    string // the span as a PostgreSQL interval
}{
	{"1h", time.Hour, 5 * time.Minute, "1 hour"},
	{"24h", 24 * time.Hour, time.Hour, "24 hours"},
	{"7d", 7 * 24 * time.Hour, 6 * time.Hour, "7 days"},
}

type failuresData struct {
	Window  string
	Windows []string
	SQLSpan string
	Source  string
	Bucket  time.Duration
	Since   time.Time
	Causes  []envelope.CauseCount
	Max     int64 // the largest bucket, for the bars' scale
	Failed  int64
	CLI     string
}

func (c *Console) failures(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	name := q.Get("window")
	if name == "" {
		name = "24h"
	}
	buckets := 0
	d := failuresData{Window: name, Source: strings.TrimSpace(q.Get("source")), CLI: "worker stats"}
	for _, win := range windows {
		d.Windows = append(d.Windows, win.Name)
		if win.Name == name {
			d.Bucket, buckets, d.SQLSpan = win.Bucket, int(win.Span/win.Bucket), win.SQL
			// Bucket edges on whole buckets, so a reload does not shift them.
			d.Since = time.Now().Add(-win.Span).Truncate(win.Bucket).Add(win.Bucket)
		}
	}
	if d.Bucket == 0 {
		c.fail(w, r, http.StatusBadRequest, fmt.Errorf("window %q: want one of %s", name, strings.Join(d.Windows, ", ")))
		return
	}
	causes, err := envelope.Failures(r.Context(), c.reads(), envelope.FailureWindow{Since: d.Since, Bucket: d.Bucket, Buckets: buckets, Source: d.Source})
	if err != nil {
		c.fail(w, r, statusOf(err), err)
		return
	}
	d.Causes = causes
	for _, cc := range causes {
		d.Failed += cc.Failed
		for _, v := range cc.Attempts {
			d.Max = max(d.Max, v)
		}
	}
	c.render(w, r, http.StatusOK, "failures", "Failures", d)
}

type previewData struct {
	Form  form
	Query template.URL
	// Selection is the filter in words (what the replay would take).
	Selection string
	Hidden    []header // the filter as hidden inputs
	DryRun    *admin.DryRunResult
	Error     string
	Reason    string
	Limit     string
	CSRF      string
	CLI       string
	SingleID  int64 // the one envelope asked for by id, 0 otherwise
	ByStatus  []statusN
	Done      int // matches that are done: their replay re-runs handlers
	Pinned    int // how many ids the form names (0: pinned by max id and count)
	// ConfirmCLI is the CLI command of the confirmed replay: the pinned
	// selection and the dry run's count as its limit.
	ConfirmCLI string
	RiverUI    string
	Purged     bool
	NotFound   bool
	Unbounded  bool // the filter has no time bound: say so
	// MaxReplay is the console's ceiling per replay; OverCeiling says the
	// dry run counts more (the replay stops at the ceiling).
	MaxReplay   int
	OverCeiling bool
}

type statusN struct {
	Status envelope.Status
	N      int
}

// preview is the dry run of a replay, with the form that starts it.
func (c *Console) preview(w http.ResponseWriter, r *http.Request) {
	c.showPreview(w, r, r.URL.Query(), "", "", http.StatusOK)
}

func (c *Console) showPreview(w http.ResponseWriter, r *http.Request, q url.Values, reason, formErr string, status int) {
	fq := filterQuery(q)
	d := previewData{Form: newForm(fq), Query: template.URL(fq.Encode()), Selection: selection(fq), Reason: reason, Limit: q.Get("limit"), Error: formErr,
		CSRF: c.csrfToken(c.opts.Actor(r)), CLI: "worker replay --dry-run" + cliArgs(fq)}
	f, limit, err := replayInput(q)
	var limitErr *admin.InputError
	if errors.As(err, &limitErr) && limitErr.Field == "limit" {
		// A bad "at most" keeps the dry run and the form (and the reason
		// typed): it only asks for a number.
		q = maps.Clone(q)
		q.Del("limit")
		d.Limit = ""
		if d.Error == "" {
			d.Error = err.Error()
		}
		status = http.StatusBadRequest
		f, limit, err = replayInput(q)
	}
	if err != nil {
		d.Error = err.Error()
		c.render(w, r, http.StatusBadRequest, "replay", "Replay", d)
		return
	}
	if len(f.IDs) == 1 {
		d.SingleID = f.IDs[0]
	}
	d.Unbounded = len(f.IDs) == 0 && f.Since.IsZero() && f.Until.IsZero()
	res, err := admin.DryRun(r.Context(), c.reads(), f, limit)
	if err != nil {
		st := statusOf(err)
		if st >= 500 {
			c.fail(w, r, st, err)
			return
		}
		d.Error = err.Error()
		c.render(w, r, st, "replay", "Replay", d)
		return
	}
	d.DryRun = &res
	d.Done = res.ByStatus[envelope.StatusDone]
	for _, st := range envelope.Statuses() {
		if n := res.ByStatus[st]; n > 0 {
			d.ByStatus = append(d.ByStatus, statusN{st, n})
		}
	}
	// The form replays what this dry run saw: its relative bounds as the
	// instants they meant now, nothing stored after its newest match, and
	// at most as many envelopes as it counted.
	pinned := pin(fq, f, res)
	for _, k := range filterKeys {
		for _, v := range pinned[k] {
			d.Hidden = append(d.Hidden, header{k, v})
		}
	}
	nonce, err := randomID()
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	expect := min(res.WouldReplay, c.opts.MaxReplay) // the ceiling: the recorded count the replay takes
	d.MaxReplay, d.OverCeiling = c.opts.MaxReplay, res.WouldReplay > c.opts.MaxReplay
	d.Hidden = append(d.Hidden, header{"expect", strconv.Itoa(expect)}, header{"nonce", nonce})
	d.ConfirmCLI = "worker replay" + cliArgs(pinned) + " --limit " + strconv.Itoa(expect) + " --reason '…'"
	if len(res.ReplayIDs) > 0 {
		// Few enough to name: the replay takes exactly these.
		d.Pinned = len(res.ReplayIDs)
		d.Hidden = append(d.Hidden, header{"within", admin.JoinIDs(res.ReplayIDs, ",")})
		d.ConfirmCLI = "worker replay " + strings.ReplaceAll(admin.JoinIDs(res.ReplayIDs, ","), ",", " ") + " --reason '…'"
	}
	// The confirmed replay takes these fields as recorded here, not as
	// the browser sends them back.
	form := url.Values{}
	for _, h := range d.Hidden {
		form.Add(h.Name, h.Value)
	}
	c.dry.record(nonce, c.opts.Actor(r), form)
	c.render(w, r, status, "replay", "Replay", d)
}

// pin returns fq with f's relative bounds resolved at the dry run's clock
// and max_id set to its newest match (or kept, when lower).
func pin(fq url.Values, f admin.Filter, res admin.DryRunResult) url.Values {
	out := maps.Clone(fq) // Set replaces a key's values: fq's slices stay as they are
	for k, b := range map[string]admin.Bound{"since": f.Since, "until": f.Until} {
		if b.Ago != 0 {
			out.Set(k, b.Time(res.At).UTC().Format(time.RFC3339Nano))
		}
	}
	if res.MaxID > 0 && (f.MaxID == 0 || res.MaxID < f.MaxID) {
		out.Set("max_id", strconv.FormatInt(res.MaxID, 10))
	}
	return out
}

// replayInput parses a replay's filter and limit; an empty filter is
// refused as the CLI refuses it (replaying everything is not allowed).
func replayInput(q url.Values) (admin.Filter, int, error) {
	in, err := filterInput(q)
	if err != nil {
		return admin.Filter{}, 0, err
	}
	f, err := in.Parse()
	if err != nil {
		return f, 0, err
	}
	if f.IsEmpty() {
		return f, 0, errors.New("select envelopes by id or with at least one filter (replaying everything is not allowed)")
	}
	limit, err := limitInput(q)
	return f, limit, err
}

// limitInput reads the replay form's "at most" field: empty or 0 for no
// cap (the dry run's count caps it anyway).
func limitInput(q url.Values) (int, error) {
	s := strings.TrimSpace(q.Get("limit"))
	if s == "" {
		return 0, nil
	}
	limit, err := strconv.Atoi(s)
	if err != nil || limit < 0 {
		return 0, &admin.InputError{Field: "limit", Err: fmt.Errorf("%q: want a whole number, empty for the dry run's count", s)}
	}
	return limit, nil
}

// replay starts a replay: the CSRF token first, then the reason and the
// filter; the run continues in the background and the answer redirects to
// its progress page.
func (c *Console) replay(w http.ResponseWriter, r *http.Request) {
	if !c.acceptWrite(w, r, "replay", 1<<20) {
		return
	}
	q := r.PostForm
	reason := strings.TrimSpace(q.Get("reason"))
	// The selection, the count and the pinned ids are the dry run's as this
	// server recorded it for this operator; the browser adds only the
	// reason and a lower "at most".
	nonce := q.Get("nonce")
	if nonce == "" {
		c.showPreview(w, r, q, reason, "the form lacks its dry run's mark: review the dry run below and confirm again", http.StatusBadRequest)
		return
	}
	if id, ok := c.runs.startedFrom(nonce); ok {
		// Submitted again (a double click, the back button): its run.
		http.Redirect(w, r, Prefix+"/replays/"+id, http.StatusSeeOther)
		return
	}
	dry, ok := c.dry.get(nonce)
	if !ok {
		c.showPreview(w, r, q, reason, "this worker has no record of that dry run (it restarted, or the dry run is over an hour old): review the dry run below and confirm again", http.StatusBadRequest)
		return
	}
	if dry.actor != c.opts.Actor(r) {
		c.opts.Logger.Warn("console: replay refused: another operator's dry run", "remote", r.RemoteAddr, "actor", c.opts.Actor(r))
		c.fail(w, r, http.StatusForbidden, errors.New("that dry run was shown to another operator: run your own dry run and confirm it"))
		return
	}
	q = maps.Clone(dry.form)
	q.Set("reason", reason)
	if l := r.PostForm.Get("limit"); l != "" {
		q.Set("limit", l)
	}
	f, limit, err := replayInput(q)
	if err != nil {
		c.showPreview(w, r, q, reason, err.Error(), http.StatusBadRequest)
		return
	}

	if within := strings.TrimSpace(q.Get("within")); within != "" {
		if f.Within, err = admin.ParseIDs(within); err != nil {
			err = &admin.InputError{Field: "within", Err: err}
			c.showPreview(w, r, q, reason, err.Error(), http.StatusBadRequest)
			return
		}
	}
	actor := "console:" + c.opts.Actor(r)
	req := admin.ReplayRequest{Filter: f, Actor: actor, Reason: reason, Limit: limit}
	if err := req.Validate(); err != nil {
		c.showPreview(w, r, q, reason, err.Error(), http.StatusBadRequest)
		return
	}
	// Never more than the dry run counted (expect): the form pins its
	// selection, and this caps what could still enter it (an envelope
	// pending then, failed now).
	expect, problem := dryRunCount(q, "replay")
	if problem != "" {
		c.showPreview(w, r, q, reason, problem, http.StatusBadRequest)
		return
	}
	if req.Limit == 0 || expect < req.Limit {
		req.Limit = expect
	}
	run, started, err := c.runs.start(c.opts.Context, c.opts.Logger, nonce, actor, reason, req.Limit, filterQuery(q), func(ctx context.Context, progress func(admin.Progress)) (admin.ReplayResult, error) {
		req.ProgressFunc = progress
		return admin.Replay(ctx, c.opts.Pool, c.opts.Jobs, req)
	})
	if err != nil {
		c.showPreview(w, r, q, reason, err.Error(), http.StatusTooManyRequests)
		return
	}
	if started {
		c.dry.forget(nonce) // a dry run is confirmed once
		c.opts.Logger.Info("console: replay started", "run", run.ID, "actor", actor, "filter", cli.Bound(filterQuery(q).Encode()))
	}
	http.Redirect(w, r, Prefix+"/replays/"+run.ID, http.StatusSeeOther)
}

type replaysData struct {
	Runs     []runView
	Recorded []envelope.ReplayRun
}

// maxRecordedRuns is how many envelope_replay runs the replays page lists.
const maxRecordedRuns = 50

func (c *Console) replays(w http.ResponseWriter, r *http.Request) {
	recorded, err := envelope.RecentReplayRuns(r.Context(), c.opts.Pool, maxRecordedRuns)
	if err != nil {
		c.fail(w, r, statusOf(err), err)
		return
	}
	c.render(w, r, http.StatusOK, "replays", "Replays", replaysData{Runs: c.runs.list(), Recorded: recorded})
}

// errBadToken answers a state-changing request without the operator's form
// token.
var errBadToken = errors.New("the form's token is missing or not yours (it changes when the worker restarts): reload the page and submit again")

// errNoRun answers a run id this process does not know.
var errNoRun = errors.New("no such replay run in this worker (runs are kept in memory until it restarts; every replayed envelope is recorded in envelope_replay: see Replays)")

type runData struct {
	runView
	CSRF string
	// Outcome is what became of the run's envelopes since (done ones only).
	Outcome []envelope.StatusCount
}

func (c *Console) run(w http.ResponseWriter, r *http.Request) {
	v, ok := c.runs.get(r.PathValue("run"))
	if !ok {
		c.fail(w, r, http.StatusNotFound, errNoRun)
		return
	}
	d := runData{runView: v, CSRF: c.csrfToken(c.opts.Actor(r))}
	if v.Done && v.Result != nil && v.Result.BatchID != "" {
		var err error
		if d.Outcome, err = envelope.ReplayOutcome(r.Context(), c.opts.Pool, v.Result.BatchID); err != nil {
			c.fail(w, r, statusOf(err), err)
			return
		}
	}
	c.render(w, r, http.StatusOK, "run", "Replay run", d)
}

// stopRun stops a running replay: the batch in flight rolls back, the
// committed ones stay (as ^C does to the CLI's).
func (c *Console) stopRun(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, http.StatusBadRequest, errors.New("the form could not be read"))
		return
	}
	if !c.checkCSRF(r) {
		c.opts.Logger.Warn("console: stop refused: missing or wrong form token", "remote", r.RemoteAddr)
		c.fail(w, r, http.StatusForbidden, errBadToken)
		return
	}
	id := r.PathValue("run")
	v, ok := c.runs.get(id)
	if !ok {
		c.fail(w, r, http.StatusNotFound, errNoRun)
		return
	}
	if user := c.opts.Actor(r); v.Actor != "console:"+user && !c.opts.Supervisors[user] {
		c.opts.Logger.Warn("console: stop refused: another operator's run", "run", id, "actor", user, "run_actor", v.Actor)
		c.fail(w, r, http.StatusForbidden, errors.New("this replay is "+v.Actor+"'s: only they, or a supervisor (--console-supervisors), may stop it"))
		return
	}
	if !c.runs.stop(id) {
		c.fail(w, r, http.StatusNotFound, errNoRun)
		return
	}
	c.opts.Logger.Info("console: replay stop asked", "run", id, "actor", c.opts.Actor(r))
	http.Redirect(w, r, Prefix+"/replays/"+id, http.StatusSeeOther)
}

// job redirects to the envelope River job id processes, while the job
// exists: a finished envelope's job is deleted with its last attempt.
func (c *Console) job(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		c.fail(w, r, http.StatusBadRequest, fmt.Errorf("%q is not a job id", r.PathValue("id")))
		return
	}
	env, err := envelope.OfJob(r.Context(), c.reads(), id)
	if err != nil {
		if errors.Is(err, envelope.ErrNotFound) {
			c.fail(w, r, http.StatusNotFound, fmt.Errorf("job %d is not a live processing job: the worker deletes an envelope's job when it finishes the envelope (its attempts keep the job's id: search by envelope or delivery id)", id))
			return
		}
		c.fail(w, r, statusOf(err), err)
		return
	}
	http.Redirect(w, r, fmt.Sprintf("%s/envelopes/%d", Prefix, env), http.StatusFound)
}

// maxSearchTerm bounds the search box's input (a delivery id is at most a
// few hundred bytes).
const maxSearchTerm = 512

// search jumps to what the header's search box names: an envelope id, or a
// delivery id (the provider's event or message id) of any source. One
// envelope: its page. Several (one delivery id reused by two sources): the
// list of that delivery id. None: a 404 that says what was looked for.
func (c *Console) search(w http.ResponseWriter, r *http.Request) {
	term := strings.TrimSpace(r.URL.Query().Get("q"))
	switch {
	case term == "":
		http.Redirect(w, r, Prefix+"/envelopes", http.StatusFound)
		return
	case len(term) > maxSearchTerm:
		c.fail(w, r, http.StatusBadRequest, fmt.Errorf("a search of %d bytes: at most %d (an envelope id or a delivery id)", len(term), maxSearchTerm))
		return
	}
	ids, err := envelope.Find(r.Context(), c.reads(), term, 2)
	if err != nil {
		c.fail(w, r, statusOf(err), err)
		return
	}
	switch len(ids) {
	case 0:
		c.fail(w, r, http.StatusNotFound, fmt.Errorf("no envelope has the id, delivery id or Shopify event id %q (a delivery id past the retention window is gone with its envelope)", term))
	case 1:
		http.Redirect(w, r, fmt.Sprintf("%s/envelopes/%d", Prefix, ids[0]), http.StatusFound)
	default:
		http.Redirect(w, r, Prefix+"/envelopes?"+url.Values{"delivery_id": {term}}.Encode(), http.StatusFound)
	}
}

// overview is the inbox at a glance: what `worker stats` prints (admin.GetStats:
// the counters, the oldest pending envelope, replays of the last 24 h, failed
// envelopes by cause), each number linking to the envelopes it counts.
func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	st, err := admin.GetStats(r.Context(), c.reads())
	if err != nil {
		c.fail(w, r, statusOf(err), err)
		return
	}
	c.render(w, r, http.StatusOK, "overview", "Overview", st)
}

// resolveOne answers the envelope page's Resolve (undo: Un-resolve) form:
// the envelope's status moves from failed to resolved (or back), with the
// operator and the reason recorded in envelope_resolution, and the browser
// goes back to the page. A missing reason comes back to the page as a
// message; nothing changes.
func (c *Console) resolveOne(undo bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
		if err != nil || id < 1 {
			c.fail(w, r, http.StatusBadRequest, fmt.Errorf("%q is not an envelope id", r.PathValue("id")))
			return
		}
		if !c.acceptWrite(w, r, "resolve", 64<<10) {
			return
		}
		page := fmt.Sprintf("%s/envelopes/%d", Prefix, id)
		req := admin.ResolveRequest{Filter: admin.Filter{IDs: []int64{id}}, Actor: "console:" + c.opts.Actor(r),
			Reason: strings.TrimSpace(r.PostFormValue("reason")), Undo: undo}
		if err := req.Validate(); err != nil {
			http.Redirect(w, r, page+"?resolve_error="+url.QueryEscape(err.Error())+"#resolve", http.StatusSeeOther)
			return
		}
		res, err := admin.Resolve(r.Context(), c.opts.Pool, req)
		if err != nil {
			c.fail(w, r, statusOf(err), err)
			return
		}
		if res.Changed == 0 {
			action := "resolved"
			if undo {
				action = "un-resolved"
			}
			http.Redirect(w, r, page+"?resolve_error="+url.QueryEscape("nothing "+action+": the envelope's status changed since the page was shown")+"#resolve", http.StatusSeeOther)
			return
		}
		c.opts.Logger.Info("console: envelope "+res.Action+"d", "envelope_id", id, "actor", req.Actor, "batch_id", res.BatchID)
		http.Redirect(w, r, page+"#resolutions", http.StatusSeeOther)
	}
}

// resolveData is the bulk Resolve page: the dry run, then the form, or
// what a run changed.
type resolveData struct {
	Selection string
	Query     template.URL
	DryRun    *admin.ResolveResult
	Done      *admin.ResolveResult
	Hidden    []header
	CSRF      string
	Reason    string
	Error     string
	CLI       string
}

// resolvePreview shows how many failed envelopes a filter selects and the
// first few, and a form that resolves exactly what it saw (the filter,
// pinned at its newest match, at most its count) with a required reason.
func (c *Console) resolvePreview(w http.ResponseWriter, r *http.Request) {
	c.showResolve(w, r, filterQuery(r.URL.Query()), "", "", http.StatusOK)
}

func (c *Console) showResolve(w http.ResponseWriter, r *http.Request, fq url.Values, reason, formErr string, status int) {
	d := resolveData{Selection: selection(fq), Query: template.URL(fq.Encode()), CSRF: c.csrfToken(c.opts.Actor(r)),
		Reason: reason, Error: formErr, CLI: "worker envelopes resolve --dry-run" + cliArgs(fq)}
	f, err := resolveFilter(fq)
	if err != nil {
		d.Error = err.Error()
		c.render(w, r, http.StatusBadRequest, "resolve", "Resolve", d)
		return
	}
	res, err := admin.Resolve(r.Context(), c.reads(), admin.ResolveRequest{Filter: f, DryRun: true})
	if err != nil {
		if st := statusOf(err); st >= 500 {
			c.fail(w, r, st, err)
			return
		}
		d.Error = err.Error()
		c.render(w, r, http.StatusBadRequest, "resolve", "Resolve", d)
		return
	}
	d.DryRun = &res
	// The form resolves what this dry run saw: its relative times as the
	// instants they meant now, nothing stored after its newest match, at
	// most its count.
	pinned := maps.Clone(fq)
	pinned.Set("status", string(envelope.StatusFailed))
	for k, b := range map[string]admin.Bound{"since": f.Since, "until": f.Until} {
		if b.Ago != 0 {
			pinned.Set(k, b.Time(res.At).UTC().Format(time.RFC3339Nano))
		}
	}
	if res.MaxID > 0 {
		pinned.Set("max_id", strconv.FormatInt(res.MaxID, 10))
	}
	for _, k := range filterKeys {
		for _, v := range pinned[k] {
			d.Hidden = append(d.Hidden, header{k, v})
		}
	}
	d.Hidden = append(d.Hidden, header{"expect", strconv.Itoa(res.Matched)})
	c.render(w, r, status, "resolve", "Resolve", d)
}

// resolveFilter reads a bulk resolve's filter: any filter of the list,
// restricted to failed envelopes.
func resolveFilter(q url.Values) (admin.Filter, error) {
	in, err := filterInput(q)
	if err != nil {
		return admin.Filter{}, err
	}
	f, err := in.Parse()
	if err != nil {
		return f, err
	}
	if !f.NarrowsBeyondStatus() {
		return f, errors.New("select envelopes with a filter besides the status (a source, cause, event type or time): resolving every failed envelope at once is not allowed")
	}
	if f.Status != "" && f.Status != envelope.StatusFailed {
		return f, fmt.Errorf("status %q: only failed envelopes are resolved", f.Status)
	}
	f.Status = envelope.StatusFailed
	return f, nil
}

// resolveMany resolves what the form's dry run saw: its filter (pinned to
// its newest match), at most its count, with the reason, as the signed-in
// operator; then shows what changed.
func (c *Console) resolveMany(w http.ResponseWriter, r *http.Request) {
	if !c.acceptWrite(w, r, "resolve", 1<<20) {
		return
	}
	fq := filterQuery(r.PostForm)
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	f, err := resolveFilter(fq)
	if err != nil {
		c.showResolve(w, r, fq, reason, err.Error(), http.StatusBadRequest)
		return
	}
	expect, problem := dryRunCount(r.PostForm, "resolve")
	if problem != "" {
		c.showResolve(w, r, fq, reason, problem, http.StatusBadRequest)
		return
	}
	req := admin.ResolveRequest{Filter: f, Actor: "console:" + c.opts.Actor(r), Reason: reason, Limit: min(expect, c.opts.MaxReplay)}
	if err := req.Validate(); err != nil {
		c.showResolve(w, r, fq, reason, err.Error(), http.StatusBadRequest)
		return
	}
	res, err := admin.Resolve(r.Context(), c.opts.Pool, req)
	if err != nil {
		c.fail(w, r, statusOf(err), err)
		return
	}
	c.opts.Logger.Info("console: envelopes resolved", "changed", res.Changed, "actor", req.Actor, "batch_id", res.BatchID)
	c.render(w, r, http.StatusOK, "resolve", "Resolved", resolveData{Selection: selection(fq), Query: template.URL(fq.Encode()), Done: &res})
}

// acceptWrite reads a form that changes something (action: "replay",
// "resolve") and says whether to go on: the form read (at most maxBytes),
// the console not read-only, and the operator's form token. Otherwise it
// has answered (400, 403) and logged a bad token.
func (c *Console) acceptWrite(w http.ResponseWriter, r *http.Request, action string, maxBytes int64) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxBytes)
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, http.StatusBadRequest, errors.New("the form could not be read"))
		return false
	}
	if c.opts.ReadOnly {
		c.fail(w, r, http.StatusForbidden, errors.New(action+" is off in this console: "+c.opts.ReadOnlyReason))
		return false
	}
	if !c.checkCSRF(r) {
		c.opts.Logger.Warn("console: "+action+" refused: missing or wrong form token", "remote", r.RemoteAddr)
		c.fail(w, r, http.StatusForbidden, errBadToken)
		return false
	}
	return true
}

// dryRunCount reads the count a confirmed form carries from its dry run
// ("expect"): the most the run may take. problem says why the form cannot
// be run (no count, or nothing to action), "" when it can.
func dryRunCount(q url.Values, action string) (n int, problem string) {
	n, err := strconv.Atoi(q.Get("expect"))
	switch {
	case err != nil || n < 0:
		return 0, "the form lacks its dry run's count: review the dry run below and confirm again"
	case n == 0:
		return 0, "the dry run found nothing to " + action
	}
	return n, ""
}
