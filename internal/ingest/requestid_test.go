package ingest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/provider"
)

var serverID = regexp.MustCompile(`^[A-Z2-7]{20}$`)

// Request ids are the server's. A client's X-Request-Id is logged as
// client_request_id only when short and plain, never echoed as the request
// id; an unknown source name of 60 KB is logged bounded.
func TestRequestIDsAreTheServersAndLoggedStringsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	huge := strings.Repeat("A", 60<<10)
	cases := []struct {
		name, clientID string
		kept           bool
	}{
		{"none", "", false},
		{"plain", "lb-7f3a:req/42+x=", true},
		{"60 KB", huge, false},
		{"129 chars", strings.Repeat("a", 129), false},
		{"128 chars", strings.Repeat("b", 128), true},
		{"markup", "abc<script>", false},
		{"quote", `abc"def`, false},
		{"bidi override", "abc\u202e", false},
		{"spaces", "a b", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, d := sample(provider.GitHub, "reqid-"+tc.name)
			d.Secret = "wrong" // a 401 echoes the request id in its body
			req, err := d.Request(context.Background(), b.url+"/webhooks/github")
			require.NoError(t, err)
			if tc.clientID != "" {
				req.Header.Set("X-Request-Id", tc.clientID)
			}
			r := do(t, req)
			require.Equal(t, http.StatusUnauthorized, r.code)
			var body struct {
				RequestID string `json:"request_id"`
			}
			require.NoError(t, json.Unmarshal([]byte(r.raw), &body))
			require.Regexp(t, serverID, body.RequestID)
			require.Equal(t, body.RequestID, r.header.Get("X-Request-Id"))
			line := logLine(t, b.logs.String(), body.RequestID)
			if tc.kept {
				require.Contains(t, line, `"client_request_id":"`+tc.clientID+`"`)
			} else {
				require.NotContains(t, line, "client_request_id")
			}
		})
	}

	// An unknown source named by 60 KB of path.
	resp, err := http.Post(b.url+"/webhooks/"+huge, "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	line := logLine(t, b.logs.String(), resp.Header.Get("X-Request-Id"))
	require.Less(t, len(line), 1024, "log line %d bytes", len(line))
	require.Contains(t, line, "(61440 bytes)")
	for _, l := range strings.Split(b.logs.String(), "\n") {
		require.Less(t, len(l), 2048, "no log line carries a request's long strings")
	}
}

// logLine returns the log line of the request with id.
func logLine(t *testing.T, logs, id string) string {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"request_id":"`+id+`"`) {
			return sc.Text()
		}
	}
	t.Fatalf("no log line for request %s", id)
	return ""
}
