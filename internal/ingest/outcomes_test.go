package ingest

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/labels"
	"github.com/inboxhq/inbox/internal/provider"
)

// The outcomes classify can give are the ones metrics pre-initialises
// (labels.IngestOutcomes, plus unknown_source for labels.UnknownSourceName),
// so an alert on any outcome sees 0 before the first one.
func TestMetricsOutcomesAreInitialised(t *testing.T) {
	t.Parallel()
	seen := map[labels.IngestOutcome]bool{labels.Accepted: true, labels.Duplicate: true, labels.Replay: true} // the success path's (handleWebhook)
	for _, err := range []error{
		errUnknownSource, errTooLarge, &readError{&net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}},
		&readError{io.ErrUnexpectedEOF}, &provider.SignatureError{Reason: "x"}, &provider.FormatError{Reason: "x"},
		&envelope.ConflictError{EnvelopeID: 1, ConflictID: 2}, errOverloaded, pgErr("42501"),
		context.DeadlineExceeded, errors.New("boom"), &http.MaxBytesError{Limit: 1},
	} {
		_, outcome, _ := classify(err)
		seen[outcome] = true
	}
	delete(seen, labels.UnknownSource)
	var got []labels.IngestOutcome
	for o := range seen {
		got = append(got, o)
	}
	require.ElementsMatch(t, labels.IngestOutcomes, got)
	require.False(t, slices.Contains(labels.IngestOutcomes, "unknown_source"), "only source=unknown has unknown_source")
}
