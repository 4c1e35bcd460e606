package cli

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Safe wraps w so that what reaches an operator's terminal cannot drive it
// or disguise text: every control character except newline and tab (C0,
// DEL, C1 such as U+009B, the 8-bit CSI), every Unicode format character
// (bidi overrides and isolates such as U+202E, zero-width characters such as
// U+200B, U+FEFF), the line and paragraph separators U+2028 and U+2029, and
// invalid UTF-8 are written as \uXXXX escapes (surrogate pairs beyond the
// BMP). The escapes are JSON's, so JSON output stays valid and means the
// same; in text they read as what they are. Text without such characters
// passes through unchanged. Safe for concurrent use; a rune cut across two
// Writes is escaped whole (a final incomplete one is dropped).
func Safe(w io.Writer) io.Writer {
	if _, ok := w.(*safeWriter); ok {
		return w
	}
	return &safeWriter{w: w}
}

// Raw returns the writer a Safe wrapper writes to (w itself if it is not
// one), for output made only of the program's own text with the controls it
// means, such as a progress bar's carriage return; never for anything that
// holds data a sender chose.
func Raw(w io.Writer) io.Writer {
	if s, ok := w.(*safeWriter); ok {
		return s.w
	}
	return w
}

type safeWriter struct {
	mu      sync.Mutex // Writes may come from several goroutines
	w       io.Writer
	pending []byte // an incomplete UTF-8 sequence from the previous Write
	buf     []byte
}

// needsEscape reports whether r must not reach a terminal as is.
func needsEscape(r rune) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case r < 0x20 || r == 0x7f || (0x80 <= r && r <= 0x9f):
		return true
	case r == '\u2028' || r == '\u2029' || r == utf8.RuneError:
		return true
	}
	return unicode.Is(unicode.Cf, r)
}

func (s *safeWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(p)
	if len(s.pending) > 0 {
		p = append(s.pending, p...)
		s.pending = nil
	}
	s.buf = s.buf[:0]
	for i := 0; i < len(p); {
		c := p[i]
		if c >= 0x20 && c < 0x7f || c == '\n' || c == '\t' {
			s.buf = append(s.buf, c)
			i++
			continue
		}
		r, size := utf8.DecodeRune(p[i:])
		if r == utf8.RuneError && size <= 1 && !utf8.FullRune(p[i:]) {
			// Possibly cut by the Write boundary: keep it for the next one.
			s.pending = append([]byte(nil), p[i:]...)
			break
		}
		if r == utf8.RuneError && size == 1 {
			s.buf = append(s.buf, `\ufffd`...)
			i++
			continue
		}
		if needsEscape(r) {
			if r > 0xffff {
				hi, lo := utf16Surrogates(r)
				s.buf = fmt.Appendf(s.buf, `\u%04x\u%04x`, hi, lo)
			} else {
				s.buf = fmt.Appendf(s.buf, `\u%04x`, r)
			}
		} else {
			s.buf = append(s.buf, p[i:i+size]...)
		}
		i += size
	}
	if _, err := s.w.Write(s.buf); err != nil {
		return 0, err
	}
	return n, nil
}

func utf16Surrogates(r rune) (rune, rune) {
	r -= 0x10000
	return 0xd800 + (r>>10)&0x3ff, 0xdc00 + r&0x3ff
}

// Bound cuts a request string (a path, a filter) to at most 200 bytes of
// valid UTF-8 for a log line, marking the cut with "...".
func Bound(s string) string {
	const max = 200
	if len(s) > max {
		return strings.ToValidUTF8(s[:max], "") + "..."
	}
	return s
}
