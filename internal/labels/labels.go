// Package labels holds the names that cross package boundaries as data:
// what ingest answered a request (the outcome label of its metrics and the
// field of its log lines) and the source label of a request to a source that
// is not configured. Ingest sets them, metrics counts them, config reserves
// the unknown source's name, dashboards and alert rules (deploy/) query
// them: one definition, so none of them can drift.
//
// Causes (cause.go) are the failure causes the worker records and counts.
// PostingResults (posting.go) are what became of a ledger posting, as the
// worker counts it.
// UnprocessedReasons say why a job the worker ran processed nothing.
//
// It imports nothing.
package labels

// IngestOutcome is how ingest ended one webhook request.
type IngestOutcome string

// Ingest outcomes.
const (
	Accepted      IngestOutcome = "accepted"       // 202: stored, with its job
	Duplicate     IngestOutcome = "duplicate"      // 200: the delivery id was stored, same body
	Conflict      IngestOutcome = "conflict"       // 200: the delivery id was stored, another body (recorded)
	Replay        IngestOutcome = "replay"         // 200: a signed body stored under another delivery id, resent (recorded)
	BadSignature  IngestOutcome = "bad_signature"  // 401
	BadRequest    IngestOutcome = "bad_request"    // 400: no delivery id, an unreadable body
	TooLarge      IngestOutcome = "too_large"      // 413
	ReadTimeout   IngestOutcome = "read_timeout"   // 408: the body did not arrive in time
	Unavailable   IngestOutcome = "unavailable"    // 503: the database did not answer
	Overloaded    IngestOutcome = "overloaded"     // 503 at once: short of a resource (RefusalReasons says which)
	DBPermission  IngestOutcome = "db_permission"  // 503: the database role lacks a privilege
	InternalError IngestOutcome = "internal_error" // 500
	UnknownSource IngestOutcome = "unknown_source" // 404: only ever with source UnknownSourceName
)

// IngestOutcomes are the outcomes a configured source's requests can have:
// all of them but UnknownSource.
var IngestOutcomes = []IngestOutcome{
	Accepted, Duplicate, Conflict, Replay, BadSignature, BadRequest, TooLarge,
	ReadTimeout, Unavailable, Overloaded, DBPermission, InternalError,
}

// RefusalReason says which resource ingest was short of when it refused a
// delivery at once (outcome Overloaded), the reason label of
// inbox_ingest_refused_total.
type RefusalReason string

// Refusal reasons.
const (
	RefusedBodyMemory  RefusalReason = "body_memory"  // --max-inflight-body-bytes held by other requests for the whole wait
	RefusedStoreBehind RefusalReason = "store_behind" // the oldest delivery being stored has waited past --shed-after, or --shed-after-overload while refusing (a stalled or saturated database)
	RefusedConnections RefusalReason = "connections"  // every one of --max-conns connections is busy with a request
)

// RefusalReasons are all the refusal reasons.
var RefusalReasons = []RefusalReason{RefusedBodyMemory, RefusedStoreBehind, RefusedConnections}

// Unprocessed says why a job that ran processed nothing and recorded no
// attempt: the reason label of inbox_worker_jobs_unprocessed_total, and the
// worker's outcome of it in its log and spans.
type Unprocessed string

// Reasons a job processed nothing.
const (
	UnprocessedNotFound        Unprocessed = "not_found"        // the envelope is gone (retention): the job is cancelled
	UnprocessedLostRace        Unprocessed = "lost_race"        // River rescued the job and a later attempt owns it: this one changed nothing
	UnprocessedAlreadyDone     Unprocessed = "already_done"     // the envelope was final already (an earlier attempt committed, a replay's second job raced): the job is deleted
	UnprocessedAlreadyFailed   Unprocessed = "already_failed"   // likewise, failed
	UnprocessedAlreadyIgnored  Unprocessed = "already_ignored"  // likewise, ignored
	UnprocessedAlreadyResolved Unprocessed = "already_resolved" // likewise, failed and resolved by an operator
)

// UnprocessedReasons are all the reasons a job processed nothing.
var UnprocessedReasons = []Unprocessed{UnprocessedNotFound, UnprocessedLostRace, UnprocessedAlreadyDone,
	UnprocessedAlreadyFailed, UnprocessedAlreadyIgnored, UnprocessedAlreadyResolved}

// AlreadyFinal is the reason of a job whose envelope it found final already
// with status (one of UnprocessedReasons for every final status).
func AlreadyFinal(status string) Unprocessed { return Unprocessed("already_" + status) }

// UnknownSourceName is the source label of a request to a source that is not
// configured: never a name taken from the request (a caller could otherwise
// create label values at will). No configured source may have it.
const UnknownSourceName = "unknown"
