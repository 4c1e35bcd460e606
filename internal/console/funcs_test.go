package console

import (
	"testing"

	"github.com/stretchr/testify/require"
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
