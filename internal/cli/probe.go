package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// probeTimeout bounds one --probe request (connect, answer and body).
const probeTimeout = 3 * time.Second

// Probe is the health check of an image without a shell or curl (the
// distroless runtime image): `ingest --probe http://127.0.0.1:9091/readyz`
// GETs url and returns 0 when the answer is 2xx, else 1 with the reason on
// stderr. It reads no environment and starts nothing else.
func Probe(ctx context.Context, url string, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		fmt.Fprintf(stderr, "probe: %v\n", err)
		return 1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "probe: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		fmt.Fprintf(stderr, "probe: %s: %s\n", url, resp.Status)
		return 1
	}
	return 0
}

// probeURL returns the URL of a command line that asks for a probe
// (--probe URL or --probe=URL as the first argument).
func probeURL(args []string) (string, bool) {
	if len(args) == 0 {
		return "", false
	}
	for _, p := range []string{"--probe", "-probe"} {
		if args[0] == p && len(args) == 2 {
			return args[1], true
		}
		if v, ok := strings.CutPrefix(args[0], p+"="); ok && len(args) == 1 {
			return v, true
		}
	}
	return "", false
}
