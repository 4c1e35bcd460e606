// Package config loads the sources file: which webhook sources exist, their
// provider, secrets and limits. ${VAR} in any value expands from the
// environment, so secrets stay out of the file. A source's backfill section
// and forwarding destinations decode into their owners' types
// (backfillspec.Spec, forwardspec.Destination), checked by their owners' rules.
// It must not import other packages of this module except provider, labels,
// forwardspec and backfillspec.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/inboxhq/inbox/internal/backfill/backfillspec"
	"github.com/inboxhq/inbox/internal/forward/forwardspec"
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
	Forward []*forwardspec.Destination `yaml:"forward"`
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
	Backfill *backfillspec.Spec `yaml:"backfill"`
}

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
	var stripe []backfillspec.StripeSource
	for _, name := range cfg.Names() {
		if s := cfg.Sources[name]; s.Provider == provider.Stripe && s.Backfill != nil {
			stripe = append(stripe, backfillspec.StripeSource{Name: name, AccountID: s.AccountID, Spec: s.Backfill})
		}
	}
	if err := backfillspec.CheckStripeSources(stripe); err != nil {
		return nil, err
	}
	return &cfg, nil
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
		if err := s.Backfill.Validate(s.Provider); err != nil {
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

// Destinations returns each source's forwarding destinations (nil lists
// left out), for forward.FromSources.
func (c *Config) Destinations() map[string][]*forwardspec.Destination {
	out := map[string][]*forwardspec.Destination{}
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
