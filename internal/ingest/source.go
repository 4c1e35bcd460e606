package ingest

import (
	"errors"
	"time"

	"github.com/inboxhq/inbox/internal/provider"
)

// Source is one source as ingest serves it at POST /webhooks/<name>: ingest's
// own option type, which ingestconfig.Sources builds from the sources file
// (config.Source), so this package does not import config.
type Source struct {
	// Provider is the source's provider name, stored as envelope.provider.
	Provider string
	// Verifier checks a request's signature and parses its delivery.
	Verifier provider.Verifier
	// MaxBodyBytes bounds a request body: 413 beyond it.
	MaxBodyBytes int64
	// MaxAttempts is the job's max_attempts (0: River's default), River's
	// backstop; the worker decides with its own configuration.
	MaxAttempts int
	// CheckReplays: a signed body resent under a new delivery id within
	// ReplayWindow is recognised (answered as a duplicate of the original)
	// when the signature does not cover the id.
	CheckReplays bool
	ReplayWindow time.Duration
}

func (s Source) check() error {
	switch {
	case s.Provider == "":
		return errors.New("no provider")
	case s.Verifier == nil:
		return errors.New("no verifier")
	case s.MaxBodyBytes <= 0:
		return errors.New("max body bytes must be positive")
	case s.MaxAttempts < 0:
		return errors.New("max attempts must not be negative")
	case s.CheckReplays && s.ReplayWindow <= 0:
		return errors.New("a replay check needs a positive replay window")
	}
	return nil
}
