package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
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
	delay    time.Duration // before each answer

	inFlight, maxInFlight atomic.Int32

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
	n := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	for m := f.maxInFlight.Load(); n > m && !f.maxInFlight.CompareAndSwap(m, n); m = f.maxInFlight.Load() {
	}
	time.Sleep(f.delay)
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

// --rate sends each request when it is due, not after the answer to the one
// before: with answers that take 100 ms and 200 requests a second due, many
// are in flight at once (one at a time made --rate 500 send 115/s).
func TestRateDoesNotWaitForAnswers(t *testing.T) {
	t.Parallel()
	f := &fakeIngest{t: t, seen: map[string]bool{}, delay: 100 * time.Millisecond}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	var stdout bytes.Buffer
	args := []string{"--url", srv.URL, "--source", "payments", "--provider", "standard", "--event", "payment.succeeded", "--count", "40", "--rate", "200"}
	require.NoError(t, run(context.Background(), args, getenv, &stdout, io.Discard), stdout.String())
	require.Len(t, f.deliveries(), 40, "every request answered, none lost to the concurrency")
	require.GreaterOrEqual(t, f.maxInFlight.Load(), int32(4), "requests in flight at once")
	require.Regexp(t, `sent 40 requests \(40 distinct deliveries\) in .+, 0 not 2xx`, stdout.String())
}

func TestDemoSendsVerifiableDeliveriesTwice(t *testing.T) {
	t.Parallel()
	f, url := startFake(t, 0)
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"demo", "--url", url}, getenv, &stdout, &stderr)
	require.NoError(t, err, "run\nrejected: %q\nstdout:\n%s\nstderr:\n%s", f.rejections(), stdout.String(), stderr.String())

	got := f.deliveries()
	require.Len(t, got, 2*len(demoDeliveries)+demoExtraCount, "requests the server verified")
	for i, dd := range demoDeliveries {
		first, second := got[2*i], got[2*i+1]
		assert.Equal(t, [2]string{dd.source, dd.event}, [2]string{first.source, first.d.EventType}, "delivery %d", i)
		assert.Equal(t, first.d.DeliveryID, second.d.DeliveryID, "delivery %d: the resend is the same delivery", i)
		assert.Equal(t, first.d.Payload, second.d.Payload, "delivery %d: the resend is the same delivery", i)
	}
	// The extras: four new deliveries and the conflicting resend (answered
	// as a duplicate).
	assert.Equal(t, len(demoDeliveries)+4, strings.Count(stdout.String(), `"status": "accepted"`), "accepted answers printed:\n%s", stdout.String())
	assert.Equal(t, len(demoDeliveries)+1, strings.Count(stdout.String(), `"status": "duplicate"`), "duplicate answers printed:\n%s", stdout.String())
	for name, secret := range testEnv {
		assert.NotContains(t, stdout.String()+stderr.String(), secret, "the output contains the value of %s", name)
	}
}

// demoExtraCount is how many deliveries the demo sends after its pairs.
const demoExtraCount = 5

// After its pairs, the demo sends one of each case the console's pages
// show, signed as the rest: a payment in an unknown currency, a refund
// before the payment it refers to, the first Stripe event again with
// another body (the same id: a conflict), and an event no handler takes.
func TestDemoLeavesAFailureASnoozeAConflictAndAnIgnoredEvent(t *testing.T) {
	t.Parallel()
	f, url := startFake(t, 0)
	require.NoError(t, run(context.Background(), []string{"demo", "--url", url}, getenv, io.Discard, io.Discard))
	got := f.deliveries()
	require.Len(t, got, 2*len(demoDeliveries)+demoExtraCount)
	pairs, extras := got[:2*len(demoDeliveries)], got[2*len(demoDeliveries):]
	decode := func(r received) map[string]any {
		var m map[string]any
		require.NoError(t, json.Unmarshal(r.d.Payload, &m))
		return m
	}
	data := func(r received) map[string]any { return decode(r)["data"].(map[string]any) }

	failed, refund, payment, conflict, ignored := extras[0], extras[1], extras[2], extras[3], extras[4]
	require.Equal(t, [2]string{"payments", "payment.succeeded"}, [2]string{failed.source, failed.d.EventType})
	require.Equal(t, "XYZ", data(failed)["currency"], "a currency the ledger does not know")

	require.Equal(t, "payment.refunded", refund.d.EventType)
	require.Equal(t, "payment.succeeded", payment.d.EventType)
	require.Equal(t, data(payment)["payment_id"], data(refund)["payment_id"], "the refund, sent first, is of the payment sent after it")
	require.NotEqual(t, data(failed)["payment_id"], data(payment)["payment_id"])

	var stripeFirst received
	for _, r := range pairs {
		if r.source == "stripe" {
			stripeFirst = r
			break
		}
	}
	require.Equal(t, "stripe", conflict.source)
	require.Equal(t, stripeFirst.d.DeliveryID, conflict.d.DeliveryID, "the same event id")
	require.NotEqual(t, stripeFirst.d.Payload, conflict.d.Payload, "with another body")
	require.EqualValues(t, 2, decode(conflict)["pending_webhooks"])

	require.Equal(t, [2]string{"stripe", "customer.created"}, [2]string{ignored.source, ignored.d.EventType})
}

// The demo's refunds refer to its payments, with the fields the handlers read.
func TestDemoRefundsReferToTheirPayments(t *testing.T) {
	t.Parallel()
	f, url := startFake(t, 0)
	require.NoError(t, run(context.Background(), []string{"demo", "--url", url}, getenv, io.Discard, io.Discard))
	got := f.deliveries()
	payload := func(source, event string) map[string]any {
		for _, r := range got {
			if r.source == source && r.d.EventType == event {
				var m map[string]any
				dec := json.NewDecoder(bytes.NewReader(r.d.Payload))
				dec.UseNumber()
				require.NoError(t, dec.Decode(&m), "%s %s", source, event)
				return m
			}
		}
		require.FailNow(t, "no delivery", "no %s %s delivery", source, event)
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
	assert.Equal(t, dig(pi, "data", "object", "id"), dig(ch, "data", "object", "payment_intent"), "stripe refund's payment_intent")
	assert.Equal(t, json.Number("2000"), dig(pi, "data", "object", "amount_received"), "stripe amount_received")
	assert.Equal(t, json.Number("500"), dig(ch, "data", "object", "amount_refunded"), "stripe amount_refunded")

	pay := payload("payments", "payment.succeeded")
	ref := payload("payments", "payment.refunded")
	assert.Equal(t, dig(pay, "data", "payment_id"), dig(ref, "data", "payment_id"), "standard refund's payment_id")
	if dig(ref, "data", "refund_id") == nil || dig(pay, "data", "merchant_id") != "m_demo" || dig(pay, "data", "currency") != "EUR" {
		t.Errorf("standard samples lack refund_id, merchant_id m_demo or currency EUR: %v %v", pay, ref)
	}

	order := payload("shopify", "orders/paid")
	refund := payload("shopify", "refunds/create")
	assert.Equal(t, order["id"], refund["order_id"], "shopify refund's order_id")
	if order["total_price"] != "19.99" || order["currency"] != "USD" {
		t.Errorf("shopify order: total_price %v currency %v", order["total_price"], order["currency"])
	}
}

func TestSingleDelivery(t *testing.T) {
	t.Parallel()
	f, url := startFake(t, 0)
	var stdout bytes.Buffer
	args := []string{"--url", url, "--source", "github", "--event", "pull_request.opened", "--delivery-id", "d-1", "--repeat", "3"}
	require.NoError(t, run(context.Background(), args, getenv, &stdout, io.Discard), "run\n%s", stdout.String())
	got := f.deliveries()
	require.Len(t, got, 3, "requests the server verified")
	for _, r := range got {
		assert.Equal(t, [2]string{"d-1", "pull_request.opened"}, [2]string{r.d.DeliveryID, r.d.EventType}, "delivery id and event")
	}
}

// A source whose name is not a provider's needs --provider, and takes its
// secret from <SOURCE>_WEBHOOK_SECRET.
func TestSingleDeliveryToNamedSource(t *testing.T) {
	t.Parallel()
	_, url := startFake(t, 0)
	err := run(context.Background(), []string{"--url", url, "--source", "payments"}, getenv, io.Discard, io.Discard)
	require.ErrorContains(t, err, "--provider is required", "without --provider")
	f, url := startFake(t, 0)
	require.NoError(t, run(context.Background(), []string{"--url", url, "--source", "payments", "--provider", "standard", "--event", "payment.refunded"}, getenv, io.Discard, io.Discard))
	if got := f.deliveries(); len(got) != 1 || got[0].d.EventType != "payment.refunded" {
		t.Fatalf("got %+v, rejected %q", got, f.rejections())
	}
}

func TestNon2xxFails(t *testing.T) {
	t.Parallel()
	_, url := startFake(t, http.StatusServiceUnavailable)
	var stdout bytes.Buffer
	err := run(context.Background(), []string{"demo", "--url", url}, getenv, &stdout, io.Discard)
	require.ErrorContains(t, err, "not 2xx", "an error about answers that are not 2xx")
	assert.Contains(t, stdout.String(), "-> 503", "the answers are printed")
}

func TestWrongSecretFails(t *testing.T) {
	t.Parallel()
	f, url := startFake(t, 0)
	err := run(context.Background(), []string{"--url", url, "--source", "shopify", "--secret", "not-the-secret"}, getenv, io.Discard, io.Discard)
	require.Error(t, err, "a delivery signed with the wrong secret did not fail")
	r := f.rejections()
	if assert.Len(t, r, 1, "rejections") {
		assert.Contains(t, r[0], "no signature matches", "a rejection for a signature that does not match")
	}
}

func TestMissingSecretNamesTheVariable(t *testing.T) {
	t.Parallel()
	err := run(context.Background(), []string{"demo", "--url", "http://127.0.0.1:1"}, func(string) string { return "" }, io.Discard, io.Discard)
	require.ErrorContains(t, err, "STRIPE_WEBHOOK_SECRET", "an error naming the variable")
}

func TestBodyFileStripe(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"evt_from_file","object":"event","type":"customer.created","data":{"object":{}}}`)
	d, err := fromBody(provider.Stripe, "stripe", "", "", body, time.Now())
	require.NoError(t, err)
	assert.Equal(t, [2]string{"evt_from_file", "customer.created"}, [2]string{d.id, d.event}, "id and event")
	_, err = fromBody(provider.Stripe, "stripe", "", "evt_other", body, time.Now())
	assert.Error(t, err, "a --delivery-id that contradicts the body's id was accepted")
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
	stdout.Reset()
	args = []string{"--url", url, "--source", "payments", "--provider", "standard", "--event", "payment.succeeded", "--repeat", "2"}
	require.NoError(t, run(context.Background(), args, getenv, &stdout, io.Discard), stdout.String())
	require.Regexp(t, `(?m)^sent 2 requests \(1 distinct delivery\) in `, stdout.String(), "singular")

	err := run(context.Background(), []string{"--url", url, "--source", "github", "--delivery-id", "d-1", "--count", "2"}, getenv, io.Discard, io.Discard)
	require.ErrorContains(t, err, "use --repeat")
}

// -h prints the usage once (issue 23: the header came twice, the first
// time without its flags) and succeeds.
func TestHelpPrintsTheUsageOnce(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"-h"}, func(string) string { return "" }, &stdout, &stderr)
	require.ErrorIs(t, err, flag.ErrHelp)
	require.Equal(t, 1, strings.Count(stderr.String(), "usage: sendhook demo"), stderr.String())
	require.Contains(t, stderr.String(), "-source string")
}
