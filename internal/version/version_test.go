package version

import (
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestVersionGet(t *testing.T) {
	t.Parallel()
	i := Get()
	require.False(t, i.Version == "" || i.Revision == "", "empty field in %+v", i)
	require.Equal(t, runtime.Version(), i.GoVersion)
	s := i.String("worker")
	require.True(t, strings.HasPrefix(s, "worker "+i.Version+" ") && strings.Contains(s, i.GoVersion), "String = %q", s)
}
