package backfill

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// StripeAPIURL is Stripe's API base URL.
const StripeAPIURL = "https://api.stripe.com"

// stripePageSize is the most events one page holds (Stripe's maximum).
const stripePageSize = 100

// StripeClient lists a Stripe account's events. It is safe for concurrent
// use; its requests share one rate limit.
type StripeClient struct {
	base       string
	key        string
	apiVersion string
	// Types limits the listing to these event types (see
	// backfillspec.Spec.Events): one with a "*" is sent as type, others as
	// types[].
	Types []string
	http  *httpDoer
}

// NewStripeClient returns a client for the API at base (StripeAPIURL when
// empty) with the secret or restricted key. apiVersion, when set, is sent as
// Stripe-Version.
func NewStripeClient(base, key, apiVersion string, opts ClientOptions) *StripeClient {
	return &StripeClient{
		base:       strings.TrimSuffix(cmp.Or(base, StripeAPIURL), "/"),
		key:        key,
		apiVersion: apiVersion,
		http:       newDoer(opts, key, decodeStripeError),
	}
}

// StripeEvent is one event of a page: its id, type, creation time, account
// (Connect) and its JSON as Stripe rendered it.
type StripeEvent struct {
	ID      string
	Type    string
	Created time.Time
	Account string
	// Livemode is the event's livemode; nil when its JSON has none.
	Livemode *bool
	Raw      json.RawMessage
}

// StripePage is one page of GET /v1/events, newest first.
type StripePage struct {
	Events  []StripeEvent
	HasMore bool
}

// ListEvents returns the page of events created in [since, until] that
// follows the event after (empty: the newest), of the connected account
// (empty: the key's own account). A 429 or 5xx is retried (Retry-After
// honoured) before it returns an error.
func (c *StripeClient) ListEvents(ctx context.Context, account string, since, until time.Time, after string) (StripePage, error) {
	q := url.Values{}
	q.Set("limit", strconv.Itoa(stripePageSize))
	q.Set("created[gte]", strconv.FormatInt(since.Unix(), 10))
	q.Set("created[lte]", strconv.FormatInt(until.Unix(), 10))
	if after != "" {
		q.Set("starting_after", after)
	}
	for _, t := range c.Types {
		if strings.Contains(t, "*") {
			q.Set("type", t)
		} else {
			q.Add("types[]", t)
		}
	}
	u := c.base + "/v1/events?" + q.Encode()
	_, body, err := c.http.do(ctx, func(ctx context.Context) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+c.key)
		req.Header.Set("Accept", "application/json")
		req.Header.Set("User-Agent", "inbox-backfill")
		if account != "" {
			req.Header.Set("Stripe-Account", account)
		}
		if c.apiVersion != "" {
			req.Header.Set("Stripe-Version", c.apiVersion)
		}
		return req, nil
	})
	if err != nil {
		return StripePage{}, fmt.Errorf("list Stripe events: %w", err)
	}
	var list struct {
		Object  string            `json:"object"`
		HasMore bool              `json:"has_more"`
		Data    []json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil || list.Object != "list" {
		return StripePage{}, fmt.Errorf("list Stripe events: the answer is not a list object")
	}
	page := StripePage{HasMore: list.HasMore, Events: make([]StripeEvent, 0, len(list.Data))}
	for i, raw := range list.Data {
		var ev struct {
			ID       string `json:"id"`
			Object   string `json:"object"`
			Type     string `json:"type"`
			Created  int64  `json:"created"`
			Account  string `json:"account"`
			Livemode *bool  `json:"livemode"`
		}
		if err := json.Unmarshal(raw, &ev); err != nil || ev.ID == "" || ev.Object != "event" {
			return StripePage{}, fmt.Errorf("list Stripe events: data[%d] is not an event with an id", i)
		}
		page.Events = append(page.Events, StripeEvent{
			ID: ev.ID, Type: ev.Type, Created: time.Unix(ev.Created, 0).UTC(), Account: cmp.Or(ev.Account, account), Livemode: ev.Livemode, Raw: raw,
		})
	}
	if page.HasMore && len(page.Events) == 0 {
		return StripePage{}, fmt.Errorf("list Stripe events: has_more with an empty page")
	}
	return page, nil
}

// Body is the event as a webhook carries it: indented as Stripe's webhook
// bodies are, and, for an event of a connected account listed with
// Stripe-Account whose JSON names no account, with "account" added, as
// Stripe adds it to a Connect endpoint's webhooks (the ledger's merchant).
func (e StripeEvent) Body() []byte {
	raw := bytes.TrimSpace(e.Raw)
	if e.Account != "" && !hasMember(raw, "account") {
		acct, _ := json.Marshal(e.Account)
		rest := bytes.TrimSpace(raw[1:])
		sep := ","
		if len(rest) > 0 && rest[0] == '}' {
			sep = ""
		}
		raw = append(append(append([]byte(`{"account":`), acct...), sep...), rest...)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		return append([]byte(nil), e.Raw...)
	}
	return out.Bytes()
}

func hasMember(obj []byte, name string) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(obj, &m) != nil {
		return false
	}
	_, ok := m[name]
	return ok
}

func decodeStripeError(status int, body []byte) *APIError {
	e := &APIError{Provider: "Stripe", Status: status}
	var b struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &b) == nil {
		e.Message = redactKey(b.Error.Message)
		e.Code = cmp.Or(b.Error.Code, b.Error.Type)
	}
	return e
}

// redactKey hides what looks like a Stripe key in an error message (Stripe
// quotes a bad key's prefix in "Invalid API Key provided: sk_test_****1234").
func redactKey(msg string) string {
	fields := strings.Fields(msg)
	for i, f := range fields {
		for _, p := range []string{"sk_", "rk_", "pk_"} {
			if strings.HasPrefix(strings.Trim(f, `"'.,:;`), p) {
				fields[i] = "[redacted]"
			}
		}
	}
	return strings.Join(fields, " ")
}
