package worker

import (
	"runtime/debug"
)

// GC settings of a processing worker, chosen by measurement
// (docs/benchmarks.md): a batch allocates a few hundred kilobytes that die at
// its commit, and Go's default (collect when the heap doubles) collected so
// often that the collector was a fifth of the worker's CPU. GOGC=400 gave
// back that fifth; the soft limit keeps the heap bounded whatever the
// backlog (the collector works harder as it nears the limit, rather than
// the process growing).
const (
	DefaultGCPercent   = 400
	DefaultMemoryLimit = 256 << 20 // bytes
)

// TuneGC applies DefaultGCPercent and DefaultMemoryLimit unless the operator
// set GOGC or GOMEMLIMIT, which the Go runtime has already applied.
func TuneGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(DefaultGCPercent)
	}
	if getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(DefaultMemoryLimit)
	}
}
