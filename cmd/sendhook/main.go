// Command sendhook sends signed sample webhook deliveries to an inbox's
// ingest, as Stripe, GitHub, Shopify or a Standard Webhooks sender would:
// same headers, same signature scheme, re-signed on each resend with the same
// delivery id and body, as providers do on a retry. It is a development and
// demo tool: it reads secrets from the environment (or a flag) and never
// prints them.
//
//	sendhook demo [--url URL]
//	    send, to each source of config/example.yaml, realistic events (a
//	    payment, then its refund; a GitHub push), each twice: the second copy
//	    is a duplicate and must get 200 "duplicate".
//	sendhook --source NAME [--provider P] [--event TYPE] [--body FILE] [--count N] ...
//	    send one delivery N times.
//
// Secrets come from --secret, else the environment variable named by
// --secret-env, else <SOURCE>_WEBHOOK_SECRET (source "payments" reads
// PAYMENTS_WEBHOOK_SECRET): the names config/example.env sets. It exits
// non-zero when any answer is not 2xx, so a demo against a broken service
// fails.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"

	"github.com/inboxhq/inbox/internal/cli"
	"github.com/inboxhq/inbox/internal/provider"
)

func main() { cli.Main("sendhook", run, nil) }

const defaultURL = "http://127.0.0.1:8080"

// run sends what args ask for and returns an error when a request fails or
// any answer is not 2xx.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "demo" {
		return runDemo(ctx, args[1:], getenv, stdout, stderr)
	}
	fs := cli.NewFlags("sendhook", getenv, stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: sendhook demo [--url URL]
       sendhook --source NAME [flags]
       sendhook --source payments --count 3000 --rate 500   a backlog of distinct deliveries

flags:
`)
		fs.PrintDefaults()
	}
	baseURL := fs.String("url", "INGEST_URL", defaultURL, "ingest's base URL")
	source := fs.String("source", "", "", "source name: the request goes to POST <url>/webhooks/<source> (required)")
	prov := fs.String("provider", "", "", "stripe, github, shopify or standard (default: the source name, when it is one of these)")
	secret := fs.String("secret", "", "", "signing secret (visible to other local users in the process list: prefer --secret-env)")
	secretEnv := fs.String("secret-env", "", "", "environment variable holding the secret (default <SOURCE>_WEBHOOK_SECRET)")
	event := fs.String("event", "", "", "event type (default per provider: payment_intent.succeeded, push, orders/paid, payment.succeeded)")
	bodyFile := fs.String("body", "", "", "file with the body to send as is ('-' for stdin); default a built-in sample of --event")
	deliveryID := fs.String("delivery-id", "", "", "delivery id (default random; for stripe it is the body's id)")
	count := fs.Int("count", "", 1, "distinct deliveries to send, each with its own delivery id and business ids (a backlog in one command; not with --delivery-id or --body)")
	repeat := fs.Int("repeat", "", 1, "send each delivery this many times (the extra ones are duplicates)")
	perSecond := fs.Int("rate", "", 0, "this many requests a second, each sent when due without waiting for the answers before it (at most 64 unanswered); 0: one after another, as fast as ingest answers")
	quiet := fs.Bool("quiet", false, "print only the summary, not a line per request (default when --count is over 20)")
	timeout := fs.Duration("timeout", "", 10*time.Second, "bound on each request")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (did you mean 'sendhook demo'?)", fs.Arg(0))
	}
	if *source == "" {
		fs.Usage()
		return errors.New("--source is required")
	}
	switch {
	case *count < 1:
		return errors.New("--count must be at least 1")
	case *repeat < 1:
		return errors.New("--repeat must be at least 1")
	case *perSecond < 0:
		return errors.New("--rate must be 0 (unpaced) or more")
	case *count > 1 && (*deliveryID != "" || *bodyFile != ""):
		return errors.New("--count sends distinct deliveries, which a fixed --delivery-id or --body cannot make: use --repeat to send copies of one")
	}
	p := *prov
	if p == "" {
		if !slices.Contains(provider.Names, *source) {
			return fmt.Errorf("--provider is required: source %q is not a provider name (%s)", *source, strings.Join(provider.Names, ", "))
		}
		p = *source
	}
	if !slices.Contains(provider.Names, p) {
		return fmt.Errorf("unknown provider %q (want one of %s)", p, strings.Join(provider.Names, ", "))
	}
	key, err := lookupSecret(*source, *secret, *secretEnv, getenv)
	if err != nil {
		return err
	}

	next := func() (delivery, error) {
		if *bodyFile != "" {
			body, err := readBody(*bodyFile)
			if err != nil {
				return delivery{}, err
			}
			return fromBody(p, *source, *event, *deliveryID, body, time.Now())
		}
		ev := *event
		if ev == "" {
			ev = defaultEvent[p]
		}
		// New samples each time: new business ids (payment, order), so
		// distinct deliveries are distinct payments too.
		return newSamples(time.Now()).build(p, *source, ev, *deliveryID)
	}
	s := &sender{base: *baseURL, client: &http.Client{Timeout: *timeout}, stdout: stdout, quiet: *quiet || *count > 20}
	var pace *rate.Limiter
	if *perSecond > 0 {
		pace = rate.NewLimiter(rate.Limit(*perSecond), 1)
	}
	start := time.Now()
	// Paced: each request is sent when it is due, without waiting for the
	// answers before it (at most maxInFlight unanswered), so that a slow
	// answer does not thin the rate; the first that gets no answer stops the
	// run. Unpaced: one after another.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(maxInFlight)
	sendAll := func() error {
		for range *count {
			d, err := next()
			if err != nil {
				_ = g.Wait() // the requests in flight answer first
				return err
			}
			for range *repeat {
				if pace == nil {
					if err := s.send(ctx, d, key); err != nil {
						return err
					}
					continue
				}
				if err := pace.Wait(gctx); err != nil {
					if gerr := g.Wait(); gerr != nil {
						return gerr // a send failed: that is why
					}
					return fmt.Errorf("after %d requests: %w", s.sent, err)
				}
				g.Go(func() error { return s.send(gctx, d, key) })
			}
		}
		return g.Wait()
	}
	if err := sendAll(); err != nil {
		return err
	}
	if *count > 1 || *repeat > 1 {
		el := time.Since(start)
		fmt.Fprintf(stdout, "sent %s (%s) in %s: %.0f/s, %d not 2xx\n",
			cli.Count(s.sent, "request", "requests"), cli.Count(*count, "distinct delivery", "distinct deliveries"),
			el.Round(time.Millisecond), float64(s.sent)/max(el.Seconds(), 1e-9), s.failed)
	}
	return s.result()
}

// demoDeliveries are what `sendhook demo` sends, in order, to the sources of
// config/example.yaml; a refund follows its payment.
var demoDeliveries = []struct{ source, provider, event string }{
	{"stripe", provider.Stripe, "payment_intent.succeeded"},
	{"stripe", provider.Stripe, "charge.refunded"},
	{"payments", provider.Standard, "payment.succeeded"},
	{"payments", provider.Standard, "payment.refunded"},
	{"shopify", provider.Shopify, "orders/paid"},
	{"shopify", provider.Shopify, "refunds/create"},
	{"github", provider.GitHub, "push"},
}

func runDemo(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("sendhook demo", getenv, stderr)
	baseURL := fs.String("url", "INGEST_URL", defaultURL, "ingest's base URL")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("demo: unexpected argument %q", fs.Arg(0))
	}
	// Every secret first: a missing one fails before anything is sent.
	keys := map[string]string{}
	for _, dd := range demoDeliveries {
		k, err := lookupSecret(dd.source, "", "", getenv)
		if err != nil {
			return fmt.Errorf("%w (config/example.env has dev values: make demo loads them)", err)
		}
		keys[dd.source] = k
	}
	samples := newSamples(time.Now())
	s := &sender{base: *baseURL, client: &http.Client{Timeout: 10 * time.Second}, stdout: stdout}
	fmt.Fprintf(stdout, "sending %d deliveries to %s, each twice (the second is a duplicate)\n", len(demoDeliveries), strings.TrimRight(*baseURL, "/"))
	var first delivery // the first Stripe payment, resent below with another body
	for _, dd := range demoDeliveries {
		d, err := samples.build(dd.provider, dd.source, dd.event, "")
		if err != nil {
			return err
		}
		if first.id == "" && dd.provider == provider.Stripe {
			first = d
		}
		for range 2 {
			if err := s.send(ctx, d, keys[dd.source]); err != nil {
				return err
			}
		}
	}
	extras, err := demoExtras(first)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "then one of each case the console's pages show: a failure, a refund before its payment (snoozed, then done), a conflicting resend and an ignored event")
	for i, x := range extras {
		if i > 0 && extras[i-1].pause > 0 {
			time.Sleep(extras[i-1].pause) // let the worker try the refund before its payment arrives
		}
		if err := s.send(ctx, x.d, keys[x.d.source]); err != nil {
			return err
		}
	}
	if err := s.result(); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "done: the worker now processes them; see the envelope and ledger_* tables")
	return nil
}

// maxInFlight bounds a paced run's unanswered requests.
const maxInFlight = 64

// demoExtra is one of the demo's cases beyond the happy path, and how long
// to wait after sending it.
type demoExtra struct {
	d     delivery
	pause time.Duration
}

// demoExtras are the deliveries that leave the console's Failures page,
// --cause and the conflict diff something to show, each sent once: a
// payment in a currency the ledger does not know (failed, unknown_currency);
// a refund sent before its payment (snoozed, payment_not_posted, then done
// once the payment is posted); first (a Stripe event) resent with another
// body, as Stripe re-renders pending_webhooks (a conflict, answered 200
// duplicate); and an event type no handler takes (ignored).
func demoExtras(first delivery) ([]demoExtra, error) {
	bad := newSamples(time.Now())
	failed, err := bad.build(provider.Standard, "payments", "payment.succeeded", "")
	if err != nil {
		return nil, err
	}
	if failed.body, err = editJSON(failed.body, func(m map[string]any) { m["data"].(map[string]any)["currency"] = "XYZ" }); err != nil {
		return nil, err
	}
	late := newSamples(time.Now())
	refund, err := late.build(provider.Standard, "payments", "payment.refunded", "")
	if err != nil {
		return nil, err
	}
	payment, err := late.build(provider.Standard, "payments", "payment.succeeded", "")
	if err != nil {
		return nil, err
	}
	conflict := first
	if conflict.body, err = editJSON(first.body, func(m map[string]any) { m["pending_webhooks"] = 2 }); err != nil {
		return nil, err
	}
	ignored, err := bad.build(provider.Stripe, "stripe", "customer.created", "")
	if err != nil {
		return nil, err
	}
	return []demoExtra{{d: failed}, {d: refund, pause: 2 * time.Second}, {d: payment}, {d: conflict}, {d: ignored}}, nil
}

// editJSON returns body (a JSON object) changed by edit.
func editJSON(body []byte, edit func(map[string]any)) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("edit sample: %w", err)
	}
	edit(m)
	return json.Marshal(m)
}

// lookupSecret returns the signing secret for source: flagValue, else the
// variable envName, else <SOURCE>_WEBHOOK_SECRET. Its errors name the
// variable, never a value.
func lookupSecret(source, flagValue, envName string, getenv func(string) string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if envName == "" {
		envName = secretEnvName(source)
	}
	if v := getenv(envName); v != "" {
		return v, nil
	}
	return "", fmt.Errorf("no secret for source %q: set %s (or pass --secret-env NAME)", source, envName)
}

// secretEnvName is the default variable of a source's secret: "payments" ->
// PAYMENTS_WEBHOOK_SECRET, "shop-eu" -> SHOP_EU_WEBHOOK_SECRET.
func secretEnvName(source string) string {
	return strings.ToUpper(strings.ReplaceAll(source, "-", "_")) + "_WEBHOOK_SECRET"
}

func readBody(name string) ([]byte, error) {
	if name == "-" {
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			return nil, fmt.Errorf("read body from stdin: %w", err)
		}
		return b, nil
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	return b, nil
}
