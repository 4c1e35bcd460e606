package ingest

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"log/slog"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/go-chi/chi/v5/middleware"
)

// MaxClientRequestIDLen bounds a client's X-Request-Id that is kept.
const MaxClientRequestIDLen = 128

// maxLoggedLen bounds any other string from a request in a log line (an
// unknown source name, for one).
const maxLoggedLen = 128

type clientRequestIDKey struct{}

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// requestID gives every request an id generated here (20 random
// characters), in the context (middleware.GetReqID reads it), in the
// X-Request-Id response header, in error bodies and in log lines. A
// client's X-Request-Id never becomes the request id: it is logged as
// client_request_id only when it is 1 to 128 characters of [A-Za-z0-9._:/+=-],
// and dropped otherwise.
func requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b [12]byte
		_, _ = rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
		id := idEncoding.EncodeToString(b[:])
		w.Header().Set("X-Request-Id", id)
		ctx := context.WithValue(r.Context(), middleware.RequestIDKey, id)
		if c := r.Header.Get("X-Request-Id"); validClientRequestID(c) {
			ctx = context.WithValue(ctx, clientRequestIDKey{}, c)
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

func validClientRequestID(s string) bool {
	if s == "" || len(s) > MaxClientRequestIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.' || c == '_' || c == ':' || c == '/' || c == '+' || c == '=' || c == '-':
		default:
			return false
		}
	}
	return true
}

// requestLogger returns the logger for one webhook request: its request id,
// the client's request id when kept, and the source name from the path,
// bounded.
func (s *Server) requestLogger(r *http.Request, source string) *slog.Logger {
	log := s.logger.With("request_id", middleware.GetReqID(r.Context()), "source", bounded(source))
	if c, ok := r.Context().Value(clientRequestIDKey{}).(string); ok {
		log = log.With("client_request_id", c)
	}
	return log
}

// bounded cuts s to maxLoggedLen bytes (on a rune boundary), saying how long
// it was.
func bounded(s string) string {
	if len(s) <= maxLoggedLen {
		return s
	}
	cut := maxLoggedLen
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "...(" + strconv.Itoa(len(s)) + " bytes)"
}

func requestIDOf(r *http.Request) string { return middleware.GetReqID(r.Context()) }
