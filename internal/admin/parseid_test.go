package admin

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestParseIDStrings: ids as typed, several to a string, parse once with
// one message whichever input (argument, parameter, max id) was wrong.
func TestParseIDStrings(t *testing.T) {
	f, err := FilterInput{IDStrings: []string{"3", "4,5 6", " 7 ,"}}.Parse()
	require.NoError(t, err)
	require.Equal(t, []int64{3, 4, 5, 6, 7}, f.IDs)

	for _, in := range []FilterInput{{IDStrings: []string{"1,abc"}}, {IDStrings: []string{"0"}}, {IDStrings: []string{"-2"}}} {
		_, err := in.Parse()
		var ie *InputError
		require.ErrorAs(t, err, &ie)
		require.Equal(t, "id", ie.Field)
		require.ErrorContains(t, err, "is not an envelope id")
	}
	_, err = FilterInput{Source: "s", MaxID: "0"}.Parse()
	require.EqualError(t, err, `max-id: "0" is not an envelope id (ids are integers and must be positive)`)
	require.EqualError(t, Filter{IDs: []int64{0}}.Validate(), `"0" is not an envelope id (ids are integers and must be positive)`)
}

func TestStatusNamesIsEveryStatus(t *testing.T) {
	require.Equal(t, "pending, done, failed, ignored or resolved", StatusNames())
	require.ErrorContains(t, Filter{Status: "nope"}.Validate(), `status "nope": want pending, done, failed, ignored or resolved`)
}
