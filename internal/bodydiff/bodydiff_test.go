package bodydiff

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
		want []Line
	}{
		{"equal: no change lines", "a\nb", "a\nb", []Line{}},
		{"one line changed", "a\nb\nc", "a\nB\nc", []Line{{" ", "a"}, {"-", "b"}, {"+", "B"}, {" ", "c"}}},
		{"added at the end", "a", "a\nb", []Line{{" ", "a"}, {"+", "b"}}},
		{"removed at the start", "x\na", "a", []Line{{"-", "x"}, {" ", "a"}}},
		{"context is 3 lines, the rest elided",
			"1\n2\n3\n4\n5\n6\n7\n8\n9", "1\n2\n3\n4\nX\n6\n7\n8\n9",
			[]Line{{" ", "…"}, {" ", "2"}, {" ", "3"}, {" ", "4"}, {"-", "5"}, {"+", "X"}, {" ", "6"}, {" ", "7"}, {" ", "8"}, {" ", "…"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Lines(lines(c.a), lines(c.b))
			if len(c.want) == 0 {
				for _, l := range got {
					require.Equal(t, " ", l.Op, "no change in %v", got)
				}
				return
			}
			require.Equal(t, c.want, got)
		})
	}
	// Beyond MaxLines differing lines on a side: no diff, and no
	// table of their product.
	var a, b []string
	for i := range MaxLines + 1 {
		a = append(a, "a"+strings.Repeat("x", i%7))
		b = append(b, "b"+strings.Repeat("y", i%5))
	}
	require.Nil(t, Lines(a, b))
	require.NotNil(t, Lines(a[:MaxLines], b[:MaxLines]), "at the bound it still diffs")
}

// Compare diffs JSON bodies field by field, and says why it does not when
// it cannot.
func TestCompare(t *testing.T) {
	diff, note := Compare([]byte(`{"id":"evt_1","pending_webhooks":1}`), []byte(`{"id":"evt_1","pending_webhooks":2}`))
	require.Empty(t, note)
	require.Equal(t, []Line{{" ", "{"}, {" ", `  "id": "evt_1",`}, {"-", `  "pending_webhooks": 1`}, {"+", `  "pending_webhooks": 2`}, {" ", "}"}}, diff)

	for _, c := range []struct {
		name            string
		stored, against []byte
		note            string
	}{
		{"conflicting body purged", []byte(`{}`), nil, "the conflicting body was dropped by retention"},
		{"stored body purged", nil, []byte(`{}`), "the stored body was dropped by retention"},
		{"white space only", []byte(`{"a":1}`), []byte("{\"a\": 1}\n"), "differ only in white space"},
		{"too large", []byte(strings.Repeat("a\n", MaxLines+1)), []byte(strings.Repeat("b\n", MaxLines+1)), "too large to compare"},
	} {
		diff, note := Compare(c.stored, c.against)
		require.Nil(t, diff, c.name)
		require.Contains(t, note, c.note, c.name)
	}
}
