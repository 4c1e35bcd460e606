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
