package labels

// Cause is a failed attempt's stable, low-cardinality reason code, stored in
// envelope_attempt.cause and envelope.last_cause next to the message (which
// carries ids and amounts) and used as a metric label. Codes are never
// renamed: queries, alerts and replays select by them.
type Cause string

// Causes. A handler attaches one with handlers.WithCause; handlers.CauseOf
// derives the others from the error's kind.
const (
	CauseUnknownCurrency    Cause = "unknown_currency"    // ledger.ErrUnknownCurrency
	CauseInvalidAmount      Cause = "invalid_amount"      // ledger.ErrInvalidAmount, *ledger.AmountError
	CausePostingRejected    Cause = "posting_rejected"    // *ledger.PostingError: over-refund, currency mismatch, key reused
	CausePaymentNotPosted   Cause = "payment_not_posted"  // ledger.ErrPaymentNotPosted: a refund before its payment
	CauseRefundNotPosted    Cause = "refund_not_posted"   // ledger.ErrRefundNotPosted: a reversal before its refund
	CauseInvalidPayload     Cause = "invalid_payload"     // the body lacks a field or does not decode
	CauseForward3xx         Cause = "forward_3xx"         // the destination redirected (not followed)
	CauseForward4xx         Cause = "forward_4xx"         // the destination refused (408 and 429 are retried)
	CauseForward5xx         Cause = "forward_5xx"         // the destination failed
	CauseForwardUnreachable Cause = "forward_unreachable" // no response: connection refused, DNS, TLS
	CauseTimeout            Cause = "timeout"             // a deadline passed (context.DeadlineExceeded, a network timeout)
	CauseCanceled           Cause = "canceled"            // the attempt's context ended (worker shutdown)
	CauseRetryAfter         Cause = "retry_after"         // *RetryAfterError without a more specific cause
	CauseNotReady           Cause = "not_ready"           // *NotReadyError without a more specific cause
	CauseThrottled          Cause = "throttled"           // the source's throttle refused a slot (set by the worker)
	CausePermanent          Cause = "permanent"           // *PermanentError without a more specific cause
	CauseDatabase           Cause = "database"            // a PostgreSQL error
	CausePanic              Cause = "panic"               // the handler panicked (set by the worker)
	CauseOrphaned           Cause = "orphaned"            // its job ended without a recorded outcome (failed by the reconcile)
	CauseInternal           Cause = "internal"            // anything else
)

// Causes lists every Cause, for zero-initialised metric series and input
// validation (the --cause flags).
var Causes = []Cause{
	CauseUnknownCurrency, CauseInvalidAmount, CausePostingRejected, CausePaymentNotPosted, CauseRefundNotPosted,
	CauseInvalidPayload, CauseForward3xx, CauseForward4xx, CauseForward5xx, CauseForwardUnreachable,
	CauseTimeout, CauseCanceled, CauseRetryAfter, CauseNotReady, CauseThrottled, CausePermanent,
	CauseDatabase, CausePanic, CauseOrphaned, CauseInternal,
}

// KnownCause reports whether c is one of Causes (an unknown --cause is a usage error).
func KnownCause(c Cause) bool {
	for _, k := range Causes {
		if k == c {
			return true
		}
	}
	return false
}
