package admin

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxhq/inbox/internal/envelope"
)

// Detail is one envelope and everything recorded about it.
type Detail struct {
	Envelope  EnvelopeDetail `json:"envelope"`
	Attempts  []Attempt      `json:"attempts"`
	Replays   []ReplayRecord `json:"replays"`
	Conflicts []Conflict     `json:"conflicts"`
	Jobs      []Job          `json:"jobs"`
	// Ledger is the envelope's ledger transaction, or nil when it posted none.
	Ledger *LedgerTransaction `json:"ledger_transaction"`
}

// Body encodings of EnvelopeDetail.BodyEncoding.
const (
	BodyText   = "text"   // valid UTF-8, as is
	BodyBase64 = "base64" // standard encoding with padding
)

// EnvelopeDetail is the envelope row. Headers are as stored: signature
// values were replaced by "[redacted]" before they were stored.
type EnvelopeDetail struct {
	Summary
	Headers    map[string]string `json:"headers"`
	BodySHA256 string            `json:"body_sha256"` // hex
	// Body is the raw body (see BodyEncoding); nil when omitted or purged.
	Body            *string         `json:"body"`
	BodyEncoding    string          `json:"body_encoding,omitempty"`
	BodyPurgedAt    *time.Time      `json:"body_purged_at"`
	SignedAt        *time.Time      `json:"signed_at"`
	Result          json.RawMessage `json:"result"`
	LastDuplicateAt *time.Time      `json:"last_duplicate_at"`
	// Origin is webhook or backfill; BackfillRunID the backfill_run that
	// stored a backfilled one.
	Origin        string `json:"origin"`
	BackfillRunID *int64 `json:"backfill_run_id"`
	// TraceContext is the W3C traceparent of the ingest request that
	// stored it (its trace id names the trace in the tracing backend);
	// NULL when ingest ran with tracing off.
	TraceContext *string `json:"trace_context"`
}

// Attempt is an envelope_attempt row.
type Attempt struct {
	ID         int64     `json:"id"`
	JobID      *int64    `json:"job_id"`
	Attempt    int       `json:"attempt"`
	Outcome    string    `json:"outcome"`
	Error      *string   `json:"error"`
	Cause      *string   `json:"cause"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	DurationMS float64   `json:"duration_ms"`
	Worker     *string   `json:"worker"`
}

// ReplayRecord is an envelope_replay row.
type ReplayRecord struct {
	ID          int64           `json:"id"`
	Actor       string          `json:"actor"`
	Reason      string          `json:"reason"`
	Filter      json.RawMessage `json:"filter"`
	BatchID     *string         `json:"batch_id"`
	PriorStatus string          `json:"prior_status"`
	JobID       *int64          `json:"job_id"`
	ReplayedAt  time.Time       `json:"replayed_at"`
}

// Conflict is an envelope_conflict row: a delivery that reused this
// envelope's delivery id with another body. Its body is not included.
type Conflict struct {
	ID         int64             `json:"id"`
	DeliveryID string            `json:"delivery_id"`
	BodySHA256 string            `json:"body_sha256"` // hex
	BodySize   int               `json:"body_size"`
	Headers    map[string]string `json:"headers"`
	ReceivedAt time.Time         `json:"received_at"`
}

// Job is a River job that processes the envelope.
type Job struct {
	ID          int64      `json:"id"`
	State       string     `json:"state"`
	Attempt     int        `json:"attempt"`
	MaxAttempts int        `json:"max_attempts"`
	CreatedAt   time.Time  `json:"created_at"`
	ScheduledAt time.Time  `json:"scheduled_at"`
	FinalizedAt *time.Time `json:"finalized_at"`
}

// LedgerTransaction is a ledger_transaction row with its entries.
type LedgerTransaction struct {
	ID             int64         `json:"id"`
	IdempotencyKey string        `json:"idempotency_key"`
	Kind           string        `json:"kind"`
	Merchant       string        `json:"merchant"`
	PaymentKey     string        `json:"payment_key"`
	Currency       string        `json:"currency"`
	AmountMinor    int64         `json:"amount_minor"`
	Description    string        `json:"description"`
	PostedAt       time.Time     `json:"posted_at"`
	Entries        []LedgerEntry `json:"entries"`
}

// LedgerEntry is a ledger_entry row with its account's name: debits
// positive, credits negative.
type LedgerEntry struct {
	ID          int64  `json:"id"`
	AccountID   int64  `json:"account_id"`
	Merchant    string `json:"merchant"`
	Account     string `json:"account"`
	Currency    string `json:"currency"`
	AmountMinor int64  `json:"amount_minor"`
}

// ShowOptions tune Show.
type ShowOptions struct {
	// NoBody leaves the body out (it is not even read).
	NoBody bool
}

// Show returns envelope id with its attempts, replays, conflicts, jobs and
// ledger transaction, read in one read-only snapshot: it changes nothing. An
// unknown id returns a *NotFoundError.
func Show(ctx context.Context, pool *pgxpool.Pool, id int64, opts ShowOptions) (*Detail, error) {
	d := &Detail{}
	err := readOnly(ctx, pool, func(tx pgx.Tx, _ time.Time) error {
		if err := loadEnvelope(ctx, tx, id, opts, &d.Envelope); err != nil {
			return err
		}
		var err error
		if d.Attempts, err = collect(ctx, tx, `
			SELECT id, job_id, attempt, outcome, error, cause, started_at, finished_at, coalesce(duration_ms, 0), worker
			  FROM envelope_attempt WHERE envelope_id = $1 ORDER BY id`, id,
			func(r pgx.Rows, a *Attempt) error {
				return r.Scan(&a.ID, &a.JobID, &a.Attempt, &a.Outcome, &a.Error, &a.Cause, &a.StartedAt, &a.FinishedAt, &a.DurationMS, &a.Worker)
			}); err != nil {
			return fmt.Errorf("load attempts: %w", err)
		}
		if d.Replays, err = collect(ctx, tx, `
			SELECT id, actor, reason, filter, batch_id::text, prior_status, job_id, replayed_at
			  FROM envelope_replay WHERE envelope_id = $1 ORDER BY id`, id,
			func(r pgx.Rows, x *ReplayRecord) error {
				return r.Scan(&x.ID, &x.Actor, &x.Reason, &x.Filter, &x.BatchID, &x.PriorStatus, &x.JobID, &x.ReplayedAt)
			}); err != nil {
			return fmt.Errorf("load replays: %w", err)
		}
		if d.Conflicts, err = collect(ctx, tx, `
			SELECT id, delivery_id, body_sha256, body_size, headers, received_at
			  FROM envelope_conflict WHERE envelope_id = $1 ORDER BY id`, id,
			func(r pgx.Rows, c *Conflict) error {
				var sum []byte
				if err := r.Scan(&c.ID, &c.DeliveryID, &sum, &c.BodySize, &c.Headers, &c.ReceivedAt); err != nil {
					return err
				}
				c.BodySHA256 = hex.EncodeToString(sum)
				return nil
			}); err != nil {
			return fmt.Errorf("load conflicts: %w", err)
		}
		jobs, err := envelope.Jobs(ctx, tx, []int64{id}, false)
		if err != nil {
			return fmt.Errorf("load jobs: %w", err)
		}
		d.Jobs = make([]Job, len(jobs))
		for i, j := range jobs {
			d.Jobs[i] = Job{ID: j.ID, State: j.State, Attempt: j.Attempt, MaxAttempts: j.MaxAttempts,
				CreatedAt: j.CreatedAt, ScheduledAt: j.ScheduledAt, FinalizedAt: j.FinalizedAt}
		}
		d.Ledger, err = loadLedger(ctx, tx, id)
		return err
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

func loadEnvelope(ctx context.Context, tx pgx.Tx, id int64, opts ShowOptions, e *EnvelopeDetail) error {
	var sum, body, result []byte
	err := tx.QueryRow(ctx, `
		SELECT `+summaryColumns+`, headers, body_sha256, CASE WHEN $2 THEN NULL ELSE body END,
		       body_purged_at, signed_at, result,
		       (SELECT max(d.received_at) FROM envelope_duplicate d WHERE d.envelope_id = envelope.id),
		       origin, backfill_run_id, trace_context
		  FROM envelope WHERE id = $1`, id, opts.NoBody).Scan(
		&e.ID, &e.Source, &e.Provider, &e.DeliveryID, &e.EventType, &e.Status, &e.ReceivedAt,
		&e.ProcessedAt, &e.Attempts, &e.LastError, &e.LastCause, &e.Duplicates, &e.BodySize, &e.Reason,
		&e.Headers, &sum, &body, &e.BodyPurgedAt, &e.SignedAt, &result, &e.LastDuplicateAt,
		&e.Origin, &e.BackfillRunID, &e.TraceContext)
	if errors.Is(err, pgx.ErrNoRows) {
		return &NotFoundError{IDs: []int64{id}}
	}
	if err != nil {
		return fmt.Errorf("load envelope %d: %w", id, err)
	}
	e.BodySHA256 = hex.EncodeToString(sum)
	if len(result) > 0 {
		e.Result = result
	}
	if body != nil {
		s, enc := string(body), BodyText
		if !utf8.Valid(body) {
			s, enc = base64.StdEncoding.EncodeToString(body), BodyBase64
		}
		e.Body, e.BodyEncoding = &s, enc
	}
	return nil
}

func loadLedger(ctx context.Context, tx pgx.Tx, envelopeID int64) (*LedgerTransaction, error) {
	var t LedgerTransaction
	err := tx.QueryRow(ctx, `
		SELECT id, idempotency_key, kind, merchant, payment_key, currency, amount_minor, description, posted_at
		  FROM ledger_transaction WHERE envelope_id = $1`, envelopeID).Scan(
		&t.ID, &t.IdempotencyKey, &t.Kind, &t.Merchant, &t.PaymentKey, &t.Currency, &t.AmountMinor, &t.Description, &t.PostedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load ledger transaction: %w", err)
	}
	t.Entries, err = collect(ctx, tx, `
		SELECT e.id, e.account_id, a.merchant, a.name, e.currency, e.amount_minor
		  FROM ledger_entry e JOIN ledger_account a ON a.id = e.account_id
		 WHERE e.transaction_id = $1 ORDER BY e.id`, t.ID,
		func(r pgx.Rows, e *LedgerEntry) error {
			return r.Scan(&e.ID, &e.AccountID, &e.Merchant, &e.Account, &e.Currency, &e.AmountMinor)
		})
	if err != nil {
		return nil, fmt.Errorf("load ledger entries: %w", err)
	}
	return &t, nil
}

// collect runs a query whose first argument is id and scans each row with
// scan; it returns an empty, non-nil slice when there are no rows.
func collect[T any](ctx context.Context, tx pgx.Tx, sql string, id int64, scan func(pgx.Rows, *T) error, more ...any) ([]T, error) {
	rows, err := tx.Query(ctx, sql, append([]any{id}, more...)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		var v T
		if err := scan(rows, &v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
