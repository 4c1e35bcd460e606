package ingest

import (
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
)

// closeChunked closes the connection after answering any request with a
// Transfer-Encoding. RFC 9112 6.1: a request with both Content-Length and
// Transfer-Encoding may be processed by its Transfer-Encoding, but the
// connection MUST then be closed (it may be a request smuggling attempt
// through a proxy that read the Content-Length). net/http deletes the
// Content-Length of such a request before the handler runs, so the two
// cannot be told apart here: every chunked request closes its connection.
// Providers send a Content-Length; a chunked sender only reconnects.
func closeChunked(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TransferEncoding) > 0 {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}

// probeMethods are the methods methodNotAllowed checks for the Allow header.
var probeMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// methodNotAllowed answers 405 with the Allow header RFC 9110 15.5.6
// requires: the methods the path's route serves.
func (s *Server) methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range probeMethods {
		if s.router.Match(chi.NewRouteContext(), m, r.URL.Path) {
			allow = append(allow, m)
		}
	}
	if len(allow) == 0 {
		// No method is served there (PRI *, a request target that is no
		// path): nothing to allow, so nothing is there.
		writeJSON(w, http.StatusNotFound, errorBody{Error: "not found", Status: "not_found", RequestID: requestIDOf(r)})
		return
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	writeJSON(w, http.StatusMethodNotAllowed, errorBody{Error: "method not allowed", Status: "method_not_allowed", RequestID: requestIDOf(r)})
}
