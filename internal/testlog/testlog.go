// Package testlog holds what tests need to read what a logger (or a
// process's output) wrote while other goroutines go on writing.
package testlog

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that several goroutines may write to and read
// at once: a slog handler's or a child process's output, read by a test.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
