package worker

import (
	"context"
	"log/slog"
	"strings"
)

// riverLogger is logger for River's own messages, with its periodic
// progress line ("<producer>: Producer job counts", every 5 s while jobs
// run) demoted to debug: at info it crowded out the worker's own lines in
// `make run` (issue 23). Everything else River says keeps its level.
func riverLogger(logger *slog.Logger) *slog.Logger {
	return slog.New(demoteJobCounts{logger.Handler()})
}

// demoteJobCounts passes records to its handler, River's job counts at debug.
type demoteJobCounts struct{ slog.Handler }

func (d demoteJobCounts) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelInfo && strings.HasSuffix(r.Message, "Producer job counts") {
		if !d.Handler.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		r.Level = slog.LevelDebug
	}
	return d.Handler.Handle(ctx, r)
}

func (d demoteJobCounts) WithAttrs(attrs []slog.Attr) slog.Handler {
	return demoteJobCounts{d.Handler.WithAttrs(attrs)}
}

func (d demoteJobCounts) WithGroup(name string) slog.Handler {
	return demoteJobCounts{d.Handler.WithGroup(name)}
}
