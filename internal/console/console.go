package console

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxhq/inbox/internal/admin"
	"github.com/inboxhq/inbox/internal/envelope"
)

// Prefix is the path the console is served under.
const Prefix = "/console"

//go:embed templates/*.html static/*
var assets embed.FS

// Options configure New.
type Options struct {
	// Pool records replays (a role that may: inbox_admin) and reads what
	// follows them (the Replays pages).
	Pool *pgxpool.Pool
	// ReadPool, when set, serves the other pages' reads (the list, an
	// envelope, Failures, a replay's dry run): a hot standby of Pool's
	// database, so that heavy reads do not load the primary. Every page
	// says how far behind the primary it is. Nil: Pool serves them.
	ReadPool *pgxpool.Pool
	// Jobs inserts replay jobs: the worker's River client.
	Jobs admin.JobInserter
	// Actor returns the signed-in operator of an authenticated request; it
	// is stored as the actor of the replays they start. Required.
	Actor func(*http.Request) string
	// RiverUI is the path River UI is served under ("/riverui"), or "" when
	// it is not: job ids then link nowhere.
	RiverUI string
	Logger  *slog.Logger
	// Context bounds replays started from the console: when it ends (the
	// worker stops), a running replay stops after its batch in flight rolls
	// back, as the CLI's does on ^C.
	Context context.Context
	// ReadOnly turns replay off: the pages say why (ReadOnlyReason) and
	// the replay form is not offered; a POST is refused with 403.
	ReadOnly       bool
	ReadOnlyReason string
	// MaxReplay is the most envelopes one replay from the console takes
	// (default DefaultMaxReplay): a dry run that counts more replays that
	// many, and the page says so. The CLI has no such ceiling.
	MaxReplay int
	// Supervisors may stop any operator's replay run; everyone else stops
	// only their own.
	Supervisors map[string]bool
}

// DefaultMaxReplay is Options.MaxReplay's default.
const DefaultMaxReplay = 10000

// Console serves the pages. Create it with New.
type Console struct {
	opts  Options
	key   []byte // CSRF tokens' HMAC key, random per process
	pages map[string]*template.Template
	runs  *runs
	dry   *dryRuns
	mux   *http.ServeMux
}

// New returns the console. Mount it at Prefix+"/" behind authentication.
func New(opts Options) (*Console, error) {
	if opts.Pool == nil || opts.Jobs == nil || opts.Actor == nil {
		return nil, errors.New("console: Pool, Jobs and Actor are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Context == nil {
		opts.Context = context.Background()
	}
	if opts.MaxReplay <= 0 {
		opts.MaxReplay = DefaultMaxReplay
	}
	c := &Console{opts: opts, key: make([]byte, 32), pages: map[string]*template.Template{}, runs: newRuns(maxRuns), dry: newDryRuns()}
	if _, err := rand.Read(c.key); err != nil {
		return nil, err
	}
	for _, p := range []string{"overview", "envelopes", "envelope", "failures", "replay", "replays", "run", "resolve", "error"} {
		t, err := template.New("layout.html").Funcs(funcs(opts.RiverUI)).ParseFS(assets, "templates/layout.html", "templates/"+p+".html")
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", p, err)
		}
		c.pages[p] = t
	}
	static, err := fs.Sub(assets, "static")
	if err != nil {
		return nil, err
	}
	m := http.NewServeMux()
	m.Handle("GET "+Prefix+"/static/", http.StripPrefix(Prefix+"/static/", http.FileServerFS(static)))
	m.HandleFunc("GET "+Prefix+"/{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix+"/envelopes", http.StatusFound)
	})
	m.HandleFunc("GET "+Prefix+"/overview", c.overview)
	m.HandleFunc("GET "+Prefix+"/envelopes", c.list)
	m.HandleFunc("GET "+Prefix+"/envelopes/{id}", c.envelope)
	m.HandleFunc("POST "+Prefix+"/envelopes/{id}/resolve", c.resolveOne(false))
	m.HandleFunc("POST "+Prefix+"/envelopes/{id}/unresolve", c.resolveOne(true))
	m.HandleFunc("GET "+Prefix+"/resolve", c.resolvePreview)
	m.HandleFunc("POST "+Prefix+"/resolve", c.resolveMany)
	m.HandleFunc("GET "+Prefix+"/failures", c.failures)
	m.HandleFunc("GET "+Prefix+"/replay", c.preview)
	m.HandleFunc("POST "+Prefix+"/replay", c.replay)
	m.HandleFunc("GET "+Prefix+"/replays", c.replays)
	m.HandleFunc("GET "+Prefix+"/replays/{run}", c.run)
	m.HandleFunc("POST "+Prefix+"/replays/{run}/stop", c.stopRun)
	m.HandleFunc("GET "+Prefix+"/jobs/{id}", c.job)
	m.HandleFunc("GET "+Prefix+"/search", c.search)
	m.HandleFunc(Prefix+"/", func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusNotFound, errors.New("no such page"))
	})
	c.mux = m
	return c, nil
}

// pageTimeout bounds one request's work (its queries are canceled after).
const pageTimeout = 30 * time.Second

// ServeHTTP sets the security headers every response carries, refuses what
// another site's page asks for, and serves r.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	if strings.HasPrefix(r.URL.Path, Prefix+"/static/") {
		h.Set("Cache-Control", "private, max-age=3600") // the stylesheet and icon: no data in them
	} else {
		h.Set("Cache-Control", "no-store")
	}
	// A cross-site GET is served only as a top-level navigation (a link an
	// operator followed): another site's <img> or fetch cannot make the
	// browser run searches with its cached credentials. State-changing
	// requests never get here cross-site (the guard refuses them).
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" && (r.Header.Get("Sec-Fetch-Mode") != "navigate" || r.Header.Get("Sec-Fetch-Dest") != "document") {
		http.Error(w, "cross-site request refused", http.StatusForbidden)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
	defer cancel()
	c.mux.ServeHTTP(w, r.WithContext(ctx))
}

// page is what every template gets.
type page struct {
	Title    string
	Nav      string
	Actor    string
	RiverUI  string
	ReadOnly string // why replay is off, "" when it is on
	// Standby says the pages read a standby, and how far behind it is;
	// "" when they read the primary.
	Standby string
	Data    any
}

// render executes page name with data; a template error is logged and
// answered 500 (the page so far is discarded: it is rendered to a buffer).
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name, title string, data any) {
	var b bytes.Buffer
	p := page{Title: title, Nav: name, Actor: c.opts.Actor(r), RiverUI: c.opts.RiverUI, Data: data}
	if c.opts.ReadOnly {
		p.ReadOnly = c.opts.ReadOnlyReason
	}
	if c.opts.ReadPool != nil {
		p.Standby = c.standby(r.Context())
	}
	if err := c.pages[name].Execute(&b, p); err != nil {
		c.opts.Logger.Error("console: render", "page", name, "error", err)
		http.Error(w, "console: the page could not be rendered (logged)", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// reads is the pool the read-only pages read.
func (c *Console) reads() *pgxpool.Pool {
	if c.opts.ReadPool != nil {
		return c.opts.ReadPool
	}
	return c.opts.Pool
}

// standby describes ReadPool's database for the page header.
func (c *Console) standby(ctx context.Context) string {
	lag, err := admin.ReadLag(ctx, c.opts.ReadPool)
	switch {
	case err != nil:
		c.opts.Logger.Warn("console: read replication lag", "error", err)
		return "these pages read a standby whose lag could not be read (the worker's log has the error)"
	case !lag.Standby:
		return "these pages read a separate database (--console-read-database-url) that is not a standby"
	case lag.Behind == 0:
		return "these pages read a standby, caught up with the primary"
	default:
		return fmt.Sprintf("these pages read a standby, %.1f s behind the primary: what happened since is not shown yet", lag.Behind.Seconds())
	}
}

// fail answers status with err's message on the error page; a 5xx answers
// a generic message (the error, which may name the database's host and
// user, goes to the log only). A request its client gave up on is logged
// at debug level: nothing failed.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	msg := err.Error()
	switch {
	case r.Context().Err() != nil && errors.Is(err, r.Context().Err()):
		c.opts.Logger.Debug("console: request ended before its answer", "path", r.URL.Path, "error", err)
		msg = "the request took too long or was canceled; narrow the filter (a time window, a source) and try again"
	case status >= 500:
		c.opts.Logger.Error("console: request failed", "path", r.URL.Path, "error", err)
		msg = "the database query failed (the worker's log has the error); try again"
	}
	c.render(w, r, status, "error", http.StatusText(status), map[string]any{"Status": status, "Message": msg})
}

// statusOf maps an admin error, after the input was validated, to its HTTP
// status: input the checks refused 400, unknown ids 404, purged or
// resolved envelopes 409, an ended request 503, else 500.
func statusOf(err error) int {
	var notFound *admin.NotFoundError
	var purged *admin.PurgedError
	var resolved *admin.ResolvedError
	var input *admin.InputError
	switch {
	case errors.As(err, &input):
		return http.StatusBadRequest
	case errors.As(err, &notFound), errors.Is(err, envelope.ErrNotFound):
		return http.StatusNotFound
	case errors.As(err, &purged), errors.As(err, &resolved):
		return http.StatusConflict
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// csrfToken is the token of actor's forms: an HMAC of the actor under the
// process's key, so it is valid only for that operator and this process.
func (c *Console) csrfToken(actor string) string {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte("console-csrf\x00" + actor))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// checkCSRF reports whether r's form carries the token of its actor.
func (c *Console) checkCSRF(r *http.Request) bool {
	got := r.PostFormValue("csrf")
	want := c.csrfToken(c.opts.Actor(r))
	return got != "" && hmac.Equal([]byte(got), []byte(want))
}

// The filter's query parameters: the CLI's flag names with _ for -. The
// single ones take their first value as given; the repeatable ones take
// every value, split on newlines (a textarea gives one per line).
var (
	singleKeys   = []string{"source", "status", "event_type", "delivery_id", "cause", "since", "until", "max_id"}
	repeatedKeys = []string{"id", "field", "contains", "header"}
	filterKeys   = append(slices.Clone(repeatedKeys[:1]), append(slices.Clone(singleKeys), repeatedKeys[1:]...)...)
)

// filterInput reads admin.FilterInput from query parameters (filterKeys).
func filterInput(q url.Values) (admin.FilterInput, error) {
	q = filterQuery(q)
	in := admin.FilterInput{
		Source:     q.Get("source"),
		Status:     q.Get("status"),
		EventType:  q.Get("event_type"),
		DeliveryID: q.Get("delivery_id"),
		Cause:      q.Get("cause"),
		Since:      q.Get("since"),
		Until:      q.Get("until"),
		MaxID:      q.Get("max_id"),
		Contains:   q["contains"],
		Fields:     q["field"],
		Headers:    q["header"],
		IDStrings:  q["id"],
	}
	return in, nil
}

// lines splits each value on newlines and drops empty ones.
func lines(vs []string) []string {
	var out []string
	for _, v := range vs {
		for _, l := range strings.Split(v, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, l)
			}
		}
	}
	return out
}

// filterQuery keeps only the filter's parameters of q, as filterInput reads
// them: the query string that selects the same envelopes on another page,
// in the hidden fields of a form and in the CLI command shown.
func filterQuery(q url.Values) url.Values {
	out := url.Values{}
	for _, k := range singleKeys {
		if v := strings.TrimSpace(q.Get(k)); v != "" {
			out.Set(k, v)
		}
	}
	for _, k := range repeatedKeys {
		for _, v := range lines(q[k]) {
			out.Add(k, v)
		}
	}
	return out
}

// cliArgs renders a filter query as the CLI flags that select the same
// envelopes.
func cliArgs(q url.Values) string {
	var b strings.Builder
	for _, k := range filterKeys {
		for _, v := range q[k] {
			if k == "id" {
				b.WriteString(" " + strings.Join(strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' }), " "))
				continue
			}
			b.WriteString(" --" + strings.ReplaceAll(k, "_", "-") + " " + shellQuote(v))
		}
	}
	return b.String()
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/@=,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
