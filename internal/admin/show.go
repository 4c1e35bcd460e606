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

	"github.com/inboxhq/inbox/internal/bodydiff"
	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/ledger"
)

// Detail is one envelope and everything recorded about it.
type Detail struct {
	Envelope EnvelopeDetail `json:"envelope"`
	Attempts []Attempt      `json:"attempts"`
	Replays  []ReplayRecord `json:"replays"`
	// Resolutions are the operators' resolves and un-resolves, oldest first.
	Resolutions []envelope.Resolution `json:"resolutions"`
	Conflicts   []Conflict            `json:"conflicts"`
	Jobs        []Job                 `json:"jobs"`
	// Ledger is the envelope's ledger transaction, or nil when it posted none.
	Ledger *LedgerTransaction `json:"ledger_transaction"`
	// ConflictDiffs compares the first ShowOptions.CompareConflicts
	// conflicts' bodies with the stored body, in Conflicts' order.
	ConflictDiffs []ConflictDiff `json:"conflict_diffs,omitempty"`
}

// ConflictDiff is a conflicting delivery's body against the stored one: a
// line diff (bodydiff.Compare: JSON indented, unchanged lines around each
// change), or a Note saying why there is none.
type ConflictDiff struct {
	ConflictID int64           `json:"conflict_id"`
	Diff       []bodydiff.Line `json:"diff"`
	Note       string          `json:"note,omitempty"`
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
type Attempt = envelope.AttemptRow

// ReplayRecord is an envelope_replay row.
type ReplayRecord = envelope.ReplayRow

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
type Job = envelope.Job

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
type LedgerEntry = ledger.Entry

// ShowOptions tune Show.
type ShowOptions struct {
	// NoBody leaves the body out (it is not even read, unless to compare
	// conflicts).
	NoBody bool
	// CompareConflicts diffs the bodies of up to this many conflicts
	// against the stored body (Detail.ConflictDiffs).
	CompareConflicts int
}

// Show returns envelope id with its attempts, replays, conflicts, jobs and
// ledger transaction, read in one read-only snapshot: it changes nothing. An
// unknown id returns a *NotFoundError.
func Show(ctx context.Context, pool *pgxpool.Pool, id int64, opts ShowOptions) (*Detail, error) {
	d := &Detail{}
	err := readOnly(ctx, pool, func(tx pgx.Tx, _ envelope.Clock) error {
		body, err := loadEnvelope(ctx, tx, id, opts, &d.Envelope)
		if err != nil {
			return err
		}
		if d.Attempts, err = envelope.Attempts(ctx, tx, id); err != nil {
			return err
		}
		if d.Replays, err = envelope.Replays(ctx, tx, id); err != nil {
			return err
		}
		if d.Resolutions, err = envelope.Resolutions(ctx, tx, id); err != nil {
			return err
		}
		conflicts, err := envelope.Conflicts(ctx, tx, id)
		if err != nil {
			return err
		}
		d.Conflicts = make([]Conflict, len(conflicts))
		for i, c := range conflicts {
			d.Conflicts[i] = Conflict{ID: c.ID, DeliveryID: c.DeliveryID, BodySHA256: hex.EncodeToString(c.BodySHA256),
				BodySize: c.BodySize, Headers: c.Headers, ReceivedAt: c.ReceivedAt}
		}
		if d.ConflictDiffs, err = compareConflicts(ctx, tx, id, body, opts, d.Conflicts); err != nil {
			return err
		}
		jobs, err := envelope.Jobs(ctx, tx, []int64{id}, false)
		if err != nil {
			return fmt.Errorf("load jobs: %w", err)
		}
		d.Jobs = append([]Job{}, jobs...)
		d.Ledger, err = loadLedger(ctx, tx, id)
		return err
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// compareConflicts diffs the first opts.CompareConflicts of conflicts'
// bodies against envelope id's stored body: stored, as Show loaded it,
// read here only when opts.NoBody left it out.
func compareConflicts(ctx context.Context, tx pgx.Tx, id int64, stored []byte, opts ShowOptions, conflicts []Conflict) ([]ConflictDiff, error) {
	n := min(opts.CompareConflicts, len(conflicts))
	if n <= 0 {
		return nil, nil
	}
	if opts.NoBody {
		var err error
		if stored, err = envelope.StoredBody(ctx, tx, id); err != nil {
			return nil, err
		}
	}
	out := make([]ConflictDiff, n)
	for i, c := range conflicts[:n] {
		body, err := envelope.ConflictBody(ctx, tx, id, c.ID)
		if err != nil {
			return nil, fmt.Errorf("load conflict %d: %w", c.ID, err)
		}
		out[i].ConflictID = c.ID
		out[i].Diff, out[i].Note = bodydiff.Compare(stored, body)
	}
	return out, nil
}

// loadEnvelope fills e and returns the raw body it read (nil with
// opts.NoBody, or when retention dropped it).
func loadEnvelope(ctx context.Context, tx pgx.Tx, id int64, opts ShowOptions, e *EnvelopeDetail) ([]byte, error) {
	row, err := envelope.LoadDetail(ctx, tx, id, opts.NoBody)
	if errors.Is(err, envelope.ErrNotFound) {
		return nil, &NotFoundError{IDs: []int64{id}}
	}
	if err != nil {
		return nil, err
	}
	*e = EnvelopeDetail{Summary: row.Summary, Headers: row.Headers, BodySHA256: hex.EncodeToString(row.BodySHA256),
		BodyPurgedAt: row.BodyPurgedAt, SignedAt: row.SignedAt, Result: row.Result, LastDuplicateAt: row.LastDuplicateAt,
		Origin: row.Origin, BackfillRunID: row.BackfillRunID, TraceContext: row.TraceContext}
	if body := row.Body; body != nil {
		s, enc := string(body), BodyText
		if !utf8.Valid(body) {
			s, enc = base64.StdEncoding.EncodeToString(body), BodyBase64
		}
		e.Body, e.BodyEncoding = &s, enc
	}
	return row.Body, nil
}

func loadLedger(ctx context.Context, tx pgx.Tx, envelopeID int64) (*LedgerTransaction, error) {
	lt, ok, err := ledger.ByEnvelope(ctx, tx, envelopeID)
	if err != nil || !ok {
		return nil, err
	}
	t := LedgerTransaction{ID: lt.ID, IdempotencyKey: lt.IdempotencyKey, Kind: string(lt.Kind), Merchant: lt.Merchant,
		PaymentKey: lt.PaymentKey, Currency: lt.Currency, AmountMinor: lt.AmountMinor, Description: lt.Description, PostedAt: lt.PostedAt}
	if t.Entries, err = ledger.Entries(ctx, tx, t.ID); err != nil {
		return nil, err
	}
	return &t, nil
}
