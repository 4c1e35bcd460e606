package envelope

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSourceCountsAddSumsEveryCount: a count field added to SourceCounts
// must be summed by Add too (admin stats' totals are Add's).
func TestSourceCountsAddSumsEveryCount(t *testing.T) {
	var one SourceCounts
	v := reflect.ValueOf(&one).Elem()
	for i := 0; i < v.NumField(); i++ {
		if f := v.Field(i); f.Kind() == reflect.Int64 {
			f.SetInt(int64(i + 1))
		}
	}
	one.Source = "a"
	sum := SourceCounts{Source: "total"}
	sum.Add(one)
	sum.Add(one)
	s := reflect.ValueOf(sum)
	for i := 0; i < s.NumField(); i++ {
		if f := s.Field(i); f.Kind() == reflect.Int64 {
			require.Equal(t, 2*int64(i+1), f.Int(), s.Type().Field(i).Name)
		}
	}
	require.Equal(t, "total", sum.Source)
	for _, st := range Statuses() {
		require.Equal(t, 2*one.Of(st), sum.Of(st), st)
	}
}
