package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/provider"
)

// The config/example.env values, and the sources of config/example.yaml.
var testEnv = map[string]string{
	"STRIPE_WEBHOOK_SECRET":   "whsec_dev_stripe_secret_do_not_use",
	"GITHUB_WEBHOOK_SECRET":   "dev_github_secret_do_not_use",
	"SHOPIFY_WEBHOOK_SECRET":  "dev_shopify_secret_do_not_use",
	"PAYMENTS_WEBHOOK_SECRET": "whsec_aW5ib3gtZGV2LXBheW1lbnRzLXNpZ25pbmcta2V5LTAwMDE=",
}

var testSources = map[string]struct{ provider, secretEnv string }{
	"stripe":   {provider.Stripe, "STRIPE_WEBHOOK_SECRET"},
	"github":   {provider.GitHub, "GITHUB_WEBHOOK_SECRET"},
	"shopify":  {provider.Shopify, "SHOPIFY_WEBHOOK_SECRET"},
	"payments": {provider.Standard, "PAYMENTS_WEBHOOK_SECRET"},
}

func getenv(name string) string { return testEnv[name] }

type received struct {
	source string
	d      provider.Delivery
}

// fakeIngest verifies each request with the real verifiers and answers as
// ingest does: 202 for a new delivery id, 200 for a repeat, 401 for a bad
// signature. failWith, when set, is the answer to every request.
type fakeIngest struct {
	t        *testing.T
	failWith int

	mu       sync.Mutex
	got      []received
	rejected []string
	seen     map[string]bool
}

// deliveries returns the verified deliveries, in arrival order.
func (f *fakeIngest) deliveries() []received {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]received(nil), f.got...)
}

// rejections returns why requests were refused.
func (f *fakeIngest) rejections() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.rejected...)
}

func (f *fakeIngest) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	source, ok := strings.CutPrefix(r.URL.Path, "/webhooks/")
	src, known := testSources[source]
	if !ok || !known || r.Method != http.MethodPost {
		http.Error(w, `{"error":"unknown source"}`, http.StatusNotFound)
		return
	}
	if f.failWith != 0 {
		http.Error(w, `{"error":"down"}`, f.failWith)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		f.t.Errorf("read body: %v", err)
		return
	}
	v, err := provider.New(provider.Config{Provider: src.provider, Secrets: []string{testEnv[src.secretEnv]}})
	if err != nil {
		f.t.Errorf("verifier: %v", err)
		return
	}
	d, err := v.Verify(r.Header, body, time.Now())
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		f.rejected = append(f.rejected, source+": "+err.Error())
		http.Error(w, `{"error":"signature"}`, http.StatusUnauthorized)
		return
	}
	f.got = append(f.got, received{source, d})
	key := source + "/" + d.DeliveryID
	if f.seen[key] {
		w.WriteHeader(http.StatusOK)
		fmt.Fprintf(w, `{"envelope_id": %d, "status": "duplicate"}`, len(f.got))
		return
	}
	f.seen[key] = true
	w.WriteHeader(http.StatusAccepted)
	fmt.Fprintf(w, `{"envelope_id": %d, "status": "accepted"}`, len(f.got))
}

func startFake(t *testing.T, failWith int) (*fakeIngest, string) {
	t.Helper()
	f := &fakeIngest{t: t, failWith: failWith, seen: map[string]bool{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func TestDemoSendsVerifiableDeliveriesTwice(t *testing.T) {
	t.Parallel()
	f, url := startFake(t, 0)
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"demo", "--url", url}, getenv, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\nrejected: %q\nstdout:\n%s\nstderr:\n%s", err, f.rejections(), stdout.String(), stderr.String())
	}

	got := f.deliveries()
	if len(got) != 2*len(demoDeliveries) {
		t.Fatalf("server verified %d requests, want %d", len(got), 2*len(demoDeliveries))
	}
	for i, dd := range demoDeliveries {
		first, second := got[2*i], got[2*i+1]
		if first.source != dd.source || first.d.EventType != dd.event {
			t.Errorf("delivery %d: got %s %s, want %s %s", i, first.source, first.d.EventType, dd.source, dd.event)
		}
		if second.d.DeliveryID != first.d.DeliveryID || !bytes.Equal(second.d.Payload, first.d.Payload) {
			t.Errorf("delivery %d: the resend is not the same delivery (%s, then %s)", i, first.d.DeliveryID, second.d.DeliveryID)
		}
	}
	if n := strings.Count(stdout.String(), `"status": "accepted"`); n != len(demoDeliveries) {
		t.Errorf("printed %d accepted answers, want %d:\n%s", n, len(demoDeliveries), stdout.String())
	}
	if n := strings.Count(stdout.String(), `"status": "duplicate"`); n != len(demoDeliveries) {
		t.Errorf("printed %d duplicate answers, want %d:\n%s", n, len(demoDeliveries), stdout.String())
	}
	for name, secret := range testEnv {
		if strings.Contains(stdout.String()+stderr.String(), secret) {
			t.Errorf("output contains the value of %s", name)
		}
	}
}

// The demo's refunds refer to its payments, with the fields the handlers read.
func TestDemoRefundsReferToTheirPayments(t *testing.T) {
	t.Parallel()
	f, url := startFake(t, 0)
	if err := run(context.Background(), []string{"demo", "--url", url}, getenv, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	got := f.deliveries()
	payload := func(source, event string) map[string]any {
		for _, r := range got {
			if r.source == source && r.d.EventType == event {
				var m map[string]any
				dec := json.NewDecoder(bytes.NewReader(r.d.Payload))
				dec.UseNumber()
				if err := dec.Decode(&m); err != nil {
					t.Fatalf("%s %s: %v", source, event, err)
				}
				return m
			}
		}
		t.Fatalf("no %s %s delivery", source, event)
		return nil
	}
	dig := func(m map[string]any, path ...string) any {
		var v any = m
		for _, p := range path {
			v = v.(map[string]any)[p]
		}
		return v
	}

	pi := payload("stripe", "payment_intent.succeeded")
	ch := payload("stripe", "charge.refunded")
	if got, want := dig(ch, "data", "object", "payment_intent"), dig(pi, "data", "object", "id"); got != want {
		t.Errorf("stripe refund's payment_intent %v, want %v", got, want)
	}
	if got := dig(pi, "data", "object", "amount_received"); got != json.Number("2000") {
		t.Errorf("stripe amount_received %v, want 2000", got)
	}
	if got := dig(ch, "data", "object", "amount_refunded"); got != json.Number("500") {
		t.Errorf("stripe amount_refunded %v, want 500", got)
	}

	pay := payload("payments", "payment.succeeded")
	ref := payload("payments", "payment.refunded")
	if got, want := dig(ref, "data", "payment_id"), dig(pay, "data", "payment_id"); got != want {
		t.Errorf("standard refund's payment_id %v, want %v", got, want)
	}
	if dig(ref, "data", "refund_id") == nil || dig(pay, "data", "merchant_id") != "m_demo" || dig(pay, "data", "currency") != "EUR" {
		t.Errorf("standard samples lack refund_id, merchant_id m_demo or currency EUR: %v %v", pay, ref)
	}

	order := payload("shopify", "orders/paid")
	refund := payload("shopify", "refunds/create")
	if got, want := refund["order_id"], order["id"]; got != want {
		t.Errorf("shopify refund's order_id %v, want %v", got, want)
	}
	if order["total_price"] != "19.99" || order["currency"] != "USD" {
		t.Errorf("shopify order: total_price %v currency %v", order["total_price"], order["currency"])
	}
}

func TestSingleDelivery(t *testing.T) {
	t.Parallel()
	f, url := startFake(t, 0)
	var stdout bytes.Buffer
	args := []string{"--url", url, "--source", "github", "--event", "pull_request.opened", "--delivery-id", "d-1", "--repeat", "3"}
	if err := run(context.Background(), args, getenv, &stdout, io.Discard); err != nil {
		t.Fatalf("run: %v\n%s", err, stdout.String())
	}
	got := f.deliveries()
	if len(got) != 3 {
		t.Fatalf("server verified %d requests, want 3", len(got))
	}
	for _, r := range got {
		if r.d.DeliveryID != "d-1" || r.d.EventType != "pull_request.opened" {
			t.Errorf("got delivery %q event %q, want d-1 pull_request.opened", r.d.DeliveryID, r.d.EventType)
		}
	}
}

// A source whose name is not a provider's needs --provider, and takes its
// secret from <SOURCE>_WEBHOOK_SECRET.
func TestSingleDeliveryToNamedSource(t *testing.T) {
	t.Parallel()
	_, url := startFake(t, 0)
	err := run(context.Background(), []string{"--url", url, "--source", "payments"}, getenv, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--provider is required") {
		t.Fatalf("without --provider: got %v", err)
	}
	f, url := startFake(t, 0)
	if err := run(context.Background(), []string{"--url", url, "--source", "payments", "--provider", "standard", "--event", "payment.refunded"}, getenv, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	if got := f.deliveries(); len(got) != 1 || got[0].d.EventType != "payment.refunded" {
		t.Fatalf("got %+v, rejected %q", got, f.rejections())
	}
}

func TestNon2xxFails(t *testing.T) {
	t.Parallel()
	_, url := startFake(t, http.StatusServiceUnavailable)
	var stdout bytes.Buffer
	err := run(context.Background(), []string{"demo", "--url", url}, getenv, &stdout, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "not 2xx") {
		t.Fatalf("got %v, want an error about answers that are not 2xx", err)
	}
	if !strings.Contains(stdout.String(), "-> 503") {
		t.Errorf("the answers are not printed:\n%s", stdout.String())
	}
}

func TestWrongSecretFails(t *testing.T) {
	t.Parallel()
	f, url := startFake(t, 0)
	err := run(context.Background(), []string{"--url", url, "--source", "shopify", "--secret", "not-the-secret"}, getenv, io.Discard, io.Discard)
	if err == nil {
		t.Fatal("a delivery signed with the wrong secret did not fail")
	}
	if r := f.rejections(); len(r) != 1 || !strings.Contains(r[0], "no signature matches") {
		t.Errorf("rejections %q, want one for a signature that does not match", r)
	}
}

func TestMissingSecretNamesTheVariable(t *testing.T) {
	t.Parallel()
	err := run(context.Background(), []string{"demo", "--url", "http://127.0.0.1:1"}, func(string) string { return "" }, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "STRIPE_WEBHOOK_SECRET") {
		t.Fatalf("got %v, want an error naming STRIPE_WEBHOOK_SECRET", err)
	}
}

func TestBodyFileStripe(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"evt_from_file","object":"event","type":"customer.created","data":{"object":{}}}`)
	d, err := fromBody(provider.Stripe, "stripe", "", "", body, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if d.id != "evt_from_file" || d.event != "customer.created" {
		t.Errorf("id %q event %q", d.id, d.event)
	}
	if _, err := fromBody(provider.Stripe, "stripe", "", "evt_other", body, time.Now()); err == nil {
		t.Error("a --delivery-id that contradicts the body's id was accepted")
	}
}

// --count N sends N distinct deliveries (own delivery id, own payment id),
// with --repeat copies of each, and past 20 prints only the summary.
func TestCountSendsDistinctDeliveries(t *testing.T) {
	t.Parallel()
	f, url := startFake(t, 0)
	var stdout bytes.Buffer
	args := []string{"--url", url, "--source", "payments", "--provider", "standard", "--event", "payment.succeeded", "--count", "25", "--repeat", "2", "--rate", "1000"}
	require.NoError(t, run(context.Background(), args, getenv, &stdout, io.Discard), stdout.String())
	got := f.deliveries()
	require.Len(t, got, 50)
	ids, payments := map[string]int{}, map[string]bool{}
	for _, r := range got {
		ids[r.d.DeliveryID]++
		var body struct {
			Data struct {
				PaymentID string `json:"payment_id"`
			} `json:"data"`
		}
		require.NoError(t, json.Unmarshal(r.d.Payload, &body))
		require.NotEmpty(t, body.Data.PaymentID)
		payments[body.Data.PaymentID] = true
	}
	require.Len(t, ids, 25, "distinct delivery ids")
	for id, n := range ids {
		require.Equal(t, 2, n, "each delivery twice: %s", id)
	}
	require.Len(t, payments, 25, "distinct payments, not one payment under 25 ids")
	require.Equal(t, 1, strings.Count(stdout.String(), "\n"), "quiet past 20: the summary only:\n%s", stdout.String())
	require.Regexp(t, `^sent 50 requests \(25 distinct deliveries\) in .+: \d+/s, 0 not 2xx\n$`, stdout.String())

	err := run(context.Background(), []string{"--url", url, "--source", "github", "--delivery-id", "d-1", "--count", "2"}, getenv, io.Discard, io.Discard)
	require.ErrorContains(t, err, "use --repeat")
}
