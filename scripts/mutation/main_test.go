package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseReadsEditsAndRejectsIncompleteMutations(t *testing.T) {
	t.Parallel()
	ms, err := parse([]byte(`# comment
[a/one]
guarantee g1
tests ./x ./y
run TestX
timeout 2m
file f.go
from if a {\n\treturn
to if b {
file g.go
from  WHERE id = $1 AND x
to  WHERE id = $1
count 2

[a/two]
guarantee g2
tests ./z
equivalent because
file h.go
from x
to y
`))
	require.NoError(t, err)
	require.Equal(t, []mutation{
		{Name: "a/one", Guarantee: "g1", Tests: []string{"./x", "./y"}, Run: "TestX", Timeout: 2 * time.Minute, Line: 2, Edits: []edit{
			{File: "f.go", From: "if a {\n\treturn", To: "if b {", Count: 1},
			{File: "g.go", From: "WHERE id = $1 AND x", To: "WHERE id = $1", Count: 2},
		}},
		{Name: "a/two", Guarantee: "g2", Tests: []string{"./z"}, Equivalent: "because", Line: 15, Edits: []edit{{File: "h.go", From: "x", To: "y", Count: 1}}},
	}, ms)

	for name, src := range map[string]string{
		"no guarantee":     "[m]\ntests ./x\nfile f\nfrom a\nto b\n",
		"no tests":         "[m]\nguarantee g\nfile f\nfrom a\nto b\n",
		"no edit":          "[m]\nguarantee g\ntests ./x\n",
		"from before file": "[m]\nguarantee g\ntests ./x\nfrom a\n",
		"same from and to": "[m]\nguarantee g\ntests ./x\nfile f\nfrom a\nto a\n",
		"unknown key":      "[m]\nguarantee g\ntests ./x\nfile f\nfrom a\nto b\nfoo bar\n",
		"twice":            "[m]\nguarantee g\ntests ./x\nfile f\nfrom a\nto b\n[m]\nguarantee g\ntests ./x\nfile f\nfrom a\nto b\n",
		"outside":          "guarantee g\n",
	} {
		_, err := parse([]byte(src))
		require.Error(t, err, name)
	}
}

// A snippet that is not in its file (the code was rewritten) is NOT FOUND,
// never counted as caught, and the file is left as it was.
func TestApplyReportsSnippetNotFoundAndRestoresFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f := filepath.Join(dir, "a.go")
	require.NoError(t, os.WriteFile(f, []byte("package a\n\nvar x = 1\n"), 0o644))
	m := mutation{Name: "m", Guarantee: "g", Tests: []string{"./..."}, Edits: []edit{
		{File: "a.go", From: "var x = 1", To: "var x = 2", Count: 1},
		{File: "a.go", From: "gone()", To: "other()", Count: 1},
	}}
	r := apply(dir, m, time.Minute, false)
	require.Equal(t, notFound, r.status)
	require.Contains(t, r.detail, `"gone()" occurs 0 times, want 1`)
	b, err := os.ReadFile(f)
	require.NoError(t, err)
	require.Equal(t, "package a\n\nvar x = 1\n", string(b), "restored")

	r = apply(dir, mutation{Name: "m", Guarantee: "g", Tests: []string{"./..."}, Edits: []edit{{File: "a.go", From: "var x = 1", To: "var x = 2", Count: 1}}}, time.Minute, true)
	require.Equal(t, found, r.status)
}

// An edit of a migration's function that a later migration defines again is
// NOT FOUND: no database runs that definition, so the mutation would survive
// whatever the tests do. An edit of the definition in force, or of a
// statement outside any function, applies.
func TestApplyReportsAFunctionALaterMigrationReplaces(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "migrations"), 0o755))
	for name, src := range map[string]string{
		"00001_a.sql": "-- +goose Up\nCREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;\nCREATE INDEX i ON t (x);\n" +
			"-- +goose Down\nCREATE OR REPLACE FUNCTION g() RETURNS int LANGUAGE sql AS $$ SELECT 3 $$;\n",
		"00002_b.sql": "-- +goose Up\nCREATE OR REPLACE FUNCTION public.f()\n RETURNS int LANGUAGE sql AS $body$ SELECT 2 $body$;\n" +
			"-- +goose Down\nCREATE OR REPLACE FUNCTION g() RETURNS int LANGUAGE sql AS $$ SELECT 4 $$;\n",
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "migrations", name), []byte(src), 0o644))
	}
	one := func(file, from string) result {
		return apply(dir, mutation{Name: "m", Guarantee: "g", Tests: []string{"./..."},
			Edits: []edit{{File: "migrations/" + file, From: from, To: from + " + 0", Count: 1}}}, time.Minute, true)
	}
	r := one("00001_a.sql", "SELECT 1")
	require.Equal(t, notFound, r.status)
	require.Contains(t, r.detail, "the function f it edits is replaced by migrations/00002_b.sql")
	require.Equal(t, found, one("00002_b.sql", "SELECT 2").status, "the definition in force")
	require.Equal(t, found, one("00001_a.sql", "CREATE INDEX i ON t (x)").status, "outside any function")
	require.Equal(t, found, one("00001_a.sql", "SELECT 3").status, "a Down section (only a later Up replaces)")
}

// A run pattern that names no test of the mutation's packages runs nothing:
// the mutation is NOT FOUND, never a survivor or a catch.
func TestApplyReportsARunPatternThatNamesNoTest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a", "a.go"), []byte("package a\n\nvar x = 1\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a", "b", "b_test.go"), []byte("package b\n\nfunc TestDeep(t *testing.T) {}\n"), 0o644))
	one := func(tests, run string) result {
		return apply(dir, mutation{Name: "m", Guarantee: "g", Tests: []string{tests}, Run: run,
			Edits: []edit{{File: "a/a.go", From: "var x = 1", To: "var x = 2", Count: 1}}}, time.Minute, true)
	}
	r := one("./a", "TestDeep")
	require.Equal(t, notFound, r.status)
	require.Contains(t, r.detail, `run "TestDeep" names no test of ./a`)
	require.Equal(t, found, one("./a/...", "TestDeep").status, "a tree holds it")
	require.Equal(t, found, one("./a/b", "TestDe|TestNone").status, "an alternative matches, as go test -run does")
	require.Equal(t, notFound, one("./a/b", "TestNone/TestDeep").status, "the top-level part decides")
}
