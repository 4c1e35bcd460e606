package ingest

import (
	"log/slog"

	"github.com/inboxhq/inbox/internal/config"
	"github.com/inboxhq/inbox/internal/provider"
)

// warnWeakSecrets logs a warning at startup for each configured secret whose
// key is shorter than provider.MinKeyBytes (16 bytes), naming the source and
// the secret's position, never its value. It does not refuse them: a test
// setup may want one; production should not.
func warnWeakSecrets(cfg *config.Config, logger *slog.Logger) {
	for _, name := range cfg.Names() {
		src := cfg.Sources[name]
		pos, n := provider.WeakSecrets(src.Provider, src.Secrets)
		for i := range pos {
			logger.Warn("weak webhook secret: its key is shorter than the minimum; use the secret the provider generated",
				"source", name, "provider", src.Provider, "secret", pos[i], "key_bytes", n[i], "min_key_bytes", provider.MinKeyBytes)
		}
	}
}
