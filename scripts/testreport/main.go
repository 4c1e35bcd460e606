// Command testreport reads `go test -json` on stdin and prints what a plain
// (non-verbose) `go test` prints: each package's closing ok/FAIL line, and the
// output of failed tests only. At the end it lists every skipped test with
// its reason, so that no test is skipped silently. Lines that are not JSON
// (build errors on some Go versions) are copied as they are. It never
// decides the exit status: scripts/test keeps go test's.
//
// Usage: go test -json ./... | testreport
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

type skip struct{ pkg, test, reason string }

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	w := bufio.NewWriter(out)
	defer w.Flush()
	buffered := map[string][]string{} // package + "\x00" + test -> output lines
	var skips []skip
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintln(w, string(line))
			continue
		}
		key := e.Package + "\x00" + e.Test
		switch {
		case e.Action == "output" && e.Test == "":
			// Package-level: the ok/FAIL line, a panic, coverage, build output.
			if strings.HasPrefix(e.Output, "FAIL") {
				// Output of tests that never finished (a panic, a timeout)
				// is shown before the package's FAIL rather than lost.
				flush(w, buffered, e.Package)
			}
			if !strings.HasPrefix(e.Output, "=== ") && !isVerboseNoise(e.Output) {
				fmt.Fprint(w, e.Output)
			}
		case e.Action == "build-output":
			fmt.Fprint(w, e.Output)
		case e.Action == "output":
			buffered[key] = append(buffered[key], e.Output)
		case e.Action == "fail" && e.Test != "":
			for _, l := range buffered[key] {
				if !strings.HasPrefix(l, "=== ") {
					fmt.Fprint(w, l)
				}
			}
			delete(buffered, key)
		case e.Action == "skip" && e.Test != "":
			skips = append(skips, skip{e.Package, e.Test, skipReason(buffered[key])})
			delete(buffered, key)
		case e.Action == "pass" && e.Test != "":
			delete(buffered, key)
		case e.Action == "fail" && e.Test == "":
			flush(w, buffered, e.Package)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(skips) > 0 {
		fmt.Fprintf(w, "\ntest: %d test(s) SKIPPED:\n", len(skips))
		for _, s := range skips {
			fmt.Fprintf(w, "  SKIP %s %s: %s\n", s.pkg, s.test, s.reason)
		}
	}
	return nil
}

// flush prints and forgets the output of pkg's tests that have not finished.
func flush(w io.Writer, buffered map[string][]string, pkg string) {
	for k, lines := range buffered {
		if strings.HasPrefix(k, pkg+"\x00") {
			for _, l := range lines {
				fmt.Fprint(w, l)
			}
			delete(buffered, k)
		}
	}
}

// isVerboseNoise is package-level output that -json adds and plain go test
// does not print (the "PASS" line before "ok").
func isVerboseNoise(s string) bool { return s == "PASS\n" }

// skipReason is the message a skipped test gave (t.Skip's arguments), which
// go test prints under its "--- SKIP" line.
func skipReason(lines []string) string {
	var msg []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		msg = append(msg, t)
	}
	if len(msg) == 0 {
		return "(no reason given)"
	}
	return strings.Join(msg, " ")
}
