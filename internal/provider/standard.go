package provider

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks' headers.
const (
	standardIDHeader        = "webhook-id"
	standardTimestampHeader = "webhook-timestamp"
	standardSignatureHeader = "webhook-signature"

	standardSecretPrefix = "whsec_"
)

// Svix's headers: the same scheme under Svix's brand, which Svix-powered
// senders (Resend, Clerk, ...) use unless they pay for white-labelling.
const (
	svixIDHeader        = "svix-id"
	svixTimestampHeader = "svix-timestamp"
	svixSignatureHeader = "svix-signature"
)

// standardHeaderSet names one family of the three headers.
type standardHeaderSet struct{ id, timestamp, signature string }

var (
	webhookHeaderSet = standardHeaderSet{standardIDHeader, standardTimestampHeader, standardSignatureHeader}
	svixHeaderSet    = standardHeaderSet{svixIDHeader, svixTimestampHeader, svixSignatureHeader}
)

// complete reports whether h carries all three headers of the set.
func (s standardHeaderSet) complete(h http.Header) bool {
	return h.Get(s.id) != "" && h.Get(s.timestamp) != "" && h.Get(s.signature) != ""
}

// pickStandardHeaders chooses the header family a request uses: Svix's when
// all three svix-* headers are present (Svix's own library does the same),
// else webhook-* when they are all present or webhook-signature is, else
// svix-* when svix-signature is (so a missing header is named in the
// family the sender uses), else webhook-*.
func pickStandardHeaders(h http.Header) standardHeaderSet {
	switch {
	case svixHeaderSet.complete(h):
		return svixHeaderSet
	case webhookHeaderSet.complete(h), h.Get(standardSignatureHeader) != "":
		return webhookHeaderSet
	case h.Get(svixSignatureHeader) != "":
		return svixHeaderSet
	}
	return webhookHeaderSet
}

// standardVerifier verifies Standard Webhooks (https://www.standardwebhooks.com):
// webhook-signature "v1,<base64> [v1,<base64> ...]", HMAC-SHA256 of
// webhook-id + "." + webhook-timestamp + "." + body keyed by the secret with
// its "whsec_" prefix removed and base64-decoded. It is safe for concurrent
// use.
type standardVerifier struct {
	keys      [][]byte
	tolerance time.Duration
	eventType *Field // nil: the body's "type"
}

func newStandard(cfg Config) (Verifier, error) {
	if len(cfg.Secrets) == 0 {
		return nil, errors.New("no secret configured")
	}
	keys := make([][]byte, len(cfg.Secrets))
	for i, s := range cfg.Secrets {
		if err := checkSecret(i, s); err != nil {
			return nil, err
		}
		k, err := standardKey(s)
		if err != nil {
			return nil, fmt.Errorf("secret %d %w", i+1, err)
		}
		keys[i] = k
	}
	if cfg.EventType != nil && cfg.EventType.empty() {
		return nil, errors.New("event_type needs a header, json or form")
	}
	return &standardVerifier{keys: keys, tolerance: cfg.Tolerance, eventType: cfg.EventType}, nil
}

// errStandardKey completes "secret N ..." without naming the secret.
var errStandardKey = errors.New("is not base64 after the whsec_ prefix")

// standardKey decodes a Standard Webhooks secret into its HMAC key. The
// "whsec_" prefix is optional, and so is the base64 padding: an unpadded
// secret (as some senders display them) is accepted, as the Python library
// accepts it. The error names no part of the secret.
func standardKey(secret string) ([]byte, error) {
	enc := strings.TrimPrefix(secret, standardSecretPrefix)
	k, err := base64.StdEncoding.DecodeString(enc)
	if err != nil && !strings.HasSuffix(enc, "=") {
		k, err = base64.RawStdEncoding.DecodeString(enc)
	}
	if err != nil || len(k) == 0 {
		return nil, errStandardKey
	}
	return k, nil
}

// Verify implements Verifier. The headers are webhook-id,
// webhook-timestamp and webhook-signature, or Svix's svix-id, svix-timestamp
// and svix-signature (see pickStandardHeaders). Any v1 signature matching
// any secret verifies; other versions (v1a, ...) are skipped. The timestamp
// is checked before the MAC, as the Standard Webhooks libraries do. The
// delivery id is the id header (signed; a request signed without one is a
// FormatError once verified). The event type is the body's top-level string
// "type" (or where the source's event_type says), or empty when the body has none (not JSON, no "type", or one
// that is too long or not printable): such a delivery is still stored.
func (v *standardVerifier) Verify(h http.Header, body []byte, now time.Time) (Delivery, error) {
	names := pickStandardHeaders(h)
	header := h.Get(names.signature)
	if header == "" {
		return Delivery{}, sigErr("missing " + names.signature + " header")
	}
	sigs, err := parseStandardSignature(header, names.signature)
	if err != nil {
		return Delivery{}, err
	}
	ts := h.Get(names.timestamp)
	if ts == "" {
		return Delivery{}, sigErr("missing " + names.timestamp + " header")
	}
	signedAt, ok := parseUnix(ts)
	if !ok {
		return Delivery{}, sigErr("malformed " + names.timestamp + " header")
	}
	if err := checkTimestamp(signedAt, now, v.tolerance); err != nil {
		return Delivery{}, err
	}
	id := h.Get(names.id)
	dot := []byte(".")
	if !matchAny(v.keys, sigs, []byte(id), dot, []byte(ts), dot, body) {
		return Delivery{}, sigErr("no signature matches")
	}

	if err := checkDeliveryID(id, names.id+" header"); err != nil {
		return Delivery{}, err
	}
	p := jsonPayload(body)
	typ, _ := stringMember(jsonObject(p), "type")
	if v.eventType != nil {
		typ = v.eventType.read(h, p, body)
	}
	return Delivery{
		DeliveryID: id,
		EventType:  usableEventType(typ),
		Payload:    p,
		Headers: auditHeaders(h,
			[]string{standardIDHeader, standardTimestampHeader, svixIDHeader, svixTimestampHeader},
			[]string{standardSignatureHeader, svixSignatureHeader}),
		SignedAt: signedAt,
	}, nil
}

// parseStandardSignature returns the decodable v1 signatures of a
// webhook-signature (or svix-signature, named by name) header:
// space-separated "version,base64" entries, other versions and entries
// without a comma skipped.
func parseStandardSignature(header, name string) ([][]byte, error) {
	var sigs [][]byte
	haveV1 := false
	for _, entry := range strings.Fields(header) {
		version, val, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue
		}
		haveV1 = true
		if sig, err := base64.StdEncoding.Strict().DecodeString(val); err == nil && len(sig) == macSize {
			sigs = append(sigs, sig)
		}
	}
	switch {
	case !haveV1:
		return nil, sigErr("no v1 signature in " + name + " header")
	case len(sigs) == 0:
		return nil, sigErr("malformed " + name + " header")
	}
	return sigs, nil
}

// standardScheme: the event type is in the body, the delivery id in
// webhook-id (signed); senders retry on Svix's schedule (5 s, 5 min, 30 min,
// 2 h, 5 h, 10 h, 10 h), about 27.6 hours.
var standardScheme = scheme{name: Standard, verifier: newStandard, sign: signStandard, address: addressStandard,
	retryWindow: 5*time.Second + 5*time.Minute + 30*time.Minute + (2+5+10+10)*time.Hour}

func signStandard(secret string, h http.Header, body []byte, now time.Time) error {
	id := h.Get(standardIDHeader)
	if id == "" {
		return errors.New("webhook-id header must be set before signing")
	}
	key, err := standardKey(secret)
	if err != nil {
		return fmt.Errorf("secret %w", err)
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	mac := hmacSHA256(key, []byte(id), []byte("."), []byte(ts), []byte("."), body)
	h.Set(standardTimestampHeader, ts)
	h.Set(standardSignatureHeader, "v1,"+base64.StdEncoding.EncodeToString(mac))
	return nil
}

func addressStandard(h http.Header, deliveryID, _ string) { h.Set(standardIDHeader, deliveryID) }
