// Package config loads the sources file: which webhook sources exist, their
// provider, secrets and limits. ${VAR} in any value expands from the
// environment, so secrets stay out of the file. It must not import other
// packages of this module except provider.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/inboxhq/inbox/internal/forward"
	"github.com/inboxhq/inbox/internal/labels"
	"github.com/inboxhq/inbox/internal/provider"
)

// MaxMaxAttempts is the highest max_attempts a source may set: River's
// default max attempts (rivercommon.MaxAttemptsDefault), which every job
// that is not inserted by ingest carries.
const MaxMaxAttempts = 25

// DefaultMaxBodyBytes is the body limit of a source that sets none (1 MiB).
const DefaultMaxBodyBytes int64 = 1 << 20

// ReservedSourceName is the one valid-looking source name a source may not
// have: it is the metrics source label of requests to unconfigured sources
// (labels.UnknownSourceName), which a real source would be counted with.
const ReservedSourceName = labels.UnknownSourceName

// Config is the parsed sources file.
type Config struct {
	Sources map[string]*Source `yaml:"sources"`
}

// Source is one configured webhook endpoint, served at POST /webhooks/{Name}.
type Source struct {
	Name     string   `yaml:"-"`
	Provider string   `yaml:"provider"`
	Secrets  []string `yaml:"secrets"`
	// Tolerance bounds the age (and future skew) of a signed timestamp.
	Tolerance time.Duration `yaml:"tolerance"`
	// MaxBodyBytes overrides DefaultMaxBodyBytes.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MaxAttempts is how many times processing is tried before the envelope
	// fails; 0 means River's default (25), which is also the most: a replayed
	// or reconciled job is inserted with River's default, and the worker
	// applies the lower of the two, so a higher limit could not hold for it.
	MaxAttempts int `yaml:"max_attempts"`
	// Backoff bounds the wait between retries after a transient error:
	// exponential from Min, capped at Max, with jitter. Zero values keep
	// the worker's defaults.
	Backoff Backoff `yaml:"backoff"`
	// Throttle limits how many envelopes per second are processed per key
	// (merchant by default), across every worker process.
	Throttle *Throttle `yaml:"throttle"`
	// Forward sends verified deliveries on to internal HTTP endpoints.
	Forward []*forward.Destination `yaml:"forward"`
	// ReplayWindow is how long a delivery's signed body is remembered, for
	// providers whose signature does not cover the delivery id (GitHub,
	// Shopify, hmac with the id from a header): the same event type and body
	// under another id within it is a replay, answered 200 duplicate and
	// recorded. Zero: provider.DefaultReplayWindow (72 h).
	ReplayWindow time.Duration `yaml:"replay_window"`
	// ReplayCheck, when false, turns that recognition off for a sender
	// whose distinct events can have byte-identical bodies and event types
	// under different ids (each is then stored). Unset: on.
	ReplayCheck *bool `yaml:"replay_check"`
	// MaxAge bounds how long an envelope of the source may keep waiting
	// (snoozing: a refund for its payment) before it fails. Zero: the
	// worker's --max-age, raised to the provider's retry window (Stripe 3
	// days, Shopify 4 h, Standard Webhooks about 28 h) plus an hour.
	MaxAge time.Duration `yaml:"max_age"`
	// HMAC configures a source of provider "hmac": a generic HMAC sender
	// (signature header, algorithm, encoding, signed content, timestamp,
	// where the delivery id and event type are), or a preset of one
	// (slack, paddle, square). See provider.HMACConfig.
	HMAC *provider.HMACConfig `yaml:"hmac"`
	// EventType, for provider standard, is where the event type is when the
	// sender does not put it in the body's "type": {json: "status"},
	// {header: X-Event}. See provider.Field.
	EventType *provider.Field `yaml:"event_type"`
	// AccountID is the provider account the source's deliveries belong to
	// (a Stripe account id, acct_...): the ledger's merchant when the
	// payload names none, so that several sources of one account share one
	// ledger. Empty: the source name.
	AccountID string `yaml:"account_id"`
	// Backfill lets `worker backfill` (and, with Every, the periodic
	// reconcile) recover events the provider never delivered from its own
	// log: Stripe's events API, GitHub's hook deliveries. Shopify keeps no
	// such log. See docs/operations.md.
	Backfill *Backfill `yaml:"backfill"`
}

// Backfill is how a source's events are listed from the provider's API.
// Its credentials are ${VAR}-expanded like the secrets and never logged.
type Backfill struct {
	// APIKey is a Stripe secret or restricted key (events: read).
	APIKey string `yaml:"api_key"`
	// Accounts are Stripe Connect accounts (acct_...) whose events the
	// source receives: each is listed with a Stripe-Account header.
	// Empty: the key's own account.
	Accounts []string `yaml:"accounts"`
	// APIVersion, when set, is sent as Stripe-Version so events render as
	// the webhook endpoint renders them.
	APIVersion string `yaml:"api_version"`
	// Events are the Stripe event types the webhook endpoint is subscribed
	// to (its enabled events, at most 20 exact types, or one pattern with a
	// "*" wildcard such as "charge.*"): only those are listed. Set it to
	// exactly the endpoint's enabled events. Empty: every event of the
	// account, which for an endpoint subscribed to fewer types stores (as
	// ignored) and counts events it was never sent. Two backfilled Stripe
	// sources of one account (same account_id, or none) must both set
	// disjoint lists: config load refuses them otherwise.
	Events []string `yaml:"events"`
	// Token is a GitHub token allowed to read and redeliver the hook's
	// deliveries (repository webhooks: admin:repo_hook or fine-grained
	// "Webhooks: read and write").
	Token string `yaml:"token"`
	// Repo ("owner/name") and HookID name the GitHub repository webhook;
	// Org instead of Repo names an organization webhook.
	Repo   string `yaml:"repo"`
	Org    string `yaml:"org"`
	HookID int64  `yaml:"hook_id"`
	// APIURL overrides the provider's API base URL (GitHub Enterprise
	// Server: https://HOST/api/v3; tests: a local fake).
	APIURL string `yaml:"api_url"`
	// RequestsPerSecond bounds the request rate to the provider's API
	// (default 5: well inside Stripe's 25/s test mode and GitHub's limits).
	RequestsPerSecond float64 `yaml:"requests_per_second"`
	// Every turns on the periodic, leader-only reconcile: every this long
	// the worker backfills the last Window. Zero: off.
	Every time.Duration `yaml:"every"`
	// Window is how far back the reconcile looks (default: the provider's
	// retry window plus 8 hours: Stripe 80 h; GitHub, which never retries,
	// 24 h).
	Window time.Duration `yaml:"window"`
	// Lag keeps the reconcile off the most recent events, whose webhooks
	// may still be on their way (default 15m): they are counted as never
	// delivered only once older than this.
	Lag time.Duration `yaml:"lag"`
	// Timeout bounds one attempt of the periodic reconcile (default
	// DefaultReconcileTimeout), apart from the worker's --job-timeout for
	// processing; an attempt cut short is retried from its cursor.
	Timeout time.Duration `yaml:"timeout"`
}

// masked is what a set credential prints as.
const masked = "[REDACTED]"

func mask(v string) string {
	if v == "" {
		return ""
	}
	return masked
}

// redacted is b with its credentials masked.
func (b Backfill) redacted() backfillRedacted {
	b.APIKey, b.Token = mask(b.APIKey), mask(b.Token)
	return backfillRedacted(b)
}

// backfillRedacted is Backfill without its methods, so printing it does
// not recurse.
type backfillRedacted Backfill

// String implements fmt.Stringer: the section with api_key and token
// masked, so %v and %+v of it (or of a Source) print no credential.
func (b Backfill) String() string { return fmt.Sprintf("%+v", b.redacted()) }

// GoString implements fmt.GoStringer (%#v), masked like String.
func (b Backfill) GoString() string { return fmt.Sprintf("config.Backfill%+v", b.redacted()) }

// LogValue implements slog.LogValuer: the section's settings, api_key and
// token masked.
func (b Backfill) LogValue() slog.Value {
	r := b.redacted()
	return slog.GroupValue(
		slog.String("api_key", r.APIKey), slog.Any("accounts", r.Accounts), slog.String("api_version", r.APIVersion),
		slog.Any("events", r.Events), slog.String("token", r.Token), slog.String("repo", r.Repo), slog.String("org", r.Org),
		slog.Int64("hook_id", r.HookID), slog.String("api_url", r.APIURL), slog.Float64("requests_per_second", r.RequestsPerSecond),
		slog.Duration("every", r.Every), slog.Duration("window", r.Window), slog.Duration("lag", r.Lag), slog.Duration("timeout", r.Timeout),
	)
}

// DefaultReconcileTimeout is a reconcile attempt's default Timeout: under
// the worker's default --job-timeout (1m), so that enabling a reconcile does
// not delay the rescue of every processing job after a crash (River rescues
// all job kinds after one delay, which must exceed the longest timeout). An
// attempt cut short is retried from its cursor, up to 10 attempts; raise it
// for an account whose window holds more events than that lists (and
// --rescue-after follows it).
const DefaultReconcileTimeout = 50 * time.Second

// Backoff is a source's retry schedule.
type Backoff struct {
	Min time.Duration `yaml:"min"`
	Max time.Duration `yaml:"max"`
}

// Throttle is a per-key rate limit.
type Throttle struct {
	// PerSecond is the most envelopes per key processed in one second.
	PerSecond int `yaml:"per_second"`
	// Key is what is limited: ThrottleMerchant (default) or ThrottleSource.
	Key ThrottleKey `yaml:"key"`
}

// ThrottleKey is what a throttle limits.
type ThrottleKey string

// Throttle keys.
const (
	// ThrottleMerchant limits each merchant of the source (the ledger's
	// merchant rule) on its own.
	ThrottleMerchant ThrottleKey = "merchant"
	// ThrottleSource limits the source as a whole.
	ThrottleSource ThrottleKey = "source"
)

var (
	sourceName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	varRef     = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)
	accountID  = regexp.MustCompile(`^[[:graph:]]{1,255}$`)
)

// Load reads and validates the sources file at path. getenv resolves ${VAR}
// references (os.Getenv when nil); a reference to an unset or empty variable
// is an error naming the variable, never its value.
func Load(path string, getenv func(string) string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cfg, err := Parse(b, getenv)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// Parse is Load on bytes.
func Parse(b []byte, getenv func(string) string) (*Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, fmt.Errorf("parse YAML: %w", err)
	}
	if err := expand(&root, getenv); err != nil {
		return nil, err
	}
	// Decode the expanded tree strictly, so a misspelt key is an error.
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	if err := enc.Encode(&root); err != nil {
		return nil, fmt.Errorf("re-encode YAML: %w", err)
	}
	encoded := buf.Bytes()
	dec := yaml.NewDecoder(bytes.NewReader(encoded))
	dec.KnownFields(true)
	var cfg Config
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("decode: %w", redactDecodeError(err, sourceLines(encoded, &root)))
	}
	if len(cfg.Sources) == 0 {
		return nil, errors.New("no sources configured")
	}
	for _, name := range cfg.Names() {
		s := cfg.Sources[name]
		if s == nil {
			return nil, fmt.Errorf("source %q: empty definition", name)
		}
		s.Name = name
		s.withDefaults()
		if err := s.validate(); err != nil {
			return nil, fmt.Errorf("source %q: %w", name, err)
		}
	}
	if err := cfg.checkStripeBackfills(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// checkStripeBackfills refuses two backfilled Stripe sources of one
// account (the same account_id, or both none) unless both list disjoint
// events: each backfill would store, as its own, the events of the other's
// endpoint, and process them twice.
func (c *Config) checkStripeBackfills() error {
	names := c.Names()
	for i, a := range names {
		sa := c.Sources[a]
		if sa.Provider != provider.Stripe || sa.Backfill == nil {
			continue
		}
		for _, b := range names[i+1:] {
			sb := c.Sources[b]
			if sb.Provider != provider.Stripe || sb.Backfill == nil || sa.AccountID != sb.AccountID {
				continue
			}
			if len(sa.Backfill.Events) == 0 || len(sb.Backfill.Events) == 0 || eventsOverlap(sa.Backfill.Events, sb.Backfill.Events) {
				acct := "no account_id"
				if sa.AccountID != "" {
					acct = "account_id " + sa.AccountID
				}
				return fmt.Errorf("sources %q and %q: both backfill Stripe with %s: each would list and store the other's events; set account_id on each, or give both backfill.events lists (each its endpoint's enabled events) that do not overlap", a, b, acct)
			}
		}
	}
	return nil
}

// eventsOverlap reports whether two backfill event lists (exact types, or
// one pattern with "*" wildcards) can match one event type. Two patterns
// overlap unless their parts before the first "*" rule it out.
func eventsOverlap(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			wx, wy := strings.Contains(x, "*"), strings.Contains(y, "*")
			switch {
			case !wx && !wy:
				if x == y {
					return true
				}
			case wx && !wy:
				if globMatch(x, y) {
					return true
				}
			case wy && !wx:
				if globMatch(y, x) {
					return true
				}
			default:
				px, _, _ := strings.Cut(x, "*")
				py, _, _ := strings.Cut(y, "*")
				if strings.HasPrefix(px, py) || strings.HasPrefix(py, px) {
					return true
				}
			}
		}
	}
	return false
}

// globMatch reports whether pattern, with "*" matching any run of
// characters, matches s.
func globMatch(pattern, s string) bool {
	re := "^" + strings.ReplaceAll(regexp.QuoteMeta(pattern), `\*`, ".*") + "$"
	return regexp.MustCompile(re).MatchString(s)
}

var (
	// quotedValue is the value yaml quotes in a decode error ("cannot
	// unmarshal !!str `whsec_S...` into []string"). Greedy, and applied to
	// one message at a time, so a value holding backticks or newlines is
	// covered whole.
	quotedValue = regexp.MustCompile("(?s)`.*`")
	// errorLine is the line number a decode error starts with.
	errorLine = regexp.MustCompile(`^line ([0-9]+):`)
)

// redactDecodeError returns err with every value yaml quoted replaced by "a
// value", as after expansion a value may be a secret. Field names and types
// stay; line numbers, which count lines of the re-encoded document, become the
// file's by lines (see sourceLines) where known.
func redactDecodeError(err error, lines map[int]int) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		out := &yaml.TypeError{Errors: make([]string, len(te.Errors))}
		for i, msg := range te.Errors {
			msg = quotedValue.ReplaceAllLiteralString(msg, "a value")
			if m := errorLine.FindStringSubmatch(msg); m != nil {
				if n, err := strconv.Atoi(m[1]); err == nil && lines[n] > 0 {
					msg = "line " + strconv.Itoa(lines[n]) + msg[len(m[0])-1:]
				}
			}
			out.Errors[i] = msg
		}
		return out
	}
	return errors.New(quotedValue.ReplaceAllLiteralString(err.Error(), "a value"))
}

// sourceLines maps the lines of encoded, the re-encoding of root, to the lines
// of root's nodes in the file, by walking both trees side by side. Where one
// encoded line holds nodes of several file lines, the first node's wins.
func sourceLines(encoded []byte, root *yaml.Node) map[int]int {
	var again yaml.Node
	if yaml.Unmarshal(encoded, &again) != nil {
		return nil
	}
	lines := make(map[int]int)
	var walk func(enc, src *yaml.Node)
	walk = func(enc, src *yaml.Node) {
		if _, ok := lines[enc.Line]; !ok && src.Line > 0 {
			lines[enc.Line] = src.Line
		}
		for i := range min(len(enc.Content), len(src.Content)) {
			walk(enc.Content[i], src.Content[i])
		}
	}
	walk(&again, root)
	return lines
}

// Names returns the source names, sorted.
func (c *Config) Names() []string {
	names := make([]string, 0, len(c.Sources))
	for n := range c.Sources {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// withDefaults fills in what the file left unset: max_body_bytes,
// replay_window, the throttle's key, each forward's mode and timeout, the
// backfill's window, lag and timeout. Values out of range stay for
// validate to refuse.
func (s *Source) withDefaults() {
	if s.MaxBodyBytes == 0 {
		s.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if s.ReplayWindow == 0 {
		s.ReplayWindow = provider.DefaultReplayWindow
	}
	if s.Throttle != nil && s.Throttle.Key == "" {
		s.Throttle.Key = ThrottleMerchant
	}
	if s.Backfill != nil {
		*s.Backfill = s.Backfill.WithDefaults(s.Provider)
	}
	for _, f := range s.Forward {
		if f != nil {
			*f = f.WithDefaults()
		}
	}
}

// validate checks s, its defaults filled in (withDefaults), and changes
// nothing.
func (s *Source) validate() error {
	if !sourceName.MatchString(s.Name) {
		return errors.New("name must be 1-63 characters of a-z, 0-9, '_' or '-', starting with a letter or digit")
	}
	if s.Name == ReservedSourceName {
		return fmt.Errorf("name %q is reserved: it is the metrics source label of requests to unconfigured sources; choose another name", ReservedSourceName)
	}
	if s.Tolerance < 0 {
		return errors.New("tolerance must not be negative")
	}
	if s.MaxBodyBytes < 0 {
		return errors.New("max_body_bytes must not be negative")
	}
	if s.MaxAttempts < 0 {
		return errors.New("max_attempts must not be negative")
	}
	if s.MaxAttempts > MaxMaxAttempts {
		return fmt.Errorf("max_attempts %d: at most %d (River's default, which replayed and reconciled jobs carry; lower it, or raise the backoff to retry over a longer time)", s.MaxAttempts, MaxMaxAttempts)
	}
	if s.ReplayWindow < 0 {
		return errors.New("replay_window must not be negative")
	}
	if s.MaxAge < 0 {
		return errors.New("max_age must not be negative")
	}
	if s.AccountID != "" && !accountID.MatchString(s.AccountID) {
		return errors.New("account_id must be 1-255 characters without spaces or control characters")
	}
	// provider.New checks the provider name and the secrets.
	if _, err := s.Verifier(); err != nil {
		return err
	}
	for i, secret := range s.Secrets {
		if err := provider.CheckKeyStrength(s.Provider, secret); err != nil {
			return fmt.Errorf("secret %d: %w", i+1, err)
		}
	}
	if t := s.Throttle; t != nil {
		if t.PerSecond <= 0 {
			return fmt.Errorf("throttle.per_second %d: must be a positive number of envelopes per second (remove the throttle section for no limit)", t.PerSecond)
		}
		switch t.Key {
		case ThrottleMerchant, ThrottleSource:
		default:
			return fmt.Errorf("throttle.key %q: want %s (the default) or %s", t.Key, ThrottleMerchant, ThrottleSource)
		}
	}
	if s.Backfill != nil {
		if err := s.Backfill.validate(s.Provider); err != nil {
			return fmt.Errorf("backfill: %w", err)
		}
	}
	for i, f := range s.Forward {
		if f == nil {
			return fmt.Errorf("forward[%d]: empty definition", i)
		}
		if err := f.Validate(); err != nil {
			return fmt.Errorf("forward[%d]: %w", i, err)
		}
	}
	return nil
}

// ChecksReplays reports whether the source recognises a signed body resent
// under a new delivery id (ReplayCheck, on unless set to false).
func (s *Source) ChecksReplays() bool { return s.ReplayCheck == nil || *s.ReplayCheck }

// ErrNoDeliveryLog is the error of a backfill section on a source whose
// provider keeps no log of events or deliveries to recover from.
var ErrNoDeliveryLog = errors.New("the provider keeps no log of events or deliveries that could be listed: nothing to backfill from (Shopify retries 8 times over 4 hours, then the events are lost to webhooks; reconcile from the Admin API instead)")

var (
	stripeAccount = regexp.MustCompile(`^acct_[A-Za-z0-9]{1,250}$`)
	githubRepo    = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}$`)
	githubOrg     = regexp.MustCompile(`^[A-Za-z0-9-]{1,100}$`)
)

// StripeKeyLive reports whether a Stripe secret or restricted key is a
// live mode key (sk_live_, rk_live_) or a test mode one (sk_test_,
// rk_test_); ok is false for any other string.
func StripeKeyLive(key string) (live, ok bool) {
	switch {
	case strings.HasPrefix(key, "sk_live_"), strings.HasPrefix(key, "rk_live_"):
		return true, true
	case strings.HasPrefix(key, "sk_test_"), strings.HasPrefix(key, "rk_test_"):
		return false, true
	}
	return false, false
}

// BackfillSupported reports whether provider keeps a log backfill can read.
func BackfillSupported(prov string) bool {
	return prov == provider.Stripe || prov == provider.GitHub
}

// validate checks b, its defaults filled in (see WithDefaults), and changes
// nothing.
func (b *Backfill) validate(prov string) error {
	if !BackfillSupported(prov) {
		if prov == provider.Shopify {
			return ErrNoDeliveryLog
		}
		return fmt.Errorf("provider %s: only stripe and github sources can be backfilled", prov)
	}
	switch prov {
	case provider.Stripe:
		if b.APIKey == "" {
			return errors.New("api_key is required (a Stripe secret or restricted key with events read access, e.g. ${STRIPE_API_KEY})")
		}
		if strings.TrimSpace(b.APIKey) != b.APIKey || strings.ContainsAny(b.APIKey, "\r\n") {
			return errors.New("api_key has white space")
		}
		if _, ok := StripeKeyLive(b.APIKey); !ok {
			return errors.New("api_key: want a Stripe secret or restricted key (sk_live_, sk_test_, rk_live_ or rk_test_): its mode is checked against each listed event's livemode")
		}
		for i, a := range b.Accounts {
			if !stripeAccount.MatchString(a) {
				return fmt.Errorf("accounts[%d]: want a Stripe account id (acct_...)", i)
			}
		}
		if err := checkStripeEvents(b.Events); err != nil {
			return err
		}
		if b.Token != "" || b.Repo != "" || b.Org != "" || b.HookID != 0 {
			return errors.New("token, repo, org and hook_id are for github sources")
		}
	case provider.GitHub:
		if b.Token == "" || (b.Repo == "") == (b.Org == "") || b.HookID <= 0 {
			return errors.New("token, hook_id and one of repo (owner/name) or org are required")
		}
		if strings.TrimSpace(b.Token) != b.Token || strings.ContainsAny(b.Token, "\r\n") {
			return errors.New("token has white space")
		}
		if b.Repo != "" && !githubRepo.MatchString(b.Repo) {
			return errors.New("repo: want owner/name")
		}
		if b.Org != "" && !githubOrg.MatchString(b.Org) {
			return errors.New("org: want an organization login")
		}
		if b.APIKey != "" || len(b.Accounts) > 0 || b.APIVersion != "" || len(b.Events) > 0 {
			return errors.New("api_key, accounts, api_version and events are for stripe sources")
		}
	}
	if b.APIURL != "" {
		u, err := url.Parse(b.APIURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return errors.New("api_url must be an absolute http or https URL")
		}
	}
	switch {
	case b.RequestsPerSecond < 0:
		return errors.New("requests_per_second must not be negative")
	case b.Every < 0 || b.Window < 0 || b.Lag < 0 || b.Timeout < 0:
		return errors.New("every, window, lag and timeout must not be negative")
	case b.Every > 0 && b.Every < time.Minute:
		return errors.New("every must be at least 1m (or 0: no periodic reconcile)")
	}
	if b.Lag >= b.Window {
		return fmt.Errorf("lag %s must be shorter than window %s", b.Lag, b.Window)
	}
	if b.Every > b.Window-b.Lag {
		return fmt.Errorf("every %s must be at most window - lag (%s): the reconciles' windows would leave gaps never looked at", b.Every, b.Window-b.Lag)
	}
	return nil
}

// WithDefaults returns b with what it left unset filled in, for a source of
// provider prov: Window (the provider's retry window plus 8 hours; GitHub
// 24 hours), Lag 15 minutes, Timeout DefaultReconcileTimeout.
func (b Backfill) WithDefaults(prov string) Backfill {
	if b.Window == 0 {
		b.Window = provider.RetryWindow(prov) + 8*time.Hour
		if prov == provider.GitHub {
			b.Window = 24 * time.Hour
		}
	}
	if b.Lag == 0 {
		b.Lag = 15 * time.Minute
	}
	if b.Timeout == 0 {
		b.Timeout = DefaultReconcileTimeout
	}
	return b
}

// checkStripeEvents checks a backfill's event types: as Stripe's list takes
// them, up to 20 exact types (types[]) or a single pattern (type, "*"
// wildcards).
func checkStripeEvents(events []string) error {
	wild := 0
	for i, e := range events {
		if strings.TrimSpace(e) == "" || strings.ContainsAny(e, " \t\r\n") {
			return fmt.Errorf("events[%d]: want an event type such as charge.refunded", i)
		}
		if strings.Contains(e, "*") {
			wild++
		}
	}
	switch {
	case wild > 0 && len(events) > 1:
		return errors.New("events: a pattern with * must be the only entry (Stripe lists one pattern, or up to 20 exact types)")
	case len(events) > 20:
		return errors.New("events: at most 20 exact types (Stripe's limit), or one pattern with *")
	}
	return nil
}

// Destinations returns each source's forwarding destinations (nil lists
// left out), for forward.FromSources.
func (c *Config) Destinations() map[string][]*forward.Destination {
	out := map[string][]*forward.Destination{}
	for name, s := range c.Sources {
		if s != nil && len(s.Forward) > 0 {
			out[name] = s.Forward
		}
	}
	return out
}

// Verifier builds the source's signature verifier.
func (s *Source) Verifier() (provider.Verifier, error) {
	return provider.New(provider.Config{Provider: s.Provider, Secrets: s.Secrets, Tolerance: s.Tolerance, HMAC: s.HMAC, EventType: s.EventType})
}

func expand(n *yaml.Node, getenv func(string) string) error {
	if n.Kind == yaml.ScalarNode && strings.Contains(n.Value, "${") {
		var missing []string
		n.Value = varRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
			name := varRef.FindStringSubmatch(ref)[1]
			v := getenv(name)
			if v == "" {
				missing = append(missing, name)
			}
			return v
		})
		if len(missing) > 0 {
			return fmt.Errorf("line %d: environment variable %s is not set", n.Line, strings.Join(missing, ", "))
		}
		// An expanded value is data, never YAML syntax: keep it a string.
		if n.Tag == "" || n.Tag == "!!str" || n.Style != 0 {
			n.Style = yaml.DoubleQuotedStyle
		}
	}
	for _, c := range n.Content {
		if err := expand(c, getenv); err != nil {
			return err
		}
	}
	return nil
}
