package cli_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/cli"
)

func TestSafeEscapesTerminalControls(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"plain text\twith tab\n":   "plain text\twith tab\n",
		"café ✓ 日本":                "café ✓ 日本",
		"a\x1b[2Jb":                `a\u001b[2Jb`,
		"csi \u009b31m red":        `csi \u009b31m red`,
		"evt_\u202egnp.exe":        `evt_\u202egnp.exe`,
		"zero\u200bwidth\ufeff":    `zero\u200bwidth\ufeff`,
		"isolate \u2066x\u2069":    `isolate \u2066x\u2069`,
		"line\u2028sep\rcr\x7fdel": `line\u2028sep\u000dcr\u007fdel`,
		"tag \U000E0041":           `tag \udb40\udc41`,
		"bad \xff utf8":            `bad \ufffd utf8`,
		"bell\a and nul\x00":       `bell\u0007 and nul\u0000`,
	}
	for in, want := range cases {
		var out bytes.Buffer
		_, err := cli.Safe(&out).Write([]byte(in))
		require.NoError(t, err)
		require.Equal(t, want, out.String(), "%q", in)
	}
}

// A rune cut across two writes is escaped (or kept) as a whole.
func TestSafeRuneAcrossWrites(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	w := cli.Safe(&out)
	in := []byte("x\u202ey\u00e9z")
	for i := range in {
		_, err := w.Write(in[i : i+1])
		require.NoError(t, err)
	}
	require.Equal(t, `x\u202eyéz`, out.String())
}

// JSON through Safe stays valid and decodes to the same strings.
func TestSafeKeepsJSONValid(t *testing.T) {
	t.Parallel()
	v := map[string]string{"id": "evt_\u202e\u200b\u009b\U000E0041", "ua": "Mozilla \x1b[1m"}
	var out bytes.Buffer
	require.NoError(t, json.NewEncoder(cli.Safe(&out)).Encode(v))
	require.False(t, strings.ContainsAny(out.String(), "\u202e\u200b\u009b\x1b"))
	var back map[string]string
	require.NoError(t, json.Unmarshal(out.Bytes(), &back))
	require.Equal(t, v, back)
}
