// Package forwardspec is a source's forwarding destination as the sources
// file configures it, and its rules (defaults, validation): forward's own,
// in a leaf package so that config can decode into it without importing
// forward (and, through it, handlers, the ledger and River).
package forwardspec

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/inboxhq/inbox/internal/provider"
)

// Destination is one endpoint a source's deliveries are forwarded to, as
// the sources file configures it (config.Source.Forward).
type Destination struct {
	// URL receives a POST with the original body and content type, an
	// Idempotency-Key and a Standard Webhooks signature.
	URL string `yaml:"url"`
	// Secret signs forwarded requests (Standard Webhooks: whsec_ + base64).
	Secret string `yaml:"secret"`
	// Events limits forwarding to these event types ("*" suffix matches a
	// prefix, e.g. "payment.*"); empty forwards every event.
	Events []string `yaml:"events"`
	// Mode is Besides (default: the built-in handler runs too) or Instead
	// (only forwarding).
	Mode Mode `yaml:"mode"`
	// Timeout bounds one forwarding request. Default 10 s.
	Timeout time.Duration `yaml:"timeout"`
}

// Mode is whether a destination receives deliveries besides or instead of
// the built-in handler.
type Mode string

// Forwarding modes and limits.
const (
	// Besides runs the built-in handler, then forwards once it
	// succeeded (default).
	Besides Mode = "besides"
	// Instead forwards only.
	Instead Mode = "instead"
	// DefaultTimeout bounds a forwarding request that sets no timeout.
	DefaultTimeout = 10 * time.Second
	// MaxTimeout is the largest timeout a destination may set: the
	// request runs inside the worker's transaction and job timeout.
	MaxTimeout = 60 * time.Second
)

// WithDefaults returns f with what it left unset filled in: Mode Besides,
// Timeout DefaultTimeout.
func (f Destination) WithDefaults() Destination {
	if f.Mode == "" {
		f.Mode = Besides
	}
	if f.Timeout == 0 {
		f.Timeout = DefaultTimeout
	}
	return f
}

// Validate checks a forwarding destination, its defaults filled in (see
// WithDefaults), and changes nothing. Its errors never contain the secret,
// nor the URL (which may carry credentials).
func (f *Destination) Validate() error {
	u, err := url.Parse(f.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return errors.New("url must be an absolute http or https URL")
	}
	if f.Secret == "" {
		return errors.New("secret is required")
	}
	if _, err := provider.New(provider.Config{Provider: provider.Standard, Secrets: []string{f.Secret}}); err != nil {
		return fmt.Errorf("secret must be a Standard Webhooks secret (whsec_ and base64): %w", err)
	}
	switch f.Mode {
	case Besides, Instead:
	default:
		return fmt.Errorf("mode %q: want %s or %s", f.Mode, Besides, Instead)
	}
	switch {
	case f.Timeout < 0:
		return errors.New("timeout must not be negative")
	case f.Timeout == 0:
		return errors.New("timeout is not set (WithDefaults sets it)")
	case f.Timeout > MaxTimeout:
		return fmt.Errorf("timeout %s exceeds the maximum of %s", f.Timeout, MaxTimeout)
	}
	for i, p := range f.Events {
		if err := provider.CheckEventPattern(p); err != nil {
			return fmt.Errorf("events[%d]: %w", i, err)
		}
	}
	return nil
}
