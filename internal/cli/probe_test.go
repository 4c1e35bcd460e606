package cli

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// Probe answers 0 only for a 2xx: a 503 from /readyz and a listener that is
// not there are both 1, with the reason on stderr.
func TestProbe(t *testing.T) {
	t.Parallel()
	ready := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, http.MethodGet, r.Method)
		if !ready || r.URL.Path != "/readyz" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)

	var stderr bytes.Buffer
	require.Equal(t, 0, Probe(context.Background(), srv.URL+"/readyz", &stderr))
	require.Empty(t, stderr.String())

	ready = false
	require.Equal(t, 1, Probe(context.Background(), srv.URL+"/readyz", &stderr))
	require.Contains(t, stderr.String(), "503")

	// A port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	stderr.Reset()
	require.Equal(t, 1, Probe(context.Background(), "http://"+addr+"/readyz", &stderr))
	require.Contains(t, stderr.String(), "probe:")

	stderr.Reset()
	require.Equal(t, 1, Probe(context.Background(), "::not a url", &stderr))
	require.NotEmpty(t, stderr.String())
}

func TestProbeURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		url  string
		ok   bool
	}{
		{[]string{"--probe", "http://127.0.0.1:9091/readyz"}, "http://127.0.0.1:9091/readyz", true},
		{[]string{"-probe", "http://x/readyz"}, "http://x/readyz", true},
		{[]string{"--probe=http://x/readyz"}, "http://x/readyz", true},
		{[]string{"--probe"}, "", false},
		{[]string{"--probe", "http://x", "extra"}, "", false},
		{[]string{"--probe=http://x", "extra"}, "", false},
		{[]string{"run", "--probe", "http://x"}, "", false},
		{nil, "", false},
	} {
		url, ok := probeURL(tc.args)
		require.Equal(t, tc.ok, ok, "%q", tc.args)
		require.Equal(t, tc.url, url, "%q", tc.args)
	}
}
