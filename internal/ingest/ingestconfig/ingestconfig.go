// Package ingestconfig builds ingest's options from the sources file: the
// one place that knows both config and ingest, so that ingest does not
// import config. cmd/ingest and the tests that run ingest use it.
package ingestconfig

import (
	"fmt"

	"github.com/inboxhq/inbox/internal/config"
	"github.com/inboxhq/inbox/internal/ingest"
)

// Sources returns cfg's sources as ingest serves them, each with its
// signature verifier built. cfg is a loaded (defaulted and validated)
// sources file.
func Sources(cfg *config.Config) (map[string]ingest.Source, error) {
	out := make(map[string]ingest.Source, len(cfg.Sources))
	for name, src := range cfg.Sources {
		v, err := src.Verifier()
		if err != nil {
			return nil, fmt.Errorf("source %q: %w", name, err)
		}
		out[name] = ingest.Source{
			Provider:     src.Provider,
			Verifier:     v,
			MaxBodyBytes: src.MaxBodyBytes,
			MaxAttempts:  src.MaxAttempts,
			CheckReplays: src.ChecksReplays(),
			ReplayWindow: src.ReplayWindow,
		}
	}
	return out, nil
}
