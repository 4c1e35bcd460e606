package console

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
)

// The pages' counts read "1 envelope", "2 envelopes" (the template's count);
// a value of another type is a template error, not a wrong word.
func TestCountFunc(t *testing.T) {
	t.Parallel()
	for n, want := range map[any]string{1: "1 batch", int64(1): "1 batch", 3: "3 batches", int64(0): "0 batches"} {
		got, err := countOf(n, "batch", "batches")
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	_, err := countOf("1", "batch", "batches")
	require.Error(t, err)
}

// An attempt's job links to River UI only while the job is still in
// river_job (the envelope's Jobs): a finished envelope's job is deleted,
// and River UI has no page for it.
func TestLiveJobLinksOnlyJobsStillThere(t *testing.T) {
	live := funcs("/riverui")["liveJob"].(func([]envelope.Job, int64) string)
	jobs := []envelope.Job{{ID: 7}}
	if got := live(jobs, 7); got != "/riverui/jobs/7" {
		t.Fatalf("a live job: %q", got)
	}
	if got := live(jobs, 8); got != "" {
		t.Fatalf("a deleted job: %q, want no link", got)
	}
	if got := funcs("")["liveJob"].(func([]envelope.Job, int64) string)(jobs, 7); got != "" {
		t.Fatalf("no River UI: %q, want no link", got)
	}
}
