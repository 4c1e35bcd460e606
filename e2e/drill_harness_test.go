package e2e

// Failure drills: each TestDrill* owns a throwaway PostgreSQL cluster
// (pgtest.StartCluster), runs the real ingest and worker binaries as
// processes, injects one kind of fault while deliveries flow, and ends with
// the same invariants, checked in SQL (drill.verify). Each logs one line:
//
//	DRILL name sent=N acknowledged=N stored=N processed=N double_postings=0 lost=0 recovery=D key=value...
//
// Size: INBOX_DRILL_SCALE=full runs thousands of envelopes and several faults
// each; unset (or "small") runs a few hundred, for the normal suite. See
// docs/drills.md.

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/provider"
	"github.com/inboxhq/inbox/internal/webhooktest"
)

// drillFull reports whether INBOX_DRILL_SCALE asks for the full-size drills.
func drillFull(t testing.TB) bool {
	switch s := os.Getenv("INBOX_DRILL_SCALE"); s {
	case "", "small":
		return false
	case "full":
		return true
	default:
		t.Fatalf("INBOX_DRILL_SCALE=%q: want small or full", s)
		return false
	}
}

// scaled picks the small or the full figure.
func scaled(t testing.TB, small, full int) int {
	if drillFull(t) {
		return full
	}
	return small
}

// drillWorkerArgs are the worker's settings in every drill: short River
// timeouts so that rescues happen within the test, a short snooze for
// refunds that arrive before their payment.
var drillWorkerArgs = []string{"run",
	"--job-timeout", "2s", "--rescue-after", "3s",
	"--fetch-cooldown", "5ms", "--fetch-poll-interval", "50ms",
	"--snooze", "200ms", "--max-workers", "8", "--shutdown-timeout", "10s",
}

// drill is one drill's cluster, configuration and monitoring pool.
type drill struct {
	t      *testing.T
	name   string
	pg     *pgtest.Cluster
	env    []string
	pool   *pgxpool.Pool
	client *http.Client
	begun  time.Time
}

// newDrill starts a cluster of the drill's own and migrates it.
func newDrill(t *testing.T, name string) *drill {
	t.Helper()
	begun := time.Now()
	pg := pgtest.StartCluster(t)
	// Admin listeners on ports of their own: drills run several workers
	// and ingests at once. Environment rather than flags, so that a binary
	// without an admin listener ignores them.
	env := append(baseEnv(pg.URL(), writeConfig(t)), "WORKER_ADMIN_ADDR=127.0.0.1:0", "INGEST_ADMIN_ADDR=127.0.0.1:0")
	migrate(t, env)
	cfg, err := pgxpool.ParseConfig(pg.URL())
	require.NoError(t, err)
	cfg.MaxConns = 4
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	cfg.ConnConfig.RuntimeParams["application_name"] = "drill-monitor"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	client := &http.Client{
		// The bound a sender like Shopify gives us: an answer later than
		// this is a hang.
		Timeout:   5 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true},
	}
	t.Cleanup(client.CloseIdleConnections)
	return &drill{t: t, name: name, pg: pg, env: env, pool: pool, client: client, begun: begun}
}

// startIngest starts ingest on addr (host:port; port 0 picks one) and returns
// it with its base URL once it listens.
func (d *drill) startIngest(addr string) (*proc, string) {
	d.t.Helper()
	p, lines := start(d.t, "ingest", d.env, "--addr", addr)
	d.keepLog(p)
	return p, waitListen(d.t, lines, "ingest listening", 60*time.Second)
}

// keepLog writes p's output to $INBOX_DRILL_LOGS/<drill>-<binary>-<pid>.log
// when the test ends, if that variable names a directory: the operator's
// view of a drill (every process's log, not only a failed test's tail).
func (d *drill) keepLog(p *proc) {
	dir := os.Getenv("INBOX_DRILL_LOGS")
	if dir == "" {
		return
	}
	d.t.Cleanup(func() {
		if !p.exited() {
			p.kill9()
		}
		name := filepath.Join(dir, fmt.Sprintf("%s-%s-%d.log", d.name, p.name, p.cmd.Process.Pid))
		if err := os.WriteFile(name, []byte(p.out.String()), 0o644); err != nil {
			d.t.Logf("keep log: %v", err)
		}
	})
}

// startWorker starts `worker run` with drillWorkerArgs (extra flags win) and
// returns once it has started.
func (d *drill) startWorker(extra ...string) *proc {
	d.t.Helper()
	p, lines := start(d.t, "worker", d.env, append(append([]string{}, drillWorkerArgs...), extra...)...)
	d.keepLog(p)
	waitLog(d.t, lines, "worker started", 60*time.Second)
	return p
}

// kill9 kills p with SIGKILL and waits for it to be gone.
func (p *proc) kill9() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// signal sends sig to p.
func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %s to %s: %v", sig, p.name, err)
	}
}

// exited reports whether p has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// scalar runs a one-value query with a short bound.
func (d *drill) scalar(q string, args ...any) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var n int64
	err := d.pool.QueryRow(ctx, q, args...).Scan(&n)
	return n, err
}

// processed counts envelopes that left pending.
func (d *drill) processed() (int64, error) {
	return d.scalar(`SELECT count(*) FROM envelope WHERE status <> 'pending'`)
}

// waitProcessed waits until more than after envelopes are processed (polling
// every 10 ms; errors, as during an outage, count as not yet) and returns
// when that was seen.
func (d *drill) waitProcessed(after int64, timeout time.Duration) (time.Time, int64) {
	d.t.Helper()
	var seen time.Time
	var n int64
	pgtest.Eventually(d.t, timeout, fmt.Sprintf("the processed count to pass %d", after), func() (bool, string) {
		var err error
		n, err = d.processed()
		if err == nil && n > after {
			seen = time.Now()
			return true, ""
		}
		return false, fmt.Sprintf("last %d, %v", n, err)
	})
	return seen, n
}

// freeAddr returns 127.0.0.1:PORT with a port nothing listens on, below the
// ephemeral range so that no client connection takes it while the process
// that serves it is down.
func freeAddr(t testing.TB) string {
	t.Helper()
	for range 200 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(20000+rand.IntN(12000)))
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			ln.Close()
			return addr
		}
	}
	t.Fatal("no free port")
	return ""
}

// drillItem is one delivery of a drill's load and what it should do to the
// ledger.
type drillItem struct {
	source string
	d      webhooktest.Delivery
	// ignored: no handler, the envelope ends ignored.
	ignored bool
	// key is the ledger's business key the event posts under ("" for no
	// posting); merchant, currency and delta (+payment, -refund) are its
	// effect on the merchant's psp_clearing account. A business duplicate
	// (same key under another delivery id) has the key and a zero delta.
	key, merchant, currency string
	delta                   int64
}

func (it drillItem) id() string { return it.source + "/" + it.d.DeliveryID }

// drillDeliveries returns n deliveries of every provider: Standard Webhooks
// payments and refunds (of a payment a few deliveries earlier, so some arrive
// first and snooze), Stripe payments, Shopify orders, GitHub pushes, a
// payment resent under a new delivery id (one business key, two envelopes:
// posts once) and an event with no handler (ignored).
func drillDeliveries(run string, n int) []drillItem {
	sec := func(k string) string { return e2eSecrets[k] }
	currencies := []string{"USD", "EUR", "JPY"}
	out := make([]drillItem, 0, n)
	for i := range n {
		base := i - i%10 // this group's first delivery: a payment
		merchant := fmt.Sprintf("m_%s_%d", run, base%3)
		currency := currencies[(base/10)%3]
		pay := fmt.Sprintf("pay_%s_%d", run, base)
		payAmount := int64(1000 + base)
		switch i % 10 {
		case 0, 1, 2, 8:
			p := fmt.Sprintf("pay_%s_%d", run, i)
			amount := int64(1000 + i)
			out = append(out, drillItem{source: "payments", d: webhooktest.Delivery{Provider: provider.Standard, Secret: sec("E2E_STANDARD_SECRET"),
				DeliveryID: "msg_" + p, Body: webhooktest.StandardPayment(p, merchant, amount, currency)},
				key: "standard:" + merchant + ":payment:" + p, merchant: merchant, currency: currency, delta: amount})
		case 3:
			r := fmt.Sprintf("re_%s_%d", run, i)
			out = append(out, drillItem{source: "payments", d: webhooktest.Delivery{Provider: provider.Standard, Secret: sec("E2E_STANDARD_SECRET"),
				DeliveryID: "msg_" + r, Body: webhooktest.StandardRefund(r, pay, merchant, 100, currency)},
				key: "standard:" + merchant + ":refund:" + r, merchant: merchant, currency: currency, delta: -100})
		case 4:
			evt, pi := fmt.Sprintf("evt_%s_%d", run, i), fmt.Sprintf("pi_%s_%d", run, i)
			amount := int64(2000 + i)
			out = append(out, drillItem{source: "stripe", d: webhooktest.Delivery{Provider: provider.Stripe, Secret: sec("E2E_STRIPE_SECRET"),
				DeliveryID: evt, Body: webhooktest.StripePayment(evt, pi, amount, "usd")},
				key: "stripe:payment:" + pi, merchant: "stripe", currency: "USD", delta: amount})
		case 5:
			out = append(out, drillItem{source: "github", d: webhooktest.Delivery{Provider: provider.GitHub, Secret: sec("E2E_GITHUB_SECRET"),
				DeliveryID: fmt.Sprintf("gh-%s-%d", run, i), EventType: "push", Body: webhooktest.GitHubPushOf(fmt.Sprintf("refs/heads/b%d", i), fmt.Sprintf("gh-%s-%d", run, i))}})
		case 6:
			// The group's payment again, under a new delivery id.
			out = append(out, drillItem{source: "payments", d: webhooktest.Delivery{Provider: provider.Standard, Secret: sec("E2E_STANDARD_SECRET"),
				DeliveryID: fmt.Sprintf("msg_again_%s_%d", run, i), Body: webhooktest.StandardPayment(pay, merchant, payAmount, currency)},
				key: "standard:" + merchant + ":payment:" + pay, merchant: merchant, currency: currency})
		case 7:
			shop := run + ".myshopify.com"
			order := runBase(run) + int64(i) // Shopify order ids are global: unique per run
			out = append(out, drillItem{source: "shopify", d: webhooktest.Delivery{Provider: provider.Shopify, Secret: sec("E2E_SHOPIFY_SECRET"),
				DeliveryID: fmt.Sprintf("%s-order-%d", run, i), EventType: "orders/paid",
				Header: http.Header{"X-Shopify-Shop-Domain": {shop}}, Body: webhooktest.ShopifyOrderPaid(order, "12.34", "USD")},
				key: fmt.Sprintf("shopify:order:%d", order), merchant: shop, currency: "USD", delta: 1234})
		case 9:
			evt := fmt.Sprintf("evt_%s_cus_%d", run, i)
			out = append(out, drillItem{source: "stripe", d: webhooktest.Delivery{Provider: provider.Stripe, Secret: sec("E2E_STRIPE_SECRET"),
				DeliveryID: evt, Body: webhooktest.StripeEvent(evt, "customer.created", `{"id":"cus_1","object":"customer"}`)}, ignored: true})
		}
	}
	return out
}

// load sends deliveries to ingest the way a provider does: each delivery is
// retried, with the same delivery id and body, until it gets a 2xx.
type load struct {
	d     *drill
	items []drillItem
	// target returns the base URL for a delivery's copy and attempt.
	target func(copy, attempt int) string
	// rate paces new deliveries (per second); 0 sends as fast as senders go.
	rate float64
	// senders is how many requests are in flight at most.
	senders int
	// copies sends each delivery this many times at once (duplicates that
	// race each other); default 1.
	copies int
	// retryWait is the pause before resending; a 503's Retry-After is not
	// honoured (a drill has no minutes to spare), the pause is doubled.
	retryWait time.Duration

	acked    atomic.Int64 // deliveries with a 2xx
	requests atomic.Int64

	mu                sync.Mutex
	ackedAt           []time.Time // when each delivery first got a 2xx
	accepted          []int       // 202s per delivery
	unanswered        []bool      // some attempt got no 2xx
	ackTimes          []time.Time // every 2xx, in order
	acceptTimes       []time.Time // every 202, in order
	codes             map[int]int
	transportErrs     int
	timeouts          int
	missingRetryAfter int
	maxLatency        time.Duration
	unexpected        []string
	// retired marks deliveries whose envelopes retention dropped (their
	// partition went): verify finds their ledger postings by delivery id
	// instead of through the envelope.
	retired []bool
}

func newLoad(d *drill, items []drillItem, target func(copy, attempt int) string) *load {
	return &load{d: d, items: items, target: target, senders: 8, copies: 1, retryWait: 25 * time.Millisecond,
		ackedAt: make([]time.Time, len(items)), accepted: make([]int, len(items)), unanswered: make([]bool, len(items)),
		codes: map[int]int{}, retired: make([]bool, len(items))}
}

// run sends every delivery and returns when all got a 2xx, or ctx ends.
func (l *load) run(ctx context.Context) { l.runRange(ctx, 0, len(l.items)) }

// start runs l in the background, bounded by timeout; the channel closes
// when it returns.
func (l *load) start(timeout time.Duration) <-chan struct{} {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer cancel()
		l.run(ctx)
	}()
	l.d.t.Cleanup(func() { cancel(); <-done })
	return done
}

// wait waits for a load started with start.
func (l *load) wait(done <-chan struct{}) {
	l.d.t.Helper()
	<-done
	if n := l.acked.Load(); n != int64(len(l.items)) {
		l.d.t.Fatalf("load ended with %d of %d deliveries acknowledged", n, len(l.items))
	}
}

// runRange sends items[from:to].
func (l *load) runRange(ctx context.Context, from, to int) {
	type job struct{ i, copy int }
	jobs := make(chan job)
	var wg sync.WaitGroup
	for range l.senders {
		wg.Go(func() {
			for j := range jobs {
				l.deliver(ctx, j.i, j.copy)
			}
		})
	}
	var tick <-chan time.Time
	if l.rate > 0 {
		tk := time.NewTicker(time.Duration(float64(time.Second) / l.rate))
		defer tk.Stop()
		tick = tk.C
	}
feed:
	for i := from; i < to; i++ {
		if tick != nil {
			select {
			case <-tick:
			case <-ctx.Done():
				break feed
			}
		}
		for c := range l.copies {
			select {
			case jobs <- job{i, c}:
			case <-ctx.Done():
				break feed
			}
		}
	}
	close(jobs)
	wg.Wait()
}

func (l *load) deliver(ctx context.Context, i, copy int) {
	it := l.items[i]
	for attempt := 0; ctx.Err() == nil; attempt++ {
		code, retryAfter, err := l.send(ctx, it, l.target(copy, attempt))
		now := time.Now()
		l.mu.Lock()
		switch {
		case err != nil:
			if ctx.Err() != nil {
				l.mu.Unlock()
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				l.timeouts++
			} else {
				l.transportErrs++
			}
		default:
			l.codes[code]++
		}
		if err == nil && (code == http.StatusOK || code == http.StatusAccepted) {
			if code == http.StatusAccepted {
				l.accepted[i]++
				l.acceptTimes = append(l.acceptTimes, now)
			}
			l.ackTimes = append(l.ackTimes, now)
			first := l.ackedAt[i].IsZero()
			if first {
				l.ackedAt[i] = now
			}
			l.mu.Unlock()
			if first {
				l.acked.Add(1)
			}
			return
		}
		l.unanswered[i] = true
		if err == nil && code == http.StatusServiceUnavailable && retryAfter == "" {
			l.missingRetryAfter++
		}
		if err == nil && code != http.StatusServiceUnavailable && code != http.StatusInternalServerError {
			// A 4xx means the drill sent something wrong, or ingest
			// classified an outage as the sender's fault: never retried.
			l.unexpected = append(l.unexpected, fmt.Sprintf("%s: %d", it.id(), code))
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		wait := l.retryWait
		if code == http.StatusServiceUnavailable {
			wait *= 2
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return
		}
	}
}

func (l *load) send(ctx context.Context, it drillItem, base string) (int, string, error) {
	l.requests.Add(1)
	req, err := it.d.Request(ctx, base+"/webhooks/"+it.source)
	if err != nil {
		return 0, "", err
	}
	began := time.Now()
	resp, err := l.d.client.Do(req)
	elapsed := time.Since(began)
	l.mu.Lock()
	l.maxLatency = max(l.maxLatency, elapsed)
	l.mu.Unlock()
	if err != nil {
		return 0, "", err
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After"), nil
}

// firstAckAfter returns how long after t the first 2xx came, or -1 if none.
func (l *load) firstAckAfter(t time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return firstAfter(l.ackTimes, t)
}

// firstAcceptAfter returns how long after t the first 202 came, or -1.
func (l *load) firstAcceptAfter(t time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return firstAfter(l.acceptTimes, t)
}

func firstAfter(times []time.Time, t time.Time) time.Duration {
	for _, at := range times {
		if at.After(t) {
			return at.Sub(t)
		}
	}
	return -1
}

// waitAcked waits until at least n deliveries are acknowledged.
func (l *load) waitAcked(n int64, timeout time.Duration) {
	l.d.t.Helper()
	pgtest.EventuallyEvery(l.d.t, timeout, 5*time.Millisecond, fmt.Sprintf("%d deliveries acknowledged", n), func() (bool, string) {
		acked := l.acked.Load()
		return acked >= n, fmt.Sprintf("%d of %d deliveries acknowledged, want %d", acked, len(l.items), n)
	})
}

// figures are what a drill reports.
type figures struct {
	sent, acknowledged, stored, processed, doublePostings, lost int
	recovery                                                    time.Duration
	extra                                                       map[string]string
}

func (f *figures) set(k string, v any) {
	if f.extra == nil {
		f.extra = map[string]string{}
	}
	switch v := v.(type) {
	case time.Duration:
		f.extra[k] = v.Round(time.Millisecond).String()
	default:
		f.extra[k] = fmt.Sprint(v)
	}
}

// keyed runs q, whose rows are (text, bigint), and returns them as a map.
func (d *drill) keyed(ctx context.Context, q string) map[string]int64 {
	d.t.Helper()
	rows, err := d.pool.Query(ctx, q)
	require.NoError(d.t, err)
	out := map[string]int64{}
	var k string
	var v int64
	_, err = pgx.ForEachRow(rows, []any{&k, &v}, func() error {
		out[k] = v
		return nil
	})
	require.NoError(d.t, err)
	return out
}

// report logs the drill's one parseable line.
func (d *drill) report(f figures) {
	d.t.Helper()
	f.set("elapsed", time.Since(d.begun))
	f.set("race", raceEnabled)
	f.set("scale", map[bool]string{false: "small", true: "full"}[drillFull(d.t)])
	keys := make([]string, 0, len(f.extra))
	for k := range f.extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%s", k, f.extra[k])
	}
	d.t.Logf("DRILL %s sent=%d acknowledged=%d stored=%d processed=%d double_postings=%d lost=%d recovery=%s%s",
		d.name, f.sent, f.acknowledged, f.stored, f.processed, f.doublePostings, f.lost, f.recovery.Round(time.Millisecond), b.String())
}

// waitDrained waits until no envelope is pending and no River job of any
// kind is live; it returns how long that took and the database's clock when
// it was seen.
func (d *drill) waitDrained(timeout time.Duration) (time.Duration, time.Time) {
	d.t.Helper()
	began := time.Now()
	var at time.Time
	eventually(d.t, timeout, "drained: every envelope final, no live River job", func(ctx context.Context) (bool, string) {
		var pending, live int64
		err := d.pool.QueryRow(ctx, `SELECT clock_timestamp(), (SELECT count(*) FROM envelope WHERE status = 'pending'),
			(SELECT count(*) FROM river_job WHERE state = ANY($1::river_job_state[]))`, envelope.LiveJobStates()).Scan(&at, &pending, &live)
		if err != nil {
			return false, err.Error()
		}
		return pending == 0 && live == 0, fmt.Sprintf("%d envelopes pending, %d live jobs", pending, live)
	})
	return time.Since(began), at
}

// verify checks the load's outcome, waits for the drain, then checks the
// invariants in SQL, failing the test on any breach; it returns the figures.
//
//   - every delivery got a 2xx (the sender retried until then), and none got
//     two 202s;
//   - every acknowledged delivery has an envelope (lost = those without), and
//     envelopes = distinct delivery ids sent;
//   - every envelope is final: done, or ignored for the event with no handler
//     (failed counts as a breach: every delivery is valid);
//   - each envelope was finished by exactly one attempt;
//   - every business key of a done payment envelope has exactly one ledger
//     transaction, no envelope has more than one (double postings), and every
//     transaction balances per currency;
//   - each merchant's psp_clearing balance is what the deliveries add up to
//     (a double posting under any key would show here);
//   - no River job is running, available, retryable, scheduled or pending,
//     and none was discarded or cancelled.
func (d *drill) verify(l *load, drainTimeout time.Duration) figures {
	d.t.Helper()
	t := d.t
	f := figures{sent: len(l.items), acknowledged: int(l.acked.Load())}
	l.mu.Lock()
	f.set("requests", l.requests.Load())
	f.set("max_latency", l.maxLatency)
	for _, c := range []int{200, 202, 500, 503} {
		if l.codes[c] > 0 {
			f.set(fmt.Sprintf("http_%d", c), l.codes[c])
		}
	}
	f.set("no_answer", l.transportErrs+l.timeouts)
	// Committed but not acknowledged: an attempt got no 2xx, yet the
	// delivery never got a 202 (a later attempt found it stored).
	committedUnacked, twice := 0, 0
	for i := range l.items {
		if l.unanswered[i] && l.accepted[i] == 0 && !l.ackedAt[i].IsZero() {
			committedUnacked++
		}
		if l.accepted[i] > 1 {
			twice++
		}
	}
	f.set("committed_unacked", committedUnacked)
	unexpected := append([]string(nil), l.unexpected...)
	errors500 := l.codes[http.StatusInternalServerError]
	l.mu.Unlock()
	require.Zero(t, errors500, "ingest answered 500 (an outage must be a 503, anything else is a bug)")
	require.Empty(t, unexpected, "deliveries answered with an unexpected status")
	require.Zero(t, twice, "deliveries answered 202 twice (stored twice)")

	if pending, err := d.scalar(`SELECT count(*) FROM envelope WHERE status = 'pending'`); err == nil {
		f.set("pending_at_load_end", pending)
	}
	drain, drainedAt := d.waitDrained(drainTimeout)
	f.set("drain_wait", drain)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type envRow struct {
		status            string
		key               string
		own, finalRecords int64
	}
	rows, err := d.pool.Query(ctx, `
		SELECT e.source || '/' || e.delivery_id, e.status, coalesce(e.result->>'idempotency_key', ''),
		       (SELECT count(*) FROM ledger_transaction t WHERE t.envelope_id = e.id),
		       (SELECT count(*) FROM envelope_attempt a WHERE a.envelope_id = e.id AND a.outcome IN ('done', 'ignored', 'failed'))
		  FROM envelope e`)
	require.NoError(t, err)
	envs := map[string]envRow{}
	for rows.Next() {
		var id string
		var r envRow
		require.NoError(t, rows.Scan(&id, &r.status, &r.key, &r.own, &r.finalRecords))
		envs[id] = r
	}
	require.NoError(t, rows.Err())
	f.stored = len(envs)

	var problems []string
	problem := func(format string, args ...any) {
		if len(problems) < 20 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	sentIDs := map[string]bool{}
	keyOwners := map[string]int64{} // business key -> transactions its envelopes own
	statuses := map[string]int{}
	for _, it := range l.items {
		sentIDs[it.id()] = true
	}
	for id, r := range envs {
		statuses[r.status]++
		if r.status != "pending" {
			f.processed++
		}
		if !sentIDs[id] {
			problem("envelope %s was never sent", id)
		}
		if r.finalRecords != 1 {
			problem("envelope %s finished by %d attempts, want 1", id, r.finalRecords)
		}
		if r.own > 1 {
			f.doublePostings++
			problem("envelope %s has %d ledger transactions", id, r.own)
		}
	}
	// source/delivery id -> ledger transactions
	postedBy := d.keyed(ctx, `SELECT source || '/' || delivery_id, count(*) FROM ledger_transaction GROUP BY 1`)
	retired := 0
	for i, it := range l.items {
		if l.retired[i] {
			retired++
			if _, ok := envs[it.id()]; ok {
				problem("envelope %s is still there after its partition was dropped", it.id())
			}
			if it.key == "" {
				if postedBy[it.id()] != 0 {
					problem("retired delivery %s (no ledger effect) has %d ledger transactions", it.id(), postedBy[it.id()])
				}
				continue
			}
			if _, seen := keyOwners[it.key]; !seen {
				keyOwners[it.key] = 0
			}
			keyOwners[it.key] += postedBy[it.id()]
			continue
		}
		r, ok := envs[it.id()]
		if !ok {
			if !l.ackedAt[i].IsZero() {
				f.lost++
			}
			problem("delivery %s has no envelope", it.id())
			continue
		}
		want := "done"
		if it.ignored {
			want = "ignored"
		}
		if r.status != want {
			problem("envelope %s is %s, want %s", it.id(), r.status, want)
		}
		if it.key == "" {
			if r.own != 0 {
				problem("envelope %s (no ledger effect) has %d ledger transactions", it.id(), r.own)
			}
			continue
		}
		if r.status == "done" && r.key != it.key {
			problem("envelope %s result names key %q, want %q", it.id(), r.key, it.key)
		}
		if _, seen := keyOwners[it.key]; !seen {
			keyOwners[it.key] = 0
		}
		keyOwners[it.key] += r.own
	}
	if retired > 0 {
		f.set("retired", retired)
	}
	byKey := d.keyed(ctx, `SELECT idempotency_key, count(*) FROM ledger_transaction GROUP BY 1`)
	for k, owned := range keyOwners {
		switch {
		case byKey[k] > 1 || owned > 1:
			f.doublePostings++
			problem("business key %s posted %d times (%d by its envelopes)", k, byKey[k], owned)
		case byKey[k] == 0 || owned == 0:
			problem("business key %s has no ledger transaction", k)
		}
	}
	for k := range byKey {
		if _, ok := keyOwners[k]; !ok {
			problem("ledger transaction for unknown key %s", k)
		}
	}
	unbalanced, err := d.scalar(`SELECT count(*) FROM (SELECT transaction_id, currency FROM ledger_entry
		GROUP BY 1, 2 HAVING sum(amount_minor) <> 0 OR count(*) < 2) x`)
	require.NoError(t, err)
	if unbalanced > 0 {
		problem("%d ledger transactions do not balance", unbalanced)
	}
	// Balances against what was sent.
	want := map[string]int64{}
	for _, it := range l.items {
		if it.delta != 0 {
			want[it.merchant+" "+it.currency] += it.delta
		}
	}
	got := d.keyed(ctx, `SELECT merchant || ' ' || currency, balance_minor FROM ledger_balance WHERE account = 'psp_clearing'`)
	for k, v := range want {
		if got[k] != v {
			problem("psp_clearing %s is %d, want %d", k, got[k], v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			problem("unexpected psp_clearing balance %s", k)
		}
	}
	// River: nothing given up on. A periodic job (retention,
	// reconciliation) may be running, waiting or scheduled when this runs;
	// a processing job left in any state is the check below.
	{
		rows, err := d.pool.Query(ctx, `SELECT state::text || ' ' || kind, count(*) FROM river_job
			WHERE created_at <= $1 AND state IN ('cancelled', 'discarded', 'retryable') GROUP BY 1`, drainedAt)
		require.NoError(t, err)
		for rows.Next() {
			var s string
			var n int64
			require.NoError(t, rows.Scan(&s, &n))
			problem("%d River jobs %s", n, s)
		}
		require.NoError(t, rows.Err())
	}
	// The worker deletes a job in the transaction that finishes its
	// envelope done or ignored (riverjob.DeleteRunning): none is left, and
	// every envelope's final attempt names the job it ran as.
	processJobs, err := d.scalar(`SELECT count(*) FROM river_job WHERE kind = 'process_envelope' AND created_at <= $1`, drainedAt)
	require.NoError(t, err)
	if processJobs != 0 {
		problem("%d process_envelope jobs left after the drain", processJobs)
	}
	unfinished, err := d.scalar(`SELECT count(*) FROM envelope e WHERE NOT EXISTS (SELECT 1 FROM envelope_attempt a
		WHERE a.envelope_id = e.id AND a.outcome IN ('done', 'ignored', 'failed') AND a.job_id IS NOT NULL)`)
	require.NoError(t, err)
	if unfinished != 0 {
		problem("%d envelopes without a final attempt of a job", unfinished)
	}
	// From the attempts, as the job rows are gone: retried, an envelope
	// whose final attempt is not its job's first; unrecorded, one whose job
	// ran an attempt that left no row (rolled back: a worker killed or
	// frozen in it and rescued by River, a lost connection, a restart).
	var rescued, retried int64
	require.NoError(t, d.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE gap), count(*) FILTER (WHERE last > 1) FROM (
		SELECT envelope_id, max(attempt) AS last, max(attempt) > count(DISTINCT attempt) AS gap
		  FROM envelope_attempt GROUP BY envelope_id) x`).Scan(&rescued, &retried))
	f.set("attempts_unrecorded", rescued)
	f.set("jobs_retried", retried)
	attempts, err := d.scalar(`SELECT count(*) FROM envelope_attempt`)
	require.NoError(t, err)
	f.set("attempt_rows", attempts)
	f.set("failed", statuses["failed"])
	f.set("ignored", statuses["ignored"])
	f.set("ledger_transactions", len(byKey))

	if f.acknowledged != f.sent {
		problem("%d of %d deliveries acknowledged", f.acknowledged, f.sent)
	}
	if f.stored+retired != len(sentIDs) {
		problem("%d envelopes (and %d retired with their partitions) for %d distinct delivery ids", f.stored, retired, len(sentIDs))
	}
	if len(problems) > 0 {
		d.report(f)
		t.Fatalf("drill %s broke invariants:\n  %s", d.name, strings.Join(problems, "\n  "))
	}
	return f
}

// runBase is a per-run offset for ids that must be globally unique (Shopify
// order ids), so drill runs sharing a database never collide.
func runBase(run string) int64 {
	h := fnv.New32a()
	h.Write([]byte(run))
	return int64(h.Sum32()) * 1_000_000
}
