package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReportKeepsClosingLinesFailuresAndListsSkips(t *testing.T) {
	t.Parallel()
	in := strings.Join([]string{
		`{"Action":"start","Package":"p/a"}`,
		`{"Action":"run","Package":"p/a","Test":"TestOK"}`,
		`{"Action":"output","Package":"p/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}`,
		`{"Action":"output","Package":"p/a","Test":"TestOK","Output":"    a_test.go:9: chatter\n"}`,
		`{"Action":"output","Package":"p/a","Test":"TestOK","Output":"--- PASS: TestOK (0.00s)\n"}`,
		`{"Action":"pass","Package":"p/a","Test":"TestOK"}`,
		`{"Action":"output","Package":"p/a","Test":"TestNoPG","Output":"=== RUN   TestNoPG\n"}`,
		`{"Action":"output","Package":"p/a","Test":"TestNoPG","Output":"    c.go:100: pgtest: no PostgreSQL server binaries\n"}`,
		`{"Action":"output","Package":"p/a","Test":"TestNoPG","Output":"--- SKIP: TestNoPG (0.00s)\n"}`,
		`{"Action":"skip","Package":"p/a","Test":"TestNoPG"}`,
		`{"Action":"output","Package":"p/a","Output":"PASS\n"}`,
		`{"Action":"output","Package":"p/a","Output":"ok  \tp/a\t0.01s\n"}`,
		`{"Action":"pass","Package":"p/a"}`,
		`{"Action":"output","Package":"p/b","Test":"TestBad","Output":"=== RUN   TestBad\n"}`,
		`{"Action":"output","Package":"p/b","Test":"TestBad","Output":"    b_test.go:5: want 1, got 2\n"}`,
		`{"Action":"output","Package":"p/b","Test":"TestBad","Output":"--- FAIL: TestBad (0.00s)\n"}`,
		`{"Action":"fail","Package":"p/b","Test":"TestBad"}`,
		`{"Action":"output","Package":"p/b","Test":"TestHang","Output":"panic: test timed out\n"}`,
		`{"Action":"output","Package":"p/b","Output":"FAIL\n"}`,
		`{"Action":"output","Package":"p/b","Output":"FAIL\tp/b\t0.02s\n"}`,
		`{"Action":"fail","Package":"p/b"}`,
		`# p/c`,
		`c.go:1: syntax error`,
	}, "\n") + "\n"
	var out strings.Builder
	require.NoError(t, run(strings.NewReader(in), &out))
	require.Equal(t, "ok  \tp/a\t0.01s\n"+
		"    b_test.go:5: want 1, got 2\n--- FAIL: TestBad (0.00s)\n"+
		"panic: test timed out\n"+
		"FAIL\nFAIL\tp/b\t0.02s\n"+
		"# p/c\nc.go:1: syntax error\n"+
		"\ntest: 1 test(s) SKIPPED:\n  SKIP p/a TestNoPG: c.go:100: pgtest: no PostgreSQL server binaries\n", out.String())
}
