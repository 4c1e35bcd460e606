// Package backfillspec is a source's backfill section and its rules (which
// providers can be backfilled, what each needs, the defaults, two Stripe
// sources of one account): backfill's own, kept in a package of their own
// so that config can decode the sources file into them without importing
// backfill (which imports config).
package backfillspec

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/inboxhq/inbox/internal/provider"
)

// Spec is a source's backfill section: how its events are listed from the
// provider's API. Its credentials are ${VAR}-expanded like the secrets and
// never logged.
type Spec struct {
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
func (b Spec) redacted() specRedacted {
	b.APIKey, b.Token = mask(b.APIKey), mask(b.Token)
	return specRedacted(b)
}

// specRedacted is Spec without its methods, so printing it does not
// recurse.
type specRedacted Spec

// String implements fmt.Stringer: the section with api_key and token
// masked, so %v and %+v of it (or of a Source) print no credential.
func (b Spec) String() string { return fmt.Sprintf("%+v", b.redacted()) }

// GoString implements fmt.GoStringer (%#v), masked like String.
func (b Spec) GoString() string { return fmt.Sprintf("backfillspec.Spec%+v", b.redacted()) }

// LogValue implements slog.LogValuer: the section's settings, api_key and
// token masked.
func (b Spec) LogValue() slog.Value {
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

// Supported reports whether provider keeps a log backfill can read.
func Supported(prov string) bool {
	return prov == provider.Stripe || prov == provider.GitHub
}

// Validate checks b, its defaults filled in (see WithDefaults), for a source
// of provider prov, and changes nothing. Its errors never hold a credential.
func (b *Spec) Validate(prov string) error {
	if !Supported(prov) {
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
func (b Spec) WithDefaults(prov string) Spec {
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

// StripeSource is a backfilled Stripe source, for CheckStripeSources.
type StripeSource struct {
	Name, AccountID string
	Spec            *Spec
}

// CheckStripeSources refuses two backfilled Stripe sources of one account
// (the same account_id, or both none) unless both list disjoint events: each
// backfill would store, as its own, the events of the other's endpoint, and
// process them twice. sources are in the order errors should name them.
func CheckStripeSources(sources []StripeSource) error {
	for i, sa := range sources {
		for _, sb := range sources[i+1:] {
			if sa.AccountID != sb.AccountID {
				continue
			}
			if len(sa.Spec.Events) == 0 || len(sb.Spec.Events) == 0 || eventsOverlap(sa.Spec.Events, sb.Spec.Events) {
				acct := "no account_id"
				if sa.AccountID != "" {
					acct = "account_id " + sa.AccountID
				}
				return fmt.Errorf("sources %q and %q: both backfill Stripe with %s: each would list and store the other's events; set account_id on each, or give both backfill.events lists (each its endpoint's enabled events) that do not overlap", sa.Name, sb.Name, acct)
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
