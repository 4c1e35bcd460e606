// Package bodydiff compares two webhook bodies line by line: the stored
// body of an envelope and a conflicting delivery's (the console's envelope
// page and `worker envelopes show --conflicts` show the same diff).
package bodydiff

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// MaxLines bounds the lines a diff compares after the common start and end
// are set aside: the comparison's table is their product (at most 250,000
// cells, 1 MB), so a request cannot make the worker allocate more.
const MaxLines = 500

// Line is one line of a diff: Op is " " (both), "-" (only the stored body)
// or "+" (only the conflicting one).
type Line struct {
	Op   string `json:"op"`
	Text string `json:"text"`
}

// Context is how many unchanged lines are kept around each change.
const Context = 3

// Lines is a line diff of a against b (longest common subsequence), with
// Context unchanged lines around each change and "…" where more were left
// out. It returns nil when the parts that differ have more than MaxLines
// lines each.
func Lines(a, b []string) []Line {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	ma, mb := a[pre:len(a)-suf], b[pre:len(b)-suf]
	if len(ma) > MaxLines || len(mb) > MaxLines {
		return nil
	}
	// lcs[i][j]: the longest common subsequence of ma[i:] and mb[j:].
	lcs := make([][]int32, len(ma)+1)
	for i := range lcs {
		lcs[i] = make([]int32, len(mb)+1)
	}
	for i := len(ma) - 1; i >= 0; i-- {
		for j := len(mb) - 1; j >= 0; j-- {
			if ma[i] == mb[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	all := make([]Line, 0, len(a)+len(b))
	for _, l := range a[:pre] {
		all = append(all, Line{" ", l})
	}
	i, j := 0, 0
	for i < len(ma) || j < len(mb) {
		switch {
		case i < len(ma) && j < len(mb) && ma[i] == mb[j]:
			all = append(all, Line{" ", ma[i]})
			i, j = i+1, j+1
		case i < len(ma) && (j == len(mb) || lcs[i+1][j] >= lcs[i][j+1]):
			all = append(all, Line{"-", ma[i]})
			i++
		default:
			all = append(all, Line{"+", mb[j]})
			j++
		}
	}
	for _, l := range a[len(a)-suf:] {
		all = append(all, Line{" ", l})
	}
	// Keep the changes and their context.
	keep := make([]bool, len(all))
	for k, l := range all {
		if l.Op != " " {
			for c := max(0, k-Context); c <= min(len(all)-1, k+Context); c++ {
				keep[c] = true
			}
		}
	}
	out := []Line{}
	gap := false
	for k, l := range all {
		if !keep[k] {
			gap = true
			continue
		}
		if gap {
			out = append(out, Line{" ", "…"})
			gap = false
		}
		out = append(out, l)
	}
	if gap {
		out = append(out, Line{" ", "…"})
	}
	return out
}

// HasChange reports whether d has a changed line.
func HasChange(d []Line) bool {
	for _, l := range d {
		if l.Op != " " {
			return true
		}
	}
	return false
}

// Comparable is a body's lines for a diff: indented JSON when it is JSON, so
// that a diff shows fields rather than one long line (and white space that
// means nothing in JSON does not show as a change).
func Comparable(b []byte) []string {
	var out bytes.Buffer
	if json.Valid(b) && json.Indent(&out, b, "", "  ") == nil {
		// White space around a JSON value means nothing.
		return strings.Split(strings.TrimSpace(out.String()), "\n")
	}
	return strings.Split(string(b), "\n")
}

// NoteTooLarge is Compare's note when the bodies differ in more than
// MaxLines lines.
var NoteTooLarge = fmt.Sprintf("too large to compare here (more than %d differing lines)", MaxLines)

// Compare diffs a conflicting body against the stored one (Comparable's
// lines), or says why it cannot: nil Diff and a Note when either body was
// dropped by retention, when the parts that differ are too large, or when
// they differ only in white space.
func Compare(stored, conflicting []byte) (diff []Line, note string) {
	switch {
	case conflicting == nil:
		return nil, "the conflicting body was dropped by retention"
	case stored == nil:
		return nil, "the stored body was dropped by retention"
	}
	diff = Lines(Comparable(stored), Comparable(conflicting))
	switch {
	case diff == nil:
		return nil, NoteTooLarge
	case !HasChange(diff):
		return nil, "the bodies differ only in white space: the same JSON, formatted otherwise"
	}
	return diff, ""
}
