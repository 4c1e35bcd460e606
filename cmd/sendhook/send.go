package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/inboxhq/inbox/internal/provider"
)

// delivery is one webhook delivery, unsigned: send signs it anew each time,
// as a provider does when it retries.
type delivery struct {
	source   string
	provider string
	id       string // delivery id, for display
	event    string // event type, for display
	body     []byte
	header   http.Header // every header but the signature's
}

// headers returns the headers provider p sends with a delivery, without the
// signature: delivery id and event type where the provider carries them in
// headers, and what else the provider sends that the inbox keeps for audit.
func headers(p, id, event string, now time.Time) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	provider.Address(p, h, id, event)
	// What else each provider sends, for the audit trail to show.
	switch p {
	case provider.Stripe:
		h.Set("Content-Type", "application/json; charset=utf-8")
		h.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)")
	case provider.GitHub:
		h.Set("User-Agent", "GitHub-Hookshot/sendhook")
		h.Set("X-GitHub-Hook-ID", "424242")
		h.Set("X-GitHub-Hook-Installation-Target-Type", "repository")
		h.Set("X-GitHub-Hook-Installation-Target-ID", "1296269")
	case provider.Shopify:
		h.Set("X-Shopify-Event-Id", uuid())
		h.Set("X-Shopify-Shop-Domain", demoShopDomain)
		h.Set("X-Shopify-Triggered-At", now.UTC().Format(time.RFC3339Nano))
		h.Set("X-Shopify-API-Version", "2025-07")
	}
	return h
}

// fromBody makes a delivery of a body given as is. Stripe carries the
// delivery id and event type in the body, Standard Webhooks the event type:
// flags that contradict the body are errors rather than silently ignored.
func fromBody(p, source, event, id string, body []byte, now time.Time) (delivery, error) {
	var fields struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	}
	if p == provider.Stripe || p == provider.Standard {
		// A body that is not JSON is sent anyway (to see the 400); it just
		// has no id or type to show.
		_ = json.Unmarshal(body, &fields)
		if event != "" && event != fields.Type {
			return delivery{}, fmt.Errorf("--event %q: a %s event type is the body's \"type\" (%q here)", event, p, fields.Type)
		}
		event = fields.Type
	}
	switch p {
	case provider.Stripe:
		if id != "" && id != fields.ID {
			return delivery{}, fmt.Errorf("--delivery-id %q: a stripe delivery id is the body's \"id\" (%q here)", id, fields.ID)
		}
		id = fields.ID
	case provider.Standard:
		if id == "" {
			id = "msg_" + randomString(27)
		}
	default:
		if id == "" {
			id = uuid()
		}
		if event == "" {
			event = defaultEvent[p]
		}
	}
	return delivery{source: source, provider: p, id: id, event: event, body: body, header: headers(p, id, event, now)}, nil
}

// sender posts deliveries and tallies the answers.
type sender struct {
	base   string
	client *http.Client
	stdout io.Writer
	quiet  bool // no line per request; a non-2xx answer is still printed

	mu     sync.Mutex // paced sends run concurrently
	sent   int
	failed int
}

// send signs d with secret now and posts it, printing the answer. It returns
// an error only when no answer came; a non-2xx answer is counted for result.
func (s *sender) send(ctx context.Context, d delivery, secret string) error {
	target := strings.TrimRight(s.base, "/") + "/webhooks/" + url.PathEscape(d.source)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(d.body))
	if err != nil {
		return fmt.Errorf("request to %s: %w", target, err)
	}
	req.Header = d.header.Clone()
	if err := provider.Sign(d.provider, secret, req.Header, d.body, time.Now()); err != nil {
		return fmt.Errorf("sign %s delivery %s: %w", d.provider, d.id, err)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("%w (is ingest running? make run)", err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if err != nil {
		return fmt.Errorf("POST %s: read answer: %w", target, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent++
	mark := ""
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		s.failed++
		mark = "  <- not 2xx"
	}
	if !s.quiet || mark != "" {
		fmt.Fprintf(s.stdout, "%-9s %-25s %-38s -> %d %s%s\n", d.source, d.event, d.id, resp.StatusCode,
			strings.TrimSpace(string(answer)), mark)
	}
	return nil
}

// result is an error when any answer was not 2xx.
func (s *sender) result() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed > 0 {
		return fmt.Errorf("%d of %d requests got an answer that is not 2xx", s.failed, s.sent)
	}
	if s.sent == 0 {
		return errors.New("nothing sent")
	}
	return nil
}
