package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/chi/v5/middleware"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/labels"
	"github.com/inboxhq/inbox/internal/provider"
)

var (
	errUnknownSource = errors.New("unknown source")
	errTooLarge      = errors.New("body exceeds the source's limit")
)

// readError is a failure to read the request body: the client stopped
// sending, or sent too slowly. It is the client's, not the database's.
type readError struct{ err error }

func (e *readError) Error() string { return "read body: " + e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

// errorBody is every error response's JSON.
type errorBody struct {
	Error     string `json:"error"`
	Status    string `json:"status"`
	RequestID string `json:"request_id,omitempty"`
}

// classify maps err to a status code, the outcome name used in logs and
// metrics, and the message the client sees. It is the only place that does.
func classify(err error) (code int, outcome labels.IngestOutcome, msg string) {
	var sigErr *provider.SignatureError
	var fmtErr *provider.FormatError
	var conflict *envelope.ConflictError
	var maxBytes *http.MaxBytesError
	var ref *refusal
	switch {
	case errors.Is(err, errUnknownSource):
		return http.StatusNotFound, labels.UnknownSource, "unknown source"
	case errors.Is(err, errTooLarge), errors.As(err, &maxBytes):
		return http.StatusRequestEntityTooLarge, labels.TooLarge, errTooLarge.Error()
	case errors.As(err, new(*readError)):
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return http.StatusRequestTimeout, labels.ReadTimeout, "request body not received in time"
		}
		return http.StatusBadRequest, labels.BadRequest, "request body could not be read"
	case errors.As(err, &sigErr):
		return http.StatusUnauthorized, labels.BadSignature, sigErr.Error()
	case errors.As(err, &fmtErr):
		return http.StatusBadRequest, labels.BadRequest, fmtErr.Error()
	case errors.As(err, &conflict):
		// Only the provider holds the secret, so a verified same-id delivery
		// with another body is its own re-rendered resend (Stripe renders
		// pending_webhooks at send time): answered 2xx, as a non-2xx makes
		// providers retry for days and then disable the endpoint.
		return http.StatusOK, labels.Conflict, "duplicate"
	case errors.As(err, &ref):
		return http.StatusServiceUnavailable, labels.Overloaded, ref.msg
	case pgCode(err) == "42501":
		// insufficient_privilege: the role lacks a grant. Nothing is lost
		// while an operator fixes it: the provider retries.
		return http.StatusServiceUnavailable, labels.DBPermission, "storage unavailable, delivery not acknowledged; retry later"
	case unavailable(err):
		return http.StatusServiceUnavailable, labels.Unavailable, "storage unavailable, delivery not acknowledged; retry later (if it was stored after all, the retry answers 200 duplicate)"
	default:
		return http.StatusInternalServerError, labels.InternalError, "internal error"
	}
}

// unavailable reports whether err means the database is unreachable or
// overloaded (so a retry later may succeed), as opposed to a bug.
func unavailable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return true
	}
	if pgconn.Timeout(err) || pgconn.SafeToRetry(err) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code[:2] {
		case "08", // connection exception
			"53", // insufficient resources (too many connections, disk full)
			"57", // operator intervention: shutdown, query canceled, statement timeout
			"40": // serialization failure, deadlock: retry
			return true
		}
		// The server ended our session (idle_in_transaction_session_timeout):
		// the transaction rolled back.
		return pgErr.Code == "25P03"
	}
	// A connection cut under us mid-statement.
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// writeError answers err with its status and logs it.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error, log *slog.Logger) {
	code, outcome, msg := classify(err)
	var conflict *envelope.ConflictError
	if errors.As(err, &conflict) {
		// Acknowledged as a duplicate; the variant is in envelope_conflict,
		// counted (outcome "conflict") and logged for the operator. The log
		// names ids only, never the body.
		log.WarnContext(r.Context(), "delivery id reused with a different body: acknowledged as a duplicate, original kept, variant recorded",
			"envelope_id", conflict.EnvelopeID, "conflict_id", conflict.ConflictID, "kept", conflict.Kept, "status", code, "outcome", outcome)
		s.observe(r, outcome, string(conflict.Kept))
		traceResult(r, code, string(outcome), conflict.EnvelopeID)
		writeJSON(w, code, acceptedBody{EnvelopeID: conflict.EnvelopeID, Status: msg})
		return
	}
	body := errorBody{Error: msg, Status: string(outcome), RequestID: middleware.GetReqID(r.Context())}
	if code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(s.retryAfterSeconds))
	}
	lvl := slog.LevelInfo
	switch {
	case code == http.StatusInternalServerError, outcome == labels.DBPermission:
		lvl = slog.LevelError
	case code == http.StatusServiceUnavailable, code == http.StatusUnauthorized:
		lvl = slog.LevelWarn
	}
	reason := ""
	var sigErr *provider.SignatureError
	var ref *refusal
	switch {
	case errors.As(err, &sigErr):
		reason = sigErr.Reason
	case errors.As(err, &ref):
		reason = string(ref.reason)
	}
	switch {
	case ref != nil:
		// Refusals come in floods (every delivery while the database is
		// stalled): one line a second says so, with how many it stands for.
		if n := s.refusals.due(time.Now()); n > 0 {
			log.WarnContext(r.Context(), "deliveries refused at once: not acknowledged, providers retry", "status", code, "outcome", outcome,
				"reason", reason, "refused_since_last_line", n, "store_queue_age_ms", s.store.QueueAge().Milliseconds())
		}
	default:
		// err's text is ours (verifier reasons, store errors): never a
		// secret, a signature value or the body.
		log.Log(r.Context(), lvl, "delivery not acknowledged", "status", code, "outcome", outcome, "error", err.Error())
	}
	s.observe(r, outcome, reason)
	traceResult(r, code, string(outcome), 0)
	writeJSON(w, code, body)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// pgCode returns err's SQLSTATE, or "".
func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// lineLimiter lets one log line a second through and counts the events in
// between, so a flood is said once a second with its size.
type lineLimiter struct {
	mu      sync.Mutex
	last    time.Time
	pending int
}

// due counts one event and returns how many the line about to be written
// stands for (this one included), or 0 when a line went out less than a
// second ago.
func (l *lineLimiter) due(now time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending++
	if now.Sub(l.last) < time.Second {
		return 0
	}
	n := l.pending
	l.last, l.pending = now, 0
	return n
}
