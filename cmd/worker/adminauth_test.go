package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The admin listener (metrics, River UI) binds loopback unless an address
// is given.
func TestAdminListenerDefaultsToLoopback(t *testing.T) {
	t.Parallel()
	_, stderr, err := admRun(context.Background(), "", "run", "-h")
	require.Error(t, err)
	require.Contains(t, stderr, `(default "127.0.0.1:9090")`)
}

func TestUIPasswordStrength(t *testing.T) {
	t.Parallel()
	for _, weak := range []string{"", " ", "admin", "elevenchars", strings.Repeat(" ", 20), strings.Repeat("x", 20), strings.Repeat("é", 30), "\t\t\t\t\n\n\n\n    "} {
		err := checkUIPassword(weak)
		require.Error(t, err, "%q", weak)
		if weak != "" && strings.TrimSpace(weak) != "" {
			require.NotContains(t, err.Error(), weak, "the error never quotes the password")
		}
	}
	for _, ok := range []string{"twelve chars", "correct horse battery staple", "日本語のパスワードです十二"} {
		require.NoError(t, checkUIPassword(ok), "%q", ok)
	}
}

func TestLoopback(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{"127.0.0.1:9090": true, "[::1]:9090": true, "0.0.0.0:9090": false, "[::]:9090": false, "10.0.0.5:9090": false, "bad": false} {
		require.Equal(t, want, loopback(addr), addr)
	}
}

// River UI credentials come from River's own variable names or the older
// ones; both set differently is refused without quoting either value.
func TestUICredentialNames(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"RIVER_BASIC_AUTH_PASS": "from-river-name"}, "from-river-name"},
		{map[string]string{"RIVERUI_PASSWORD": "from-old-name"}, "from-old-name"},
		{map[string]string{"RIVER_BASIC_AUTH_PASS": "same-value", "RIVERUI_PASSWORD": "same-value"}, "same-value"},
		{map[string]string{}, ""},
	} {
		got, err := uiCredential(env(tc.env), "RIVER_BASIC_AUTH_PASS", "RIVERUI_PASSWORD")
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
	}
	_, err := uiCredential(env(map[string]string{"RIVER_BASIC_AUTH_PASS": "secret-one-xyz", "RIVERUI_PASSWORD": "secret-two-xyz"}), "RIVER_BASIC_AUTH_PASS", "RIVERUI_PASSWORD")
	require.EqualError(t, err, "RIVER_BASIC_AUTH_PASS and RIVERUI_PASSWORD are both set, to different values: set one")
}
