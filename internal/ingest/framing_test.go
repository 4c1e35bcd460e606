package ingest_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/provider"
)

// rawRequest renders a signed GitHub delivery as HTTP/1.1 bytes with extra
// header lines and the given body bytes on the wire.
func rawRequest(t *testing.T, id string, extra []string, wire []byte) []byte {
	t.Helper()
	_, d := sample(provider.GitHub, id)
	h, err := d.Headers()
	require.NoError(t, err)
	var req bytes.Buffer
	req.WriteString("POST /webhooks/github HTTP/1.1\r\nHost: x\r\n")
	for k, vs := range h {
		for _, v := range vs {
			fmt.Fprintf(&req, "%s: %s\r\n", k, v)
		}
	}
	for _, l := range extra {
		req.WriteString(l + "\r\n")
	}
	req.WriteString("\r\n")
	req.Write(wire)
	return req.Bytes()
}

func chunk(body []byte) []byte {
	return fmt.Appendf(nil, "%x\r\n%s\r\n0\r\n\r\n", len(body), body)
}

// RFC 9112 6.1: a request with both Content-Length and Transfer-Encoding:
// chunked is answered and its connection closed, so nothing smuggled after
// it on the same connection is ever read as a request.
func TestContentLengthWithChunkedClosesTheConnection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, d := sample(provider.GitHub, "clte-1")
	first := rawRequest(t, "clte-1", []string{"Content-Length: 4", "Transfer-Encoding: chunked"}, chunk(d.Body))
	smuggled := []byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")

	conn, err := net.Dial("tcp", strings.TrimPrefix(b.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(20*time.Second)))
	_, err = conn.Write(append(first, smuggled...))
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode, "processed by its Transfer-Encoding")
	require.True(t, resp.Close, "the response says the connection closes")
	_, err = br.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the connection is closed; the smuggled request is not answered")
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope_with_body WHERE delivery_id = 'clte-1' AND body = $1`, d.Body))

	// A request with a Content-Length alone keeps its connection.
	_, d2 := sample(provider.GitHub, "cl-only")
	conn2, err := net.Dial("tcp", strings.TrimPrefix(b.url, "http://"))
	require.NoError(t, err)
	defer conn2.Close()
	require.NoError(t, conn2.SetDeadline(time.Now().Add(20*time.Second)))
	_, err = conn2.Write(append(rawRequest(t, "cl-only", []string{fmt.Sprintf("Content-Length: %d", len(d2.Body))}, d2.Body), smuggled...))
	require.NoError(t, err)
	br2 := bufio.NewReader(conn2)
	for _, want := range []int{http.StatusAccepted, http.StatusOK} {
		resp, err := http.ReadResponse(br2, nil)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode)
	}
}

// 405 carries the Allow header (RFC 9110 15.5.6).
func TestMethodNotAllowedSaysAllow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct{ method, path, allow string }{
		{http.MethodGet, "/webhooks/stripe", "POST"},
		{http.MethodPut, "/webhooks/anything", "POST"},
		{http.MethodPost, "/healthz", "GET"},
		{http.MethodDelete, "/readyz", "GET"},
	} {
		req, err := http.NewRequest(tc.method, b.url+tc.path, nil)
		require.NoError(t, err)
		r := do(t, req)
		require.Equal(t, http.StatusMethodNotAllowed, r.code, "%s %s", tc.method, tc.path)
		require.Equal(t, tc.allow, r.header.Get("Allow"), "%s %s", tc.method, tc.path)
	}
}

// A request for no path (PRI *, OPTIONS-less asterisk targets) is not a
// 405 with an empty Allow (issue 22): nothing is served there.
func TestAsteriskTargetIsNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, method := range []string{"PRI", "GET", "POST"} {
		c, err := net.Dial("tcp", strings.TrimPrefix(b.url, "http://"))
		require.NoError(t, err)
		_, err = fmt.Fprintf(c, "%s * HTTP/1.1\r\nHost: x\r\n\r\n", method)
		require.NoError(t, err)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		resp.Body.Close()
		c.Close()
		require.NotEqual(t, http.StatusMethodNotAllowed, resp.StatusCode, method)
		require.Empty(t, resp.Header.Values("Allow"), method)
		require.Less(t, resp.StatusCode, 500, method)
	}
}
