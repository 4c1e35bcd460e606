// Command inboxload drives load at a running inbox and measures it, for
// scripts/bench-pipeline (docs/benchmarks.md). It sends only to the URL it
// is given (a local ingest) and stops by itself.
//
//	inboxload send --url URL --secret-env VAR [--concurrency N | --rate R] [--count N | --duration D] [--merchants M]
//	    send distinct, freshly signed Standard Webhooks payment deliveries to
//	    POST URL/webhooks/<--source>: closed loop with --concurrency senders,
//	    or open loop at --rate deliveries/s (each on its own goroutine, so a
//	    slow answer does not slow the offered rate). Prints one JSON line:
//	    sent, acknowledged, non-2xx, errors, rate, latency p50/p99/max.
//	inboxload drain --database-url URL [--timeout D] [--since RFC3339]
//	    wait until no envelope received since --since is pending, then print
//	    one JSON line: envelopes, processing rate (first to last
//	    processed_at), received-to-done latency p50/p99/max, from the
//	    database.
//	inboxload rss --pid N
//	    print the process's resident memory (VmRSS and VmHWM) as JSON.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxhq/inbox/internal/cli"
	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/ledger"
	"github.com/inboxhq/inbox/internal/provider"
	"github.com/inboxhq/inbox/internal/webhooktest"
)

func main() { cli.Main("inboxload", run, nil) }

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New(inboxloadUsage)
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, inboxloadUsage)
		return nil
	case "send":
		return runSend(ctx, args[1:], getenv, stdout, stderr)
	case "drain":
		return runDrain(ctx, args[1:], getenv, stdout, stderr)
	case "rss":
		return runRSS(args[1:], stdout, stderr)
	}
	return fmt.Errorf("unknown command %q: send, drain or rss", args[0])
}

// inboxloadUsage is the top-level usage; each command's -h lists its flags.
const inboxloadUsage = "usage: inboxload send|drain|rss [flags] (inboxload send -h for a command's flags; the package doc explains the load)"

type sendResult struct {
	Sent         int64   `json:"sent"`
	Acknowledged int64   `json:"acknowledged"`
	Non2xx       int64   `json:"non_2xx"`
	Errors       int64   `json:"errors"`
	Seconds      float64 `json:"seconds"`
	Rate         float64 `json:"rate"`
	OfferedRate  float64 `json:"offered_rate,omitempty"`
	P50ms        float64 `json:"p50_ms"`
	P99ms        float64 `json:"p99_ms"`
	Maxms        float64 `json:"max_ms"`
	FirstError   string  `json:"first_error,omitempty"`
}

func runSend(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inboxload send", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "http://127.0.0.1:8080", "ingest's base URL (a local address)")
	source := fs.String("source", "payments", "source name (a Standard Webhooks source)")
	secretEnv := fs.String("secret-env", "PAYMENTS_WEBHOOK_SECRET", "environment variable holding the source's secret")
	concurrency := fs.Int("concurrency", 32, "closed loop: concurrent senders (ignored with --rate)")
	rate := fs.Float64("rate", 0, "open loop: deliveries offered per second")
	count := fs.Int64("count", 0, "stop after this many deliveries (0: --duration)")
	duration := fs.Duration("duration", 10*time.Second, "stop after this long (with --count 0)")
	merchants := fs.Int("merchants", 100, "merchants the payments are spread over")
	prefix := fs.String("prefix", fmt.Sprintf("load-%d", time.Now().UnixNano()), "delivery id prefix (distinct per run)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	secret := getenv(*secretEnv)
	if secret == "" {
		return fmt.Errorf("%s is not set", *secretEnv)
	}
	endpoint := strings.TrimRight(*url, "/") + "/webhooks/" + *source
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1024, MaxConnsPerHost: 0}}

	var seq, acked, non2xx, failed atomic.Int64
	var firstErr atomic.Value
	var mu sync.Mutex
	lat := make([]time.Duration, 0, 1<<16)
	sendOne := func(n int64) {
		id := fmt.Sprintf("%s-%d", *prefix, n)
		m := fmt.Sprintf("m_%03d", n%int64(*merchants))
		d := webhooktest.Delivery{Provider: provider.Standard, Secret: secret, DeliveryID: id,
			Body: webhooktest.StandardPayment("pay_"+id, m, 1000+n%1000, "EUR")}
		start := time.Now()
		req, err := d.Request(ctx, endpoint)
		if err == nil {
			var resp *http.Response
			if resp, err = client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode/100 == 2 {
					acked.Add(1)
				} else {
					non2xx.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("status %d", resp.StatusCode))
				}
			}
		}
		if err != nil {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, err.Error())
		}
		el := time.Since(start)
		mu.Lock()
		lat = append(lat, el)
		mu.Unlock()
	}
	more := func(start time.Time) (int64, bool) {
		n := seq.Add(1)
		if *count > 0 {
			return n, n <= *count
		}
		return n, time.Since(start) < *duration
	}

	start := time.Now()
	var wg sync.WaitGroup
	if *rate > 0 {
		interval := time.Duration(float64(time.Second) / *rate)
		next := start
		for {
			n, ok := more(start)
			if !ok || ctx.Err() != nil {
				break
			}
			wg.Add(1)
			go func() { defer wg.Done(); sendOne(n) }()
			next = next.Add(interval)
			if d := time.Until(next); d > 0 {
				time.Sleep(d)
			}
		}
	} else {
		for range *concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					n, ok := more(start)
					if !ok {
						return
					}
					sendOne(n)
				}
			}()
		}
	}
	offered := time.Since(start)
	wg.Wait()
	el := time.Since(start)
	slices.Sort(lat)
	res := sendResult{Sent: int64(len(lat)), Acknowledged: acked.Load(), Non2xx: non2xx.Load(), Errors: failed.Load(),
		Seconds: el.Seconds(), Rate: float64(acked.Load()) / el.Seconds(),
		P50ms: pct(lat, 0.50), P99ms: pct(lat, 0.99), Maxms: pct(lat, 1)}
	if *rate > 0 {
		res.OfferedRate = float64(len(lat)) / offered.Seconds()
	}
	if e, ok := firstErr.Load().(string); ok {
		res.FirstError = e
	}
	return json.NewEncoder(stdout).Encode(res)
}

func pct(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := min(int(float64(len(sorted))*p), len(sorted)-1)
	return float64(sorted[i].Microseconds()) / 1000
}

type drainResult struct {
	Envelopes    int64   `json:"envelopes"`
	Pending      int64   `json:"pending"`
	Failed       int64   `json:"failed"`
	Seconds      float64 `json:"seconds"`
	Rate         float64 `json:"rate"`
	LatencyP50ms float64 `json:"received_to_done_p50_ms"`
	LatencyP99ms float64 `json:"received_to_done_p99_ms"`
	LatencyMaxms float64 `json:"received_to_done_max_ms"`
	LastReceived string  `json:"last_received_at"`
	LastDone     string  `json:"last_processed_at"`
	DoneAfterMs  float64 `json:"last_done_after_last_received_ms"`
	Postings     int64   `json:"ledger_transactions"`
}

func runDrain(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inboxload drain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbURL := fs.String("database-url", getenv("DATABASE_URL"), "the inbox database")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up waiting after this long")
	since := fs.String("since", "", "only envelopes received at or after this RFC 3339 time (default: all)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, *dbURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	from := time.Time{}
	if *since != "" {
		if from, err = time.Parse(time.RFC3339Nano, *since); err != nil {
			return fmt.Errorf("--since: %w", err)
		}
	}
	deadline := time.Now().Add(*timeout)
	for {
		// EXISTS on the status index: the poll must not cost the database
		// a share of the throughput it measures.
		pending, err := envelope.Exists(ctx, conn, envelope.Selection{Status: envelope.StatusPending, Since: from})
		if err != nil {
			return err
		}
		if !pending || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	t, err := envelope.MeasureThroughput(ctx, conn, from)
	if err != nil {
		return err
	}
	r := drainResult{Envelopes: t.Envelopes, Pending: t.Pending, Failed: t.Failed, Seconds: t.Seconds,
		LatencyP50ms: t.LatencyP50ms, LatencyP99ms: t.LatencyP99ms, LatencyMaxms: t.LatencyMaxms}
	if r.Postings, err = ledger.CountTransactions(ctx, conn); err != nil {
		return err
	}
	lastRecv, lastDone := t.LastReceived, t.LastProcessed
	if r.Seconds > 0 {
		r.Rate = float64(r.Envelopes-r.Pending) / r.Seconds
	}
	if lastRecv != nil && lastDone != nil {
		r.LastReceived, r.LastDone = lastRecv.Format(time.RFC3339Nano), lastDone.Format(time.RFC3339Nano)
		r.DoneAfterMs = float64(lastDone.Sub(*lastRecv).Microseconds()) / 1000
	}
	if err := json.NewEncoder(stdout).Encode(r); err != nil {
		return err
	}
	if r.Pending > 0 {
		return fmt.Errorf("%d envelopes still pending after %s", r.Pending, *timeout)
	}
	return nil
}

func runRSS(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inboxload rss", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pid := fs.Int("pid", 0, "process id")
	if err := fs.Parse(args); err != nil {
		return err
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", *pid))
	if err != nil {
		return err
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && (k == "VmRSS" || k == "VmHWM") {
			out[k] = strings.TrimSpace(v)
		}
	}
	return json.NewEncoder(stdout).Encode(out)
}
