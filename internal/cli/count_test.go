package cli

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCount(t *testing.T) {
	t.Parallel()
	require.Equal(t, "0 envelopes", Count(0, "envelope", "envelopes"))
	require.Equal(t, "1 envelope", Count(1, "envelope", "envelopes"))
	require.Equal(t, "2 batches", Count(int64(2), "batch", "batches"))
	require.Equal(t, "-1 envelopes", Count(-1, "envelope", "envelopes"))
}
