// Command mutation applies a curated list of mutations (scripts/mutations.txt)
// one at a time to a temporary copy of the tree, runs each mutation's tests
// there, and reports which mutations the tests caught. The working tree is
// never modified. Run it with scripts/mutate (make mutate), which provides a
// PostgreSQL for the tests.
//
// Statuses:
//
//	CAUGHT      the tests failed on the mutant (good)
//	SURVIVED    the tests passed on the mutant: a guarantee is not pinned
//	EQUIVALENT  survived, and the list says why that is expected
//	NOT FOUND   a snippet does not occur in its file as often as the list
//	            says (the code changed: update the mutation)
//	NO BUILD    the mutant does not compile (fix the mutation)
//	FOUND       with -check: every snippet is there (no tests run)
//
// It exits 1 when any mutation SURVIVED, was NOT FOUND or did NOT BUILD.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// edit replaces From with To in File, Count times (every occurrence, which
// must number Count).
type edit struct {
	File, From, To string
	Count          int
}

type mutation struct {
	Name       string
	Guarantee  string
	Tests      []string // package patterns
	Run        string   // go test -run, optional
	Equivalent string   // why surviving is expected, optional
	Timeout    time.Duration
	Edits      []edit
	Line       int
}

type status string

const (
	caught     status = "CAUGHT"
	survived   status = "SURVIVED"
	equivalent status = "EQUIVALENT"
	notFound   status = "NOT FOUND"
	noBuild    status = "NO BUILD"
	found      status = "FOUND" // -check: the snippets are there
)

type result struct {
	m       mutation
	status  status
	detail  string // failing tests, or what was not found
	elapsed time.Duration
}

func main() {
	list := flag.String("list", "scripts/mutations.txt", "the mutation list")
	only := flag.String("only", "", "run only mutations whose name matches this regexp")
	report := flag.String("report", "", "also write the results as a Markdown table to this file")
	timeout := flag.Duration("timeout", 5*time.Minute, "go test -timeout for each mutation")
	baseline := flag.Bool("baseline", true, "first run every listed package's tests on the unmutated copy (they must pass)")
	check := flag.Bool("check", false, "only check that every snippet is found, run no tests")
	flag.Parse()
	if err := run(*list, *only, *report, *timeout, *baseline, *check, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "mutation:", err)
		os.Exit(1)
	}
}

var errFailed = errors.New("some mutations survived or are broken")

func run(listPath, only, reportPath string, timeout time.Duration, baseline, checkOnly bool, out io.Writer) error {
	src, err := os.ReadFile(listPath)
	if err != nil {
		return err
	}
	ms, err := parse(src)
	if err != nil {
		return fmt.Errorf("%s: %w", listPath, err)
	}
	if only != "" {
		re, err := regexp.Compile(only)
		if err != nil {
			return err
		}
		var keep []mutation
		for _, m := range ms {
			if re.MatchString(m.Name) {
				keep = append(keep, m)
			}
		}
		ms = keep
	}
	if len(ms) == 0 {
		return errors.New("no mutations to run")
	}

	tmp, err := os.MkdirTemp("", "inbox-mutation-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := copyTree(tmp); err != nil {
		return fmt.Errorf("copy the tree: %w", err)
	}
	fmt.Fprintf(out, "mutation: %d mutations, tree copied to %s\n", len(ms), tmp)

	if baseline && !checkOnly {
		pkgs := map[string]bool{}
		for _, m := range ms {
			for _, p := range m.Tests {
				pkgs[p] = true
			}
		}
		var all []string
		for p := range pkgs {
			all = append(all, p)
		}
		sort.Strings(all)
		fmt.Fprintf(out, "mutation: baseline: go test %s\n", strings.Join(all, " "))
		if ok, output := goTest(tmp, all, "", timeout); !ok {
			return fmt.Errorf("the unmutated tree fails its tests; fix that first:\n%s", tail(output, 40))
		}
	}

	var results []result
	for _, m := range ms {
		r := apply(tmp, m, timeout, checkOnly)
		results = append(results, r)
		fmt.Fprintf(out, "%-10s %-44s %6.1fs  %s\n", r.status, m.Name, r.elapsed.Seconds(), r.detail)
	}
	counts := map[status]int{}
	for _, r := range results {
		counts[r.status]++
	}
	if checkOnly {
		fmt.Fprintf(out, "mutation: %d found, %d not found (of %d)\n", counts[found], counts[notFound], len(results))
	} else {
		fmt.Fprintf(out, "mutation: %d caught, %d survived, %d equivalent, %d not found, %d no build (of %d)\n",
			counts[caught], counts[survived], counts[equivalent], counts[notFound], counts[noBuild], len(results))
	}
	if reportPath != "" {
		if err := writeReport(reportPath, results); err != nil {
			return err
		}
	}
	if counts[survived]+counts[notFound]+counts[noBuild] > 0 {
		return errFailed
	}
	return nil
}

// apply runs one mutation in the copy at dir and restores the files.
func apply(dir string, m mutation, timeout time.Duration, checkOnly bool) (r result) {
	start := time.Now()
	r.m = m
	originals := map[string][]byte{}
	defer func() {
		for f, b := range originals {
			_ = os.WriteFile(filepath.Join(dir, f), b, 0o644)
		}
		r.elapsed = time.Since(start)
	}()
	if m.Run != "" && !runMatches(dir, m.Tests, m.Run) {
		r.status, r.detail = notFound, fmt.Sprintf("run %q names no test of %s", m.Run, strings.Join(m.Tests, " "))
		return r
	}
	for _, e := range m.Edits {
		path := filepath.Join(dir, e.File)
		b, ok := originals[e.File]
		if !ok {
			var err error
			if b, err = os.ReadFile(path); err != nil {
				r.status, r.detail = notFound, err.Error()
				return r
			}
			originals[e.File] = b
		}
		cur, err := os.ReadFile(path)
		if err != nil {
			r.status, r.detail = notFound, err.Error()
			return r
		}
		if n := bytes.Count(cur, []byte(e.From)); n != e.Count {
			r.status, r.detail = notFound, fmt.Sprintf("%s: %q occurs %d times, want %d", e.File, e.From, n, e.Count)
			return r
		}
		if fn, later := superseded(dir, e.File, cur, e.From); later != "" {
			r.status, r.detail = notFound, fmt.Sprintf("%s: the function %s it edits is replaced by %s: edit that one", e.File, fn, later)
			return r
		}
		if err := os.WriteFile(path, bytes.ReplaceAll(cur, []byte(e.From), []byte(e.To)), 0o644); err != nil {
			r.status, r.detail = notFound, err.Error()
			return r
		}
	}
	if checkOnly {
		r.status, r.detail = found, "(not run)"
		return r
	}
	if m.Timeout > 0 {
		timeout = m.Timeout
	}
	ok, output := goTest(dir, m.Tests, m.Run, timeout)
	switch {
	case bytes.Contains(output, []byte("[build failed]")) || bytes.Contains(output, []byte("[setup failed]")) || buildError(output):
		r.status, r.detail = noBuild, compileError(output)
	case ok && m.Equivalent != "":
		r.status, r.detail = equivalent, m.Equivalent
	case ok:
		r.status, r.detail = survived, "tests pass: "+strings.Join(m.Tests, " ")
	default:
		r.status, r.detail = caught, failures(output)
	}
	return r
}

func goTest(dir string, pkgs []string, runPattern string, timeout time.Duration) (bool, []byte) {
	args := []string{"test", "-count=1", "-short", "-timeout", timeout.String()}
	if runPattern != "" {
		args = append(args, "-run", runPattern)
	}
	args = append(args, pkgs...)
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return err == nil, out
}

var failRE = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)

// failures names the failed tests (top-level names first, at most five).
func failures(output []byte) string {
	seen := map[string]bool{}
	var names []string
	for _, m := range failRE.FindAllSubmatch(output, -1) {
		n := string(m[1])
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	sort.SliceStable(names, func(i, j int) bool { return strings.Count(names[i], "/") < strings.Count(names[j], "/") })
	if len(names) == 0 {
		if bytes.Contains(output, []byte("panic: test timed out")) {
			return "by a timeout"
		}
		return "by " + firstLine(output)
	}
	if len(names) > 5 {
		names = append(names[:5], "...")
	}
	return "by " + strings.Join(names, ", ")
}

var buildErrRE = regexp.MustCompile(`(?m)^# \S+`)

func buildError(output []byte) bool { return buildErrRE.Match(output) }

var compileErrRE = regexp.MustCompile(`(?m)^\S+\.go:\d+:\d+: .*$`)

// compileError is the compiler's first complaint, else the first line.
func compileError(output []byte) string {
	if m := compileErrRE.Find(output); m != nil {
		return string(m)
	}
	return firstLine(output)
}

func firstLine(b []byte) string {
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "ok ") {
			return l
		}
	}
	return ""
}

func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// copyTree copies the files git knows (tracked, or untracked and not
// ignored) into dir, as they are in the working tree now.
func copyTree(dir string) error {
	out, err := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		return fmt.Errorf("git ls-files: %w", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if f == "" {
			continue
		}
		fi, err := os.Lstat(f)
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the working tree
		}
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, b, fi.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}

// parse reads the mutation list: blocks that start with "[name]", then
// "key value" lines. Keys: guarantee, tests, run, equivalent, and per edit
// file, from, to, count (file starts a new edit; count defaults to 1).
// Values are taken verbatim after the key and its spaces (trailing white
// space trimmed); "\t" and "\n" in from and to stand for a tab and a
// newline. timeout overrides -timeout for one mutation. Lines starting with
// # and blank lines are ignored.
func parse(src []byte) ([]mutation, error) {
	var ms []mutation
	var cur *mutation
	names := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(src))
	n := 0
	finish := func() error {
		if cur == nil {
			return nil
		}
		switch {
		case cur.Guarantee == "":
			return fmt.Errorf("line %d: mutation %s has no guarantee", cur.Line, cur.Name)
		case len(cur.Tests) == 0:
			return fmt.Errorf("line %d: mutation %s has no tests", cur.Line, cur.Name)
		case len(cur.Edits) == 0:
			return fmt.Errorf("line %d: mutation %s has no edit", cur.Line, cur.Name)
		}
		for _, e := range cur.Edits {
			if e.From == "" || e.From == e.To {
				return fmt.Errorf("line %d: mutation %s: an edit of %s has no from, or from equals to", cur.Line, cur.Name, e.File)
			}
		}
		ms = append(ms, *cur)
		return nil
	}
	for sc.Scan() {
		n++
		line := strings.TrimRight(sc.Text(), " \t\r")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			if err := finish(); err != nil {
				return nil, err
			}
			name := line[1 : len(line)-1]
			if names[name] {
				return nil, fmt.Errorf("line %d: mutation %s listed twice", n, name)
			}
			names[name] = true
			cur = &mutation{Name: name, Line: n}
			continue
		}
		if cur == nil {
			return nil, fmt.Errorf("line %d: %q before the first [name]", n, line)
		}
		key, val, _ := strings.Cut(line, " ")
		val = strings.TrimLeft(val, " ")
		last := func() (*edit, error) {
			if len(cur.Edits) == 0 {
				return nil, fmt.Errorf("line %d: %s before file", n, key)
			}
			return &cur.Edits[len(cur.Edits)-1], nil
		}
		switch key {
		case "guarantee":
			cur.Guarantee = val
		case "tests":
			cur.Tests = strings.Fields(val)
		case "run":
			cur.Run = val
		case "equivalent":
			cur.Equivalent = val
		case "timeout":
			d, err := time.ParseDuration(val)
			if err != nil {
				return nil, fmt.Errorf("line %d: bad timeout %q", n, val)
			}
			cur.Timeout = d
		case "file":
			cur.Edits = append(cur.Edits, edit{File: val, Count: 1})
		case "from", "to":
			e, err := last()
			if err != nil {
				return nil, err
			}
			v := strings.NewReplacer(`\t`, "\t", `\n`, "\n").Replace(val)
			if key == "from" {
				e.From = v
			} else {
				e.To = v
			}
		case "count":
			e, err := last()
			if err != nil {
				return nil, err
			}
			if e.Count, err = strconv.Atoi(val); err != nil || e.Count < 1 {
				return nil, fmt.Errorf("line %d: bad count %q", n, val)
			}
		default:
			return nil, fmt.Errorf("line %d: unknown key %q", n, key)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if err := finish(); err != nil {
		return nil, err
	}
	return ms, nil
}

func writeReport(path string, results []result) error {
	var b strings.Builder
	b.WriteString("| status | mutation | guarantee | tests | result |\n|---|---|---|---|---|\n")
	esc := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | `%s` | %s | %s | %s |\n", r.status, r.m.Name, esc(r.m.Guarantee), esc(strings.Join(r.m.Tests, " ")), esc(r.detail))
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

var (
	sqlFunction = regexp.MustCompile(`(?i)CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+(?:public\.)?(\w+)\s*\(`)
	gooseDown   = []byte("-- +goose Down")
	dollarTag   = regexp.MustCompile(`\$\w*\$`)
)

// superseded reports, for an edit of migration file (its content cur) at the
// first occurrence of from, the function whose definition holds it and the
// later migration that defines that function again in its Up section, if
// any. Such an edit changes a definition no database runs: it survives
// whatever the tests do.
func superseded(dir, file string, cur []byte, from string) (fn, later string) {
	if !strings.HasPrefix(file, "migrations/") || !strings.HasSuffix(file, ".sql") {
		return "", ""
	}
	at := bytes.Index(cur, []byte(from))
	if down := bytes.Index(cur, gooseDown); at < 0 || (down >= 0 && at > down) {
		return "", "" // a Down section restores; the Up is what runs
	}
	defs := sqlFunction.FindAllSubmatchIndex(cur[:at], -1)
	if len(defs) == 0 {
		return "", ""
	}
	last := defs[len(defs)-1]
	// Inside its body: the body's dollar quote opens after the CREATE and
	// does not close before the snippet.
	body := cur[last[1]:at]
	tag := dollarTag.Find(body)
	if tag == nil || bytes.Contains(body[bytes.Index(body, tag)+len(tag):], tag) {
		return "", ""
	}
	fn = string(cur[last[2]:last[3]])
	names, err := filepath.Glob(filepath.Join(dir, "migrations", "*.sql"))
	if err != nil {
		return fn, ""
	}
	sort.Strings(names)
	redefined := regexp.MustCompile(`(?i)CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+(?:public\.)?` + regexp.QuoteMeta(fn) + `\s*\(`)
	for _, n := range names {
		if filepath.Base(n) <= filepath.Base(file) {
			continue
		}
		b, err := os.ReadFile(n)
		if err != nil {
			continue
		}
		if down := bytes.Index(b, gooseDown); down >= 0 {
			b = b[:down]
		}
		if redefined.Match(b) {
			return fn, "migrations/" + filepath.Base(n)
		}
	}
	return fn, ""
}

var testFunc = regexp.MustCompile(`(?m)^func (Test\w+)\(`)

// runMatches reports whether pattern (go test -run, a top-level test name
// pattern: the part before any "/") matches a test function of the packages
// pkgs (./dir, or ./dir/... for the tree under it) in dir. A pattern that
// matches none runs nothing, and the mutation would survive.
func runMatches(dir string, pkgs []string, pattern string) bool {
	top, _, _ := strings.Cut(pattern, "/")
	re, err := regexp.Compile(top)
	if err != nil {
		return false
	}
	for _, p := range pkgs {
		root, tree := strings.CutSuffix(p, "/...")
		root = filepath.Join(dir, root)
		found := false
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || found {
				return filepath.SkipAll
			}
			if d.IsDir() && path != root && !tree {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return nil
			}
			for _, m := range testFunc.FindAllSubmatch(b, -1) {
				if re.Match(m[1]) {
					found = true
					return filepath.SkipAll
				}
			}
			return nil
		})
		if found {
			return true
		}
	}
	return false
}
