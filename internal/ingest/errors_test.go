package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/labels"
	"github.com/inboxhq/inbox/internal/provider"
)

// wrapped is how store errors reach classify: wrapped with context.
func wrapped(err error) error { return fmt.Errorf("insert envelope: %w", err) }

func pgErr(code string) error {
	return &pgconn.PgError{Severity: "ERROR", Code: code, Message: "test " + code}
}

// connectError is a real pgconn connect error: a server that accepts the
// connection and drops it at once.
func connectError(t *testing.T) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = pgconn.Connect(ctx, "postgres://postgres@"+ln.Addr().String()+"/x?sslmode=disable&connect_timeout=2")
	require.Error(t, err)
	return err
}

// Errors that mean "the database is unavailable or overloaded, try later"
// answer 503 (with Retry-After); anything else is a bug and answers 500.
// A 500 for an outage makes providers count failures toward disabling the
// endpoint; a 503 for a bug hides it behind endless retries.
func TestUnavailableErrorsAre503AndBugsAre500(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	deadline, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	cases := []struct {
		name string
		err  error
		code int
	}{
		{"admin_shutdown 57P01 (server shutting down, pg_terminate_backend)", pgErr("57P01"), 503},
		{"crash_shutdown 57P02", pgErr("57P02"), 503},
		{"cannot_connect_now 57P03 (starting up, recovering)", pgErr("57P03"), 503},
		{"query_canceled 57014 (statement_timeout, pg_cancel_backend)", pgErr("57014"), 503},
		{"connection_exception 08000", pgErr("08000"), 503},
		{"connection_does_not_exist 08003", pgErr("08003"), 503},
		{"connection_failure 08006", pgErr("08006"), 503},
		{"sqlclient_unable_to_establish_sqlconnection 08001", pgErr("08001"), 503},
		{"too_many_connections 53300", pgErr("53300"), 503},
		{"out_of_memory 53200", pgErr("53200"), 503},
		{"disk_full 53100", pgErr("53100"), 503},
		{"serialization_failure 40001", pgErr("40001"), 503},
		{"deadlock_detected 40P01", pgErr("40P01"), 503},
		{"idle_in_transaction_session_timeout 25P03", pgErr("25P03"), 503},
		{"connection refused", refused, 503},
		{"connection reset", reset, 503},
		{"connection dropped at connect", connectError(t), 503},
		{"EOF mid-statement", io.EOF, 503},
		{"unexpected EOF mid-statement", io.ErrUnexpectedEOF, 503},
		{"context deadline (the store timeout)", context.DeadlineExceeded, 503},
		{"context deadline from a context", deadline.Err(), 503},
		{"client went away", context.Canceled, 503},

		{"unique_violation 23505 (never expected: ON CONFLICT handles it)", pgErr("23505"), 500},
		{"undefined_table 42P01 (schema not migrated)", pgErr("42P01"), 500},
		{"undefined_column 42703", pgErr("42703"), 500},
		{"insufficient_privilege 42501 (a missing grant: retried once an operator fixes it)", pgErr("42501"), 503},
		{"invalid_text_representation 22P02", pgErr("22P02"), 500},
		{"not_null_violation 23502", pgErr("23502"), 500},
		{"raise_exception P0001", pgErr("P0001"), 500},
		{"in_failed_sql_transaction 25P02", pgErr("25P02"), 500},
		{"no rows where one was expected", pgx.ErrNoRows, 500},
		{"a plain bug", errors.New("boom"), 500},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, err := range []error{tc.err, wrapped(tc.err), wrapped(fmt.Errorf("enqueue envelope 7: %w", tc.err))} {
				code, outcome, msg := classify(err)
				require.Equal(t, tc.code, code, "%v", err)
				permission := pgCode(err) == "42501" // 503 too, named for what the operator must fix
				require.Equal(t, code == 503 && !permission, unavailable(err))
				if permission {
					require.Equal(t, labels.DBPermission, outcome)
				} else if code == 503 {
					require.Equal(t, labels.Unavailable, outcome)
				} else {
					require.Equal(t, labels.InternalError, outcome)
					require.Equal(t, "internal error", msg, "a 500 shows the client nothing of the error")
				}
			}
		})
	}
}

// The client's own errors and the store's answers keep their statuses, even
// when they wrap something that looks like an outage.
func TestClientErrorsKeepTheirStatus(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		err  error
		code int
	}{
		{"unknown source", errUnknownSource, http.StatusNotFound},
		{"too large", errTooLarge, http.StatusRequestEntityTooLarge},
		{"too large while reading", &http.MaxBytesError{Limit: 10}, http.StatusRequestEntityTooLarge},
		{"body read timeout", &readError{&net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}}, http.StatusRequestTimeout},
		{"body cut short (EOF, not the database's)", &readError{io.ErrUnexpectedEOF}, http.StatusBadRequest},
		{"bad signature", &provider.SignatureError{Reason: "mismatch"}, http.StatusUnauthorized},
		{"no delivery id", &provider.FormatError{Reason: "no delivery id"}, http.StatusBadRequest},
		{"conflict (the provider's own re-rendered resend)", &envelope.ConflictError{EnvelopeID: 1, ConflictID: 2}, http.StatusOK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, _, _ := classify(tc.err)
			require.Equal(t, tc.code, code)
		})
	}
}
