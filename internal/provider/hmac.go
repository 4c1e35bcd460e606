package provider

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
)

// HMAC is the generic provider: any sender that signs with an HMAC over the
// body (or a template of it), configured per source (Config.HMAC), with
// presets for Slack, Paddle Billing and Square.
const HMAC = "hmac"

// HMACConfig describes how a generic HMAC sender signs, and where its
// delivery id and event type are. Adding such a provider is configuration:
// the presets below are written on it.
type HMACConfig struct {
	// Preset fills every field left empty from a named preset (see
	// HMACPresets): "slack", "paddle", "square".
	Preset string `yaml:"preset"`
	// SignatureHeader carries the signature.
	SignatureHeader string `yaml:"signature_header"`
	// Algorithm is the hash: "sha1", "sha256" (default) or "sha512".
	Algorithm string `yaml:"algorithm"`
	// Encoding of the MAC in the header: "hex" (default) or "base64".
	Encoding string `yaml:"encoding"`
	// Prefix precedes the encoded MAC ("v0=", "sha256="); a signature
	// without it is malformed.
	Prefix string `yaml:"prefix"`
	// Pairs, when set, reads the header as key=value pairs (Paddle's
	// "ts=1671552777;h1=<hex>"): every pair named Signature is a candidate
	// MAC, the pair named Timestamp the signed timestamp. Prefix is then
	// not used.
	Pairs *HMACPairs `yaml:"pairs"`
	// SignedContent is what the MAC covers, a template over {body} (the raw
	// body), {timestamp} (as sent), {id} (the delivery id, from a header)
	// and {url} (URL below); anything else is literal. Default "{body}".
	SignedContent string `yaml:"signed_content"`
	// TimestampHeader carries the signed Unix timestamp (seconds), checked
	// against the source's tolerance. Unset with no Pairs.Timestamp: the
	// sender signs no timestamp.
	TimestampHeader string `yaml:"timestamp_header"`
	// URL is the endpoint URL exactly as configured at the sender, for
	// {url} (Square signs it): behind proxies the request's own URL
	// differs.
	URL string `yaml:"url"`
	// DeliveryID says where the delivery id is (required: it deduplicates).
	DeliveryID Field `yaml:"delivery_id"`
	// EventType says where the event type is; unset, or missing from a
	// delivery, the event type is empty.
	EventType Field `yaml:"event_type"`
}

// HMACPairs reads a signature header made of key=value pairs.
type HMACPairs struct {
	Separator string `yaml:"separator"` // between pairs, default ","
	Signature string `yaml:"signature"` // the MAC's key ("h1", "v1")
	Timestamp string `yaml:"timestamp"` // the timestamp's key ("ts", "t"), optional
}

// Field locates a value of a verified delivery: the first non-empty of
// a header, a JSON path into the body (dot-separated member names:
// "event.type"; a string or a number) and a field of a form-encoded body.
// It is used by the generic HMAC provider, and by Standard Webhooks sources
// whose senders put the event type elsewhere than "type".
type Field struct {
	Header string `yaml:"header"`
	JSON   string `yaml:"json"`
	Form   string `yaml:"form"`
}

func (f Field) empty() bool { return f.Header == "" && f.JSON == "" && f.Form == "" }

func (f Field) describe() string {
	var parts []string
	if f.Header != "" {
		parts = append(parts, "header "+f.Header)
	}
	if f.JSON != "" {
		parts = append(parts, `body "`+f.JSON+`"`)
	}
	if f.Form != "" {
		parts = append(parts, "form field "+f.Form)
	}
	return strings.Join(parts, ", ")
}

// HMACPresets are the generic HMAC settings of providers that sign that
// way, each checked against the provider's documented example or SDK:
//
//   - slack: X-Slack-Signature "v0=" + hex HMAC-SHA256 of
//     "v0:{timestamp}:{body}", X-Slack-Request-Timestamp; delivery id the
//     Events API "event_id" (else a slash command's trigger_id), event type
//     "event.type" (else the command).
//   - paddle: Paddle Billing's Paddle-Signature "ts=<unix>;h1=<hex>", HMAC-SHA256
//     of "{timestamp}:{body}"; delivery id "notification_id" (kept on
//     retries), event type "event_type".
//   - square: X-Square-HmacSha256-Signature, base64 HMAC-SHA256 of the
//     notification URL followed by the body (set url); delivery id
//     "event_id", event type "type". Square signs no timestamp.
var HMACPresets = map[string]HMACConfig{
	"slack": {
		SignatureHeader: "X-Slack-Signature", Algorithm: "sha256", Encoding: "hex", Prefix: "v0=",
		SignedContent: "v0:{timestamp}:{body}", TimestampHeader: "X-Slack-Request-Timestamp",
		DeliveryID: Field{JSON: "event_id", Form: "trigger_id"},
		EventType:  Field{JSON: "event.type", Form: "command"},
	},
	"paddle": {
		SignatureHeader: "Paddle-Signature", Algorithm: "sha256", Encoding: "hex",
		Pairs:         &HMACPairs{Separator: ";", Signature: "h1", Timestamp: "ts"},
		SignedContent: "{timestamp}:{body}",
		DeliveryID:    Field{JSON: "notification_id"},
		EventType:     Field{JSON: "event_type"},
	},
	"square": {
		SignatureHeader: "X-Square-HmacSha256-Signature", Algorithm: "sha256", Encoding: "base64",
		SignedContent: "{url}{body}",
		DeliveryID:    Field{JSON: "event_id"},
		EventType:     Field{JSON: "type"},
	},
}

// withPreset returns c with its empty fields taken from its preset.
func (c HMACConfig) withPreset() (HMACConfig, error) {
	if c.Preset == "" {
		return c, nil
	}
	p, ok := HMACPresets[c.Preset]
	if !ok {
		names := make([]string, 0, len(HMACPresets))
		for n := range HMACPresets {
			names = append(names, n)
		}
		sort.Strings(names)
		return c, fmt.Errorf("unknown hmac preset %q (want one of %s)", c.Preset, strings.Join(names, ", "))
	}
	fill := func(dst *string, src string) {
		if *dst == "" {
			*dst = src
		}
	}
	fill(&c.SignatureHeader, p.SignatureHeader)
	fill(&c.Algorithm, p.Algorithm)
	fill(&c.Encoding, p.Encoding)
	fill(&c.Prefix, p.Prefix)
	fill(&c.SignedContent, p.SignedContent)
	fill(&c.TimestampHeader, p.TimestampHeader)
	fill(&c.URL, p.URL)
	if c.Pairs == nil && p.Pairs != nil {
		pairs := *p.Pairs
		c.Pairs = &pairs
	}
	if c.DeliveryID.empty() {
		c.DeliveryID = p.DeliveryID
	}
	if c.EventType.empty() {
		c.EventType = p.EventType
	}
	return c, nil
}

// hmacPart is one piece of a signed-content template: a literal, or one of
// the placeholders.
type hmacPart struct {
	literal string
	field   string // "body", "timestamp", "id", "url", or "" for a literal
}

// parseTemplate splits a signed-content template into parts.
func parseTemplate(t string) ([]hmacPart, error) {
	var parts []hmacPart
	for t != "" {
		open := strings.IndexByte(t, '{')
		if open < 0 {
			parts = append(parts, hmacPart{literal: t})
			break
		}
		end := strings.IndexByte(t[open:], '}')
		if end < 0 {
			return nil, errors.New("signed_content has a '{' without '}'")
		}
		name := t[open+1 : open+end]
		switch name {
		case "body", "timestamp", "id", "url":
		default:
			return nil, fmt.Errorf("signed_content: unknown placeholder {%s} (want {body}, {timestamp}, {id} or {url})", name)
		}
		if open > 0 {
			parts = append(parts, hmacPart{literal: t[:open]})
		}
		parts = append(parts, hmacPart{field: name})
		t = t[open+end+1:]
	}
	return parts, nil
}

// hmacVerifier verifies a generic HMAC source. It is safe for concurrent
// use.
type hmacVerifier struct {
	cfg       HMACConfig
	keys      [][]byte
	newHash   func() hash.Hash
	size      int
	parts     []hmacPart
	tolerance time.Duration
	// signsID: signed_content has {id}, so the delivery id is signed and
	// no replay digest is needed.
	signsID bool
}

func newHMAC(cfg Config) (Verifier, error) {
	if cfg.HMAC == nil {
		return nil, errors.New("provider hmac needs an hmac section")
	}
	c, err := cfg.HMAC.withPreset()
	if err != nil {
		return nil, err
	}
	keys, err := rawKeys(cfg.Secrets)
	if err != nil {
		return nil, err
	}
	v := &hmacVerifier{cfg: c, keys: keys, tolerance: cfg.Tolerance}
	switch c.Algorithm {
	case "sha1":
		v.newHash, v.size = sha1.New, sha1.Size
	case "", "sha256":
		v.newHash, v.size = sha256.New, sha256.Size
	case "sha512":
		v.newHash, v.size = sha512.New, sha512.Size
	default:
		return nil, fmt.Errorf("hmac algorithm %q (want sha1, sha256 or sha512)", c.Algorithm)
	}
	switch c.Encoding {
	case "", "hex", "base64":
	default:
		return nil, fmt.Errorf("hmac encoding %q (want hex or base64)", c.Encoding)
	}
	if c.SignatureHeader == "" {
		return nil, errors.New("hmac signature_header is required")
	}
	if c.Pairs != nil && c.Pairs.Signature == "" {
		return nil, errors.New("hmac pairs.signature is required")
	}
	if c.DeliveryID.empty() {
		return nil, errors.New("hmac delivery_id is required (header, json or form): it deduplicates deliveries")
	}
	content := c.SignedContent
	if content == "" {
		content = "{body}"
	}
	if v.parts, err = parseTemplate(content); err != nil {
		return nil, err
	}
	hasTimestamp := c.TimestampHeader != "" || (c.Pairs != nil && c.Pairs.Timestamp != "")
	signsTimestamp := false
	for _, p := range v.parts {
		signsTimestamp = signsTimestamp || p.field == "timestamp"
		v.signsID = v.signsID || p.field == "id"
	}
	if hasTimestamp && !signsTimestamp {
		return nil, errors.New("a timestamp is read (timestamp_header or pairs.timestamp) but signed_content has no {timestamp}: it would not be signed, and a captured delivery would pass the tolerance check under a fresh one; add {timestamp} where the sender signs it, or drop the timestamp")
	}
	for _, p := range v.parts {
		switch {
		case p.field == "timestamp" && !hasTimestamp:
			return nil, errors.New("signed_content uses {timestamp} but no timestamp_header (or pairs.timestamp) is set")
		case p.field == "url" && c.URL == "":
			return nil, errors.New("signed_content uses {url} but no url is set (the endpoint URL as configured at the sender)")
		case p.field == "id" && c.DeliveryID.Header == "":
			return nil, errors.New("signed_content uses {id}, which needs delivery_id from a header")
		}
	}
	if c.URL != "" {
		if u, err := url.Parse(c.URL); err != nil || u.Scheme == "" || u.Host == "" {
			return nil, errors.New("hmac url must be an absolute URL")
		}
	}
	return v, nil
}

// Verify implements Verifier: the signature header's MAC (any of them, with
// pairs) must equal the configured HMAC of the signed content under any
// secret; a signed timestamp must be within the tolerance, and is checked
// before the MAC. Once verified, the delivery is stored whatever its body:
// the delivery id is required, the event type may be empty.
func (v *hmacVerifier) Verify(h http.Header, body []byte, now time.Time) (Delivery, error) {
	c := v.cfg
	header := h.Get(c.SignatureHeader)
	if header == "" {
		return Delivery{}, sigErr("missing " + c.SignatureHeader + " header")
	}
	malformed := sigErr("malformed " + c.SignatureHeader + " header")
	var encoded []string
	var ts string
	if c.Pairs != nil {
		sep := c.Pairs.Separator
		if sep == "" {
			sep = ","
		}
		for elem := range strings.SplitSeq(header, sep) {
			key, val, ok := strings.Cut(strings.TrimSpace(elem), "=")
			if !ok {
				return Delivery{}, malformed
			}
			switch key {
			case c.Pairs.Signature:
				encoded = append(encoded, val)
			case c.Pairs.Timestamp:
				if ts != "" {
					return Delivery{}, malformed
				}
				ts = val
			}
		}
		if len(encoded) == 0 {
			return Delivery{}, sigErr("no " + c.Pairs.Signature + " signature in " + c.SignatureHeader + " header")
		}
		if c.Pairs.Timestamp != "" && ts == "" {
			return Delivery{}, sigErr("no " + c.Pairs.Timestamp + " timestamp in " + c.SignatureHeader + " header")
		}
	} else {
		val, ok := strings.CutPrefix(header, c.Prefix)
		if !ok {
			return Delivery{}, malformed
		}
		encoded = []string{val}
	}
	var sigs [][]byte
	for _, e := range encoded {
		var sig []byte
		var err error
		if c.Encoding == "base64" {
			sig, err = base64.StdEncoding.Strict().DecodeString(e)
		} else {
			sig, err = hex.DecodeString(e)
		}
		if err == nil && len(sig) == v.size {
			sigs = append(sigs, sig)
		}
	}
	if len(sigs) == 0 {
		return Delivery{}, malformed
	}
	var signedAt time.Time
	if c.TimestampHeader != "" {
		if ts = h.Get(c.TimestampHeader); ts == "" {
			return Delivery{}, sigErr("missing " + c.TimestampHeader + " header")
		}
	}
	if ts != "" {
		var ok bool
		if signedAt, ok = parseUnix(ts); !ok {
			return Delivery{}, sigErr("malformed signed timestamp")
		}
		if err := checkTimestamp(signedAt, now, v.tolerance); err != nil {
			return Delivery{}, err
		}
	}
	headerID := ""
	if c.DeliveryID.Header != "" {
		headerID = h.Get(c.DeliveryID.Header)
	}
	if !v.matches(sigs, body, ts, headerID) {
		return Delivery{}, sigErr("no signature matches")
	}

	p := jsonPayload(body)
	id := v.field(c.DeliveryID, h, p, body)
	if err := checkDeliveryID(id, c.DeliveryID.describe()); err != nil {
		return Delivery{}, err
	}
	keep := []string{}
	for _, k := range []string{c.TimestampHeader, c.DeliveryID.Header, c.EventType.Header} {
		if k != "" {
			keep = append(keep, k)
		}
	}
	typ := v.field(c.EventType, h, p, body)
	d := Delivery{
		DeliveryID: id,
		EventType:  usableEventType(typ),
		Payload:    p,
		Headers:    auditHeaders(h, keep, []string{c.SignatureHeader}),
		SignedAt:   signedAt,
	}
	if c.DeliveryID.Header != "" && !v.signsID {
		d.ReplayDigest = replayDigest(typ, body)
	}
	return d, nil
}

// matches reports whether any of sigs is the MAC of the signed content
// under any key.
func (v *hmacVerifier) matches(sigs [][]byte, body []byte, ts, id string) bool {
	for _, k := range v.keys {
		m := hmac.New(v.newHash, k)
		for _, p := range v.parts {
			switch p.field {
			case "":
				m.Write([]byte(p.literal))
			case "body":
				m.Write(body)
			case "timestamp":
				m.Write([]byte(ts))
			case "id":
				m.Write([]byte(id))
			case "url":
				m.Write([]byte(v.cfg.URL))
			}
		}
		want := m.Sum(nil)
		for _, s := range sigs {
			if hmac.Equal(want, s) {
				return true
			}
		}
	}
	return false
}

func (v *hmacVerifier) field(f Field, h http.Header, payload, body []byte) string {
	return f.read(h, payload, body)
}

// read reads f from a verified delivery: the header, else the JSON path in
// payload, else the form field of body.
func (f Field) read(h http.Header, payload, body []byte) string {
	if f.Header != "" {
		if s := h.Get(f.Header); s != "" {
			return s
		}
	}
	if f.JSON != "" && payload != nil {
		if s := jsonPath(payload, f.JSON); s != "" {
			return s
		}
	}
	if f.Form != "" && payload == nil {
		if form, err := url.ParseQuery(string(body)); err == nil {
			return form.Get(f.Form)
		}
	}
	return ""
}

// jsonPath returns the string or number at path (dot-separated member
// names) in doc, or "".
func jsonPath(doc []byte, path string) string {
	raw := json.RawMessage(doc)
	for name := range strings.SplitSeq(path, ".") {
		obj := jsonObject(raw)
		next, ok := obj[name]
		if !ok {
			return ""
		}
		raw = next
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var n json.Number
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	if dec.Decode(&n) == nil {
		return n.String()
	}
	return ""
}

// hmacScheme is configured per source (HMACConfig): no fixed signing, no
// retry schedule of its own.
var hmacScheme = scheme{name: HMAC, perSource: true, verifier: newHMAC}
