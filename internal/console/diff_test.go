package console

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDiffLines(t *testing.T) {
	lines := func(s string) []string { return strings.Split(s, "\n") }
	for _, c := range []struct {
		name string
		a, b string
		want []diffLine
	}{
		{"equal: no change lines", "a\nb", "a\nb", []diffLine{}},
		{"one line changed", "a\nb\nc", "a\nB\nc", []diffLine{{" ", "a"}, {"-", "b"}, {"+", "B"}, {" ", "c"}}},
		{"added at the end", "a", "a\nb", []diffLine{{" ", "a"}, {"+", "b"}}},
		{"removed at the start", "x\na", "a", []diffLine{{"-", "x"}, {" ", "a"}}},
		{"context is 3 lines, the rest elided",
			"1\n2\n3\n4\n5\n6\n7\n8\n9", "1\n2\n3\n4\nX\n6\n7\n8\n9",
			[]diffLine{{" ", "…"}, {" ", "2"}, {" ", "3"}, {" ", "4"}, {"-", "5"}, {"+", "X"}, {" ", "6"}, {" ", "7"}, {" ", "8"}, {" ", "…"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := diffLines(lines(c.a), lines(c.b))
			if len(c.want) == 0 {
				for _, l := range got {
					require.Equal(t, " ", l.Op, "no change in %v", got)
				}
				return
			}
			require.Equal(t, c.want, got)
		})
	}
	// Beyond maxDiffLines differing lines on a side: no diff, and no
	// table of their product.
	var a, b []string
	for i := range maxDiffLines + 1 {
		a = append(a, "a"+strings.Repeat("x", i%7))
		b = append(b, "b"+strings.Repeat("y", i%5))
	}
	require.Nil(t, diffLines(a, b))
	require.NotNil(t, diffLines(a[:maxDiffLines], b[:maxDiffLines]), "at the bound it still diffs")
}
