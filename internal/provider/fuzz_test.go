package provider

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"
)

// fuzzSecrets are the secrets FuzzVerify's verifiers are configured with.
var fuzzSecrets = map[string][]string{
	Stripe:   {stripeSecret, stripeOldSecret},
	Standard: {standardSecret, standardOldSecret},
	GitHub:   {githubSecret, githubOldSecret},
	Shopify:  {shopifySecret, shopifyOldSecret},
}

// fuzzRequest builds a request for provider from the fuzzer's strings: sig
// goes in the signature header, ts in the timestamp header (Standard
// Webhooks), id and event in the delivery id and event headers.
func fuzzRequest(provider, sig, ts, id, event string) http.Header {
	h := http.Header{}
	set := func(k, v string) {
		if v != "" {
			h.Set(k, v)
		}
	}
	switch provider {
	case Stripe:
		set("Stripe-Signature", sig)
	case Standard:
		set("webhook-signature", sig)
		set("webhook-timestamp", ts)
		set("webhook-id", id)
	case GitHub:
		set("X-Hub-Signature-256", sig)
		set("X-GitHub-Delivery", id)
		set("X-GitHub-Event", event)
	case Shopify:
		set("X-Shopify-Hmac-Sha256", sig)
		set("X-Shopify-Webhook-Id", id)
		set("X-Shopify-Topic", event)
	}
	return h
}

// carriesValidSignature reports, independently of the code under test,
// whether sig holds a correct signature of the request under secret.
func carriesValidSignature(provider, secret, sig, ts, id string, signedAt int64, body []byte) bool {
	switch provider {
	case Stripe:
		return strings.Contains(strings.ToLower(sig), "v1="+stripeV1(secret, signedAt, body))
	case Standard:
		want := standardV1(secret, id, signedAt, body)
		return ts == fmt.Sprint(signedAt) && strings.Contains(" "+sig+" ", " "+want+" ")
	case GitHub:
		return strings.ToLower(sig) == githubSig(secret, body)
	case Shopify:
		return sig == shopifySig(secret, body)
	}
	return false
}

// FuzzVerify checks that no input makes a verifier panic, that every error
// is a SignatureError or FormatError naming no secret and no signature, and
// that a request verifies only when it carries a correct signature.
func FuzzVerify(f *testing.F) {
	verifiers := map[string]Verifier{}
	for _, p := range Names {
		v, err := New(Config{Provider: p, Secrets: fuzzSecrets[p]})
		if err != nil {
			f.Fatal(err)
		}
		verifiers[p] = v
	}
	ts := fmt.Sprint(t0.Unix())
	// Seeds: a valid request per provider, then variations.
	for i, p := range Names {
		body := []byte(`{"id":"evt_1","type":"payment.succeeded","action":"opened"}`)
		h := fuzzRequest(p, "", ts, "msg_1", "orders/paid")
		if err := Sign(p, fuzzSecrets[p][i%2], h, body, t0); err != nil {
			f.Fatal(err)
		}
		if _, err := verifiers[p].Verify(h, body, t0); err != nil {
			f.Fatalf("the %s seed does not verify: %v", p, err)
		}
		sig := h.Get(sigHeaderOf(p))
		f.Add(uint8(i), sig, ts, "msg_1", "orders/paid", body)
		f.Add(uint8(i), sig, ts, "", "", body)
		f.Add(uint8(i), sig, ts, "msg_1", "orders/paid", []byte(`not json`))
		f.Add(uint8(i), sig+","+sig, ts+"0", "msg_\x00", "a\nb", body[1:])
		f.Add(uint8(i), "", "", "", "", []byte(nil))
	}
	f.Add(uint8(0), "t=1700000000,v1=,v0=00,t=", "", "", "", []byte(`{}`))
	f.Add(uint8(1), "v1, v1,, ,v1a,AAAA v1,====", "99999999999999999999", "id", "", []byte(`[]`))

	f.Fuzz(func(t *testing.T, p uint8, sig, ts, id, event string, body []byte) {
		provider := Names[int(p)%len(Names)]
		h := fuzzRequest(provider, sig, ts, id, event)
		d, err := verifiers[provider].Verify(h, body, t0)
		if err != nil {
			var se *SignatureError
			var fe *FormatError
			if !errors.As(err, &se) && !errors.As(err, &fe) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			msg := err.Error()
			for _, s := range fuzzSecrets[provider] {
				if strings.Contains(msg, s) {
					t.Fatalf("error names a secret: %q", msg)
				}
			}
			if len(sig) >= 8 && strings.Contains(msg, sig) {
				t.Fatalf("error names the signature: %q", msg)
			}
			return
		}
		valid := false
		for _, s := range fuzzSecrets[provider] {
			valid = valid || carriesValidSignature(provider, s, h.Get(sigHeaderOf(provider)), ts, id, d.SignedAt.Unix(), body)
		}
		if !valid {
			t.Fatalf("verified without a valid signature: %q", sig)
		}
		if d.DeliveryID == "" || len(d.DeliveryID) > MaxDeliveryIDLen || !utf8.ValidString(d.DeliveryID) {
			t.Fatalf("bad delivery id %q", d.DeliveryID)
		}
		if d.EventType == "" || len(d.EventType) > MaxEventTypeLen || !utf8.ValidString(d.EventType) {
			t.Fatalf("bad event type %q", d.EventType)
		}
		if string(d.Payload) != string(body) || !json.Valid(d.Payload) {
			t.Fatalf("payload %q is not the JSON body", d.Payload)
		}
		if v, ok := d.Headers[http.CanonicalHeaderKey(sigHeaderOf(provider))]; !ok || v != Redacted {
			t.Fatalf("signature header kept as %q", v)
		}
	})
}

func sigHeaderOf(provider string) string {
	return map[string]string{Stripe: "Stripe-Signature", Standard: "webhook-signature", GitHub: "X-Hub-Signature-256", Shopify: "X-Shopify-Hmac-Sha256"}[provider]
}
