package provider

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
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

// standardVerifier verifies Standard Webhooks (https://www.standardwebhooks.com):
// webhook-signature "v1,<base64> [v1,<base64> ...]", HMAC-SHA256 of
// webhook-id + "." + webhook-timestamp + "." + body keyed by the secret with
// its "whsec_" prefix removed and base64-decoded. It is safe for concurrent
// use.
type standardVerifier struct {
	keys      [][]byte
	tolerance time.Duration
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
	return &standardVerifier{keys: keys, tolerance: cfg.Tolerance}, nil
}

// errStandardKey completes "secret N ..." without naming the secret.
var errStandardKey = errors.New("is not base64 after the whsec_ prefix")

// standardKey decodes a Standard Webhooks secret into its HMAC key. The
// "whsec_" prefix is optional. The error names no part of the secret.
func standardKey(secret string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, standardSecretPrefix))
	if err != nil || len(k) == 0 {
		return nil, errStandardKey
	}
	return k, nil
}

// Verify implements Verifier. Any v1 signature matching any secret verifies;
// other versions (v1a, ...) are skipped. The timestamp is checked before the
// MAC, as the Standard Webhooks libraries do. The delivery id is webhook-id
// (signed; a request signed without one is a FormatError once verified) and
// the event type the body's "type".
func (v *standardVerifier) Verify(h http.Header, body []byte, now time.Time) (Delivery, error) {
	header := h.Get(standardSignatureHeader)
	if header == "" {
		return Delivery{}, sigErr("missing webhook-signature header")
	}
	sigs, err := parseStandardSignature(header)
	if err != nil {
		return Delivery{}, err
	}
	ts := h.Get(standardTimestampHeader)
	if ts == "" {
		return Delivery{}, sigErr("missing webhook-timestamp header")
	}
	signedAt, ok := parseUnix(ts)
	if !ok {
		return Delivery{}, sigErr("malformed webhook-timestamp header")
	}
	if err := checkTimestamp(signedAt, now, v.tolerance); err != nil {
		return Delivery{}, err
	}
	id := h.Get(standardIDHeader)
	dot := []byte(".")
	if !matchAny(v.keys, sigs, []byte(id), dot, []byte(ts), dot, body) {
		return Delivery{}, sigErr("no signature matches")
	}

	if !isJSON(body) {
		return Delivery{}, errNotJSON
	}
	if err := checkDeliveryID(id, "webhook-id header"); err != nil {
		return Delivery{}, err
	}
	typ, _ := stringMember(jsonObject(body), "type")
	if err := checkEventType(typ, `body "type"`); err != nil {
		return Delivery{}, err
	}
	return Delivery{
		DeliveryID: id,
		EventType:  typ,
		Payload:    payload(body),
		Headers:    auditHeaders(h, []string{standardIDHeader, standardTimestampHeader}, []string{standardSignatureHeader}),
		SignedAt:   signedAt,
	}, nil
}

// parseStandardSignature returns the decodable v1 signatures of a
// webhook-signature header: space-separated "version,base64" entries, other
// versions and entries without a comma skipped.
func parseStandardSignature(header string) ([][]byte, error) {
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
		return nil, sigErr("no v1 signature in webhook-signature header")
	case len(sigs) == 0:
		return nil, sigErr("malformed webhook-signature header")
	}
	return sigs, nil
}
