package provider

import (
	"mime"
	"net/url"
)

// Document returns the JSON document of a delivery of provider name (one
// of this package's provider names; a generic HMAC source's provider is
// its own) from its raw body and its Content-Type, as that provider
// defines it, whatever the encoding: for GitHub's
// application/x-www-form-urlencoded deliveries the JSON in the "payload"
// form field, for every other delivery the body itself. It returns nil
// when a form has no payload field, and does not check that the result is
// JSON: a handler's decoder says so. It never copies body.
//
// Ingest stores the same document, checked to be JSON, as the envelope's
// parsed copy (Delivery.Payload, envelope.payload), which retention keeps
// after it drops the body; so a handler reads the same document before
// and after (envelope.Envelope.Document).
func Document(name, contentType string, body []byte) []byte {
	if name == GitHub {
		if mt, _, err := mime.ParseMediaType(contentType); err == nil && mt == "application/x-www-form-urlencoded" {
			form, err := url.ParseQuery(string(body))
			if err != nil {
				return nil
			}
			if p := form.Get("payload"); p != "" {
				return []byte(p)
			}
			return nil
		}
	}
	return body
}
