package envelope

import (
	"encoding/json"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/provider"
)

// A delivery's document is the same JSON before and after retention drops
// its body, whatever its encoding: a form-encoded GitHub delivery reads as
// its payload field's JSON, never as form bytes.
func TestDocumentIsTheSameBeforeAndAfterTheBodyIsDropped(t *testing.T) {
	t.Parallel()
	doc := `{"action":"published","release":{"tag_name":"v1"}}`
	for name, env := range map[string]Envelope{
		"github form": {Provider: provider.GitHub, Headers: map[string]string{"Content-Type": "application/x-www-form-urlencoded"},
			Body: []byte("payload=" + url.QueryEscape(doc))},
		"github json": {Provider: provider.GitHub, Headers: map[string]string{"Content-Type": "application/json"}, Body: []byte(doc)},
		"stripe json": {Provider: provider.Stripe, Body: []byte(doc)},
		"a form, not github": {Provider: provider.Standard, Headers: map[string]string{"Content-Type": "application/x-www-form-urlencoded"},
			Body: []byte(doc)},
	} {
		before := env.Document()
		require.JSONEq(t, doc, string(before), name)
		// What ingest stores as the parsed copy is the same document.
		purged := env.WithBodyPurged(json.RawMessage(before))
		require.JSONEq(t, doc, string(purged.Document()), name+", body dropped")
	}
	require.Nil(t, (&Envelope{Provider: provider.GitHub}).Document(), "neither body nor payload")
	require.Nil(t, (&Envelope{Provider: provider.GitHub,
		Headers: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, Body: []byte("other=1")}).Document(), "a form without payload")
}
