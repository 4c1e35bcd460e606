// Command inboxload drives load at a running inbox and measures it, for
// scripts/bench-pipeline (docs/benchmarks.md). It sends only to the URL it
// is given (a local ingest) and stops by itself.
//
//	inboxload send --url URL --secret-env VAR [--concurrency N | --rate R] [--count N | --duration D] [--merchants M]
//	        [--timeout D] [--deadline D] [--resend-refused [--resend-concurrency N]] [--verify-database-url URL]
//	        [--timeline D] [--warm-conns N] [--warmup D [--warmup-rate R]]
//	    send distinct, freshly signed Standard Webhooks payment deliveries to
//	    POST URL/webhooks/<--source>: closed loop with --concurrency senders,
//	    or open loop at --rate deliveries/s (each sent when due on its own
//	    goroutine and timed from when it was due, so neither a slow answer
//	    nor a stall thins the load or hides). Prints one JSON line: sent,
//	    acknowledged, non-2xx, unanswered (errors), the count of each status,
//	    latency p50/p99/max of every request (unanswered ones at the time
//	    they were given up), of the 2xx and of the 503s (their p99 also from
//	    when they were written: the server's share, and the answer's way
//	    back), and how many were answered later than --deadline. --resend-refused resends each
//	    delivery that got no 2xx once afterwards (16 at a time by
//	    default); --verify-database-url
//	    checks that every acknowledged delivery is stored, which refused ones
//	    are (their resend must answer 200 duplicate), and, after resends,
//	    that every delivery is stored exactly once. It also says how late
//	    the requests were written (the sender's own lag) and how many opened
//	    a connection; --timeline gives the figures per window of due time;
//	    --warm-conns opens N connections before the clock starts; --warmup
//	    sends at --warmup-rate for D first, from the same process, and
//	    counts none of it but its answers by status (a step from a running
//	    load).
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
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

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
	Sent         int64 `json:"sent"`
	Acknowledged int64 `json:"acknowledged"`
	Non2xx       int64 `json:"non_2xx"`
	// Errors are requests left unanswered: no HTTP answer within --timeout
	// (or a transport error). They count in the latency figures at the
	// time they were given up.
	Errors      int64          `json:"errors"`
	Codes       map[string]int `json:"codes"`
	Seconds     float64        `json:"seconds"`
	Rate        float64        `json:"rate"`
	OfferedRate float64        `json:"offered_rate,omitempty"`
	// Latencies of every request, answered or not: from when it was due
	// (open loop) or sent (closed loop).
	P50ms float64 `json:"p50_ms"`
	P99ms float64 `json:"p99_ms"`
	Maxms float64 `json:"max_ms"`
	// The same of the 2xx answers and of the 503s alone.
	AckP99ms     float64 `json:"ack_p99_ms"`
	RefusedP99ms float64 `json:"refused_p99_ms,omitempty"`
	RefusedMaxms float64 `json:"refused_max_ms,omitempty"`
	// RefusedServedP99ms is the 503s' p99 from when their headers were
	// written (into the connection's buffer), not from when they were due:
	// the server's share of a refusal's latency and the answer's way back,
	// this tool's time to read it included, without its lag in writing.
	RefusedServedP99ms float64 `json:"refused_served_p99_ms,omitempty"`
	// WrittenP99ms: how late the requests were written, from when each was
	// due until its headers were (this tool's own lag, the dial included);
	// Dialed: the requests that opened a connection (the rest reused an
	// idle one). As in each --timeline window.
	WrittenP99ms float64 `json:"written_p99_ms"`
	Dialed       int64   `json:"dialed"`
	// Late counts requests answered (or given up) later than --deadline
	// after they were due.
	Late       *int64 `json:"late,omitempty"`
	FirstError string `json:"first_error,omitempty"`
	// Unanswered counts the requests left unanswered by what happened to
	// them: timeout (no answer within --timeout), reset, refused (the
	// connection), closed (the server closed it before answering), other.
	Unanswered map[string]int `json:"unanswered,omitempty"`
	// With --resend-refused: the answers to resending each delivery that
	// got no 2xx, once, after the load.
	Resent *resendResult `json:"resent,omitempty"`
	// With --verify-database-url: acknowledged deliveries missing from
	// the database (must be 0), and refused ones found stored (their
	// COMMIT succeeded after the answer; the resend must say duplicate).
	AckedMissing    *int64 `json:"acked_missing,omitempty"`
	RefusedInTheDB  *int64 `json:"refused_but_stored,omitempty"`
	StoredTwiceOrNo *int64 `json:"stored_not_once,omitempty"`
	// With --timeline: the same figures per window of due time, so a
	// transient (the first seconds of an overload, a checkpoint) shows
	// apart from the steady part of the run.
	Timeline []window `json:"timeline,omitempty"`
	// Warmup is what --warmup sent (none of it in the figures above).
	Warmup *warmupResult `json:"warmup,omitempty"`
}

// warmupResult counts the --warmup deliveries and their answers by status
// ("unanswered" for none).
type warmupResult struct {
	Sent  int64          `json:"sent"`
	Codes map[string]int `json:"codes"`
}

// window is one --timeline window: the requests due in [At, At+--timeline).
type window struct {
	At         float64 `json:"at_s"`
	Sent       int     `json:"sent"`
	Acked      int     `json:"acknowledged"`
	Refused    int     `json:"refused"`
	Other      int     `json:"other_non_2xx"` // answered, neither 2xx nor 503
	Unanswered int     `json:"unanswered"`
	AckP50ms   float64 `json:"ack_p50_ms"`
	AckP99ms   float64 `json:"ack_p99_ms"`
	// WrittenP99ms is how late this tool wrote the requests (from when
	// each was due until its headers were written): the share of the
	// latency that is the sender's own (its dial included), not the
	// server's answer. Dialed counts the requests that opened a
	// new connection rather than reuse an idle one.
	WrittenP99ms float64 `json:"written_p99_ms"`
	Dialed       int     `json:"dialed"`
	// RefusedP99ms and RefusedServedP99ms are the window's 503s' p99, from
	// when each was due and from when its headers were written (as the
	// run's refused_p99_ms and refused_served_p99_ms): which seconds'
	// refusals were slow, and whether the server or this tool's lag made
	// them so.
	RefusedP99ms       float64 `json:"refused_p99_ms,omitempty"`
	RefusedServedP99ms float64 `json:"refused_served_p99_ms,omitempty"`
}

type resendResult struct {
	Codes map[string]int `json:"codes"`
	// Duplicates are resends answered 200 "duplicate".
	Duplicates int64 `json:"duplicates"`
	// StoredWrong are resends of deliveries found stored that were not
	// answered duplicate, or of ones not stored that were answered
	// duplicate (with --verify-database-url; must be 0).
	StoredWrong *int64 `json:"stored_answered_wrong,omitempty"`
}

// answer is one request's outcome.
type answer struct {
	code   int    // 0: unanswered
	why    string // unanswered: errorKind
	status string
	due    time.Duration // after the load's start
	late   time.Duration
	// written is when the request's headers were written, after it was
	// due (0: they never were); dialed: it opened a new connection.
	written time.Duration
	dialed  bool
}

func runSend(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inboxload send", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "http://127.0.0.1:8080", "ingest's base URL (a local address)")
	source := fs.String("source", "payments", "source name (a Standard Webhooks source)")
	secretEnv := fs.String("secret-env", "PAYMENTS_WEBHOOK_SECRET", "environment variable holding the source's secret")
	concurrency := fs.Int("concurrency", 32, "closed loop: concurrent senders (ignored with --rate)")
	rate := fs.Float64("rate", 0, "open loop: deliveries offered per second, each sent when due and timed from then")
	count := fs.Int64("count", 0, "stop after this many deliveries (0: --duration)")
	duration := fs.Duration("duration", 10*time.Second, "stop after this long (with --count 0)")
	merchants := fs.Int("merchants", 100, "merchants the payments are spread over")
	prefix := fs.String("prefix", fmt.Sprintf("load-%d", time.Now().UnixNano()), "delivery id prefix (distinct per run)")
	timeout := fs.Duration("timeout", 30*time.Second, "give up on a request after this long: it counts as unanswered")
	deadline := fs.Duration("deadline", 0, "count the requests answered later than this after they were due (late)")
	resend := fs.Bool("resend-refused", false, "after the load, resend once each delivery that got no 2xx, and report the answers")
	resendConcurrency := fs.Int("resend-concurrency", 16, "with --resend-refused: resends in flight at once")
	verifyURL := fs.String("verify-database-url", "", "after the load, check in this database that every acknowledged delivery is stored, and which refused ones are")
	warmConns := fs.Int("warm-conns", 0, "open this many connections (concurrent GETs of /readyz) before the load starts, for it to reuse: a sender whose connections are open, not one opening them as the load starts")
	timeline := fs.Duration("timeline", 0, "also report the figures per window of this length, by when each request was due (0: off)")
	warmup := fs.Duration("warmup", 0, "open loop: before the load, send at --warmup-rate for this long from the same process, not counted (a step from a running load, as a peak reaches a service; this tool's own start does not land in the load's first second)")
	warmupRate := fs.Float64("warmup-rate", 0, "with --warmup: deliveries per second (0: half of --rate)")
	bodyBytes := fs.Int("body-bytes", 0, "pad each payment body to about this many bytes (a metadata object: half digests that do not compress, half text that does, as providers' events); 0: the bare payment, ~150 bytes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *warmup > 0 && *rate <= 0 {
		return errors.New("--warmup needs --rate (an open loop)")
	}
	secret := getenv(*secretEnv)
	if secret == "" {
		return fmt.Errorf("%s is not set", *secretEnv)
	}
	base := strings.TrimRight(*url, "/")
	endpoint := base + "/webhooks/" + *source
	client := &http.Client{Timeout: *timeout, Transport: &http.Transport{MaxIdleConnsPerHost: 1024, MaxConnsPerHost: 0}}
	id := func(n int64) string { return fmt.Sprintf("%s-%d", *prefix, n) }
	// The warm-up's ids: another prefix, which the checks of the load's
	// deliveries (prefix-N) do not match.
	warmID := func(n int64) string { return fmt.Sprintf("%sw-%d", *prefix, n) }
	// post sends delivery n, id did, due at due; the answer says when its
	// request was written (after due) and whether it dialed, answered or
	// not.
	post := func(n int64, did string, due time.Time) (answer, error) {
		m := fmt.Sprintf("m_%03d", n%int64(*merchants))
		d := webhooktest.Delivery{Provider: provider.Standard, Secret: secret, DeliveryID: did,
			Body: padBody(webhooktest.StandardPayment("pay_"+did, m, 1000+n%1000, "EUR"), *bodyBytes, did)}
		// The transport calls these on its own goroutines: atomics, read
		// once the answer is in. The headers, not the whole request: a
		// server may answer before it has read the body (ingest's
		// refusals do), and the write then ends after the answer; the
		// headers are written before any answer can come.
		var written atomic.Int64
		var dialed atomic.Bool
		trace := &httptrace.ClientTrace{
			GotConn:      func(c httptrace.GotConnInfo) { dialed.Store(!c.Reused) },
			WroteHeaders: func() { written.Store(int64(time.Since(due))) },
		}
		traced := func(a answer) answer {
			a.written, a.dialed = time.Duration(written.Load()), dialed.Load()
			return a
		}
		req, err := d.Request(httptrace.WithClientTrace(ctx, trace), endpoint)
		if err != nil {
			return answer{}, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return traced(answer{}), err
		}
		defer resp.Body.Close()
		var body struct{ Status string }
		b, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(b, &body)
		return traced(answer{code: resp.StatusCode, status: body.Status}), nil
	}

	if *warmConns > 0 {
		// Open the connections before the clock starts: concurrent GETs
		// of /readyz, each on a connection of its own, left idle in the
		// client's pool for the load to reuse.
		var wg sync.WaitGroup
		for range *warmConns {
			wg.Go(func() {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
				if err != nil {
					return
				}
				if resp, err := client.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var warmed *warmupResult
	start := time.Now()
	if *warmup > 0 {
		// The warm-up, open loop like the load; the load's first delivery
		// is due when the warm-up's time is up, whatever of it is still
		// unanswered.
		wr := *warmupRate
		if wr <= 0 {
			wr = *rate / 2
		}
		warmed = &warmupResult{Codes: map[string]int{}}
		interval := time.Duration(float64(time.Second) / wr)
		for n := int64(1); ctx.Err() == nil; n++ {
			due := start.Add(time.Duration(n-1) * interval)
			if due.Sub(start) >= *warmup {
				break
			}
			time.Sleep(time.Until(due))
			wg.Go(func() {
				a, err := post(n, warmID(n), due)
				code := "unanswered"
				if err == nil {
					code = strconv.Itoa(a.code)
				}
				mu.Lock()
				warmed.Sent++
				warmed.Codes[code]++
				mu.Unlock()
			})
		}
		start = start.Add(*warmup)
	}
	var seq atomic.Int64
	var firstErr atomic.Value
	answers := map[int64]answer{}
	sendOne := func(n int64, due time.Time) {
		a, err := post(n, id(n), due)
		a.late, a.due = time.Since(due), due.Sub(start)
		if err != nil {
			a.why = errorKind(err)
			firstErr.CompareAndSwap(nil, err.Error())
		} else if a.code/100 != 2 {
			firstErr.CompareAndSwap(nil, fmt.Sprintf("status %d", a.code))
		}
		mu.Lock()
		answers[n] = a
		mu.Unlock()
	}
	more := func(start time.Time) (int64, bool) {
		n := seq.Add(1)
		if *count > 0 {
			return n, n <= *count
		}
		return n, time.Since(start) < *duration
	}

	if *rate > 0 {
		// Each delivery is due at start + n/rate: sent then on its own
		// goroutine, and timed from then, so neither a slow answer nor a
		// stall of this loop thins the load or hides in the figures.
		interval := time.Duration(float64(time.Second) / *rate)
		for {
			n, ok := more(start)
			if !ok || ctx.Err() != nil {
				break
			}
			due := start.Add(time.Duration(n-1) * interval)
			time.Sleep(time.Until(due))
			wg.Go(func() { sendOne(n, due) })
		}
	} else {
		for range *concurrency {
			wg.Go(func() {
				for ctx.Err() == nil {
					n, ok := more(start)
					if !ok {
						return
					}
					sendOne(n, time.Now())
				}
			})
		}
	}
	offered := time.Since(start)
	wg.Wait()
	el := time.Since(start)

	res := sendResult{Codes: map[string]int{}, Seconds: el.Seconds(), Warmup: warmed}
	var all, acked, refused, refusedServed, written []time.Duration
	var late int64
	var notAcked, ackedIDs []int64
	for n, a := range answers {
		all = append(all, a.late)
		if a.written > 0 {
			written = append(written, a.written)
		}
		if a.dialed {
			res.Dialed++
		}
		if *deadline > 0 && a.late > *deadline {
			late++
		}
		switch {
		case a.code == 0:
			res.Errors++
			res.Codes["unanswered"]++
			if res.Unanswered == nil {
				res.Unanswered = map[string]int{}
			}
			res.Unanswered[a.why]++
			notAcked = append(notAcked, n)
		case a.code/100 == 2:
			res.Acknowledged++
			res.Codes[strconv.Itoa(a.code)]++
			acked = append(acked, a.late)
			ackedIDs = append(ackedIDs, n)
		default:
			res.Non2xx++
			res.Codes[strconv.Itoa(a.code)]++
			notAcked = append(notAcked, n)
			if a.code == http.StatusServiceUnavailable {
				refused = append(refused, a.late)
				if a.written > 0 {
					refusedServed = append(refusedServed, a.late-a.written)
				}
			}
		}
	}
	for _, l := range [][]time.Duration{all, acked, refused, refusedServed, written} {
		slices.Sort(l)
	}
	res.RefusedServedP99ms = pct(refusedServed, 0.99)
	res.WrittenP99ms = pct(written, 0.99)
	res.Sent = int64(len(answers))
	res.Rate = float64(res.Acknowledged) / el.Seconds()
	res.P50ms, res.P99ms, res.Maxms = pct(all, 0.50), pct(all, 0.99), pct(all, 1)
	res.AckP99ms, res.RefusedP99ms, res.RefusedMaxms = pct(acked, 0.99), pct(refused, 0.99), pct(refused, 1)
	if *deadline > 0 {
		res.Late = &late
	}
	if *timeline > 0 {
		res.Timeline = windows(answers, *timeline)
	}
	if *rate > 0 {
		res.OfferedRate = float64(len(answers)) / offered.Seconds()
	}
	if e, ok := firstErr.Load().(string); ok {
		res.FirstError = e
	}
	slices.Sort(notAcked)
	var conn *pgx.Conn
	var storedBefore map[string]bool
	if *verifyURL != "" {
		var err error
		if conn, err = pgx.Connect(ctx, *verifyURL); err != nil {
			return fmt.Errorf("--verify-database-url: %w", err)
		}
		defer conn.Close(context.Background())
		a, err := storedIDs(ctx, conn, *source, id, ackedIDs)
		if err != nil {
			return err
		}
		missing := int64(len(ackedIDs) - len(a))
		res.AckedMissing = &missing
		if storedBefore, err = storedIDs(ctx, conn, *source, id, notAcked); err != nil {
			return err
		}
		inDB := int64(len(storedBefore))
		res.RefusedInTheDB = &inDB
	}
	if *resend {
		rr := &resendResult{Codes: map[string]int{}}
		var wrong int64
		// Resent by --resend-concurrency senders at once: tens of thousands
		// refused, one at a time, would take minutes.
		var mu sync.Mutex
		var g errgroup.Group
		g.SetLimit(max(*resendConcurrency, 1))
		for _, n := range notAcked {
			g.Go(func() error {
				a, err := post(n, id(n), time.Now())
				dup := err == nil && a.code == http.StatusOK && a.status == "duplicate"
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					rr.Codes["unanswered"]++
				} else {
					rr.Codes[strconv.Itoa(a.code)]++
				}
				if dup {
					rr.Duplicates++
				}
				if storedBefore != nil && dup != storedBefore[id(n)] {
					wrong++
				}
				return nil
			})
		}
		_ = g.Wait() // every resend's error is counted, none returned
		if storedBefore != nil {
			rr.StoredWrong = &wrong
		}
		res.Resent = rr
		if conn != nil {
			// After the resends, every delivery sent is stored exactly once.
			var distinct, rows int64
			if err := conn.QueryRow(ctx, `SELECT count(DISTINCT delivery_id), count(*) FROM envelope
				WHERE source = $1 AND delivery_id LIKE $2 || '-%'`, *source, *prefix).Scan(&distinct, &rows); err != nil {
				return err
			}
			notOnce := (res.Sent - distinct) + (rows - distinct)
			res.StoredTwiceOrNo = &notOnce
		}
	}
	return json.NewEncoder(stdout).Encode(res)
}

// errorKind names what left a request unanswered, for the figures.
func errorKind(err error) string {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.EPIPE),
		strings.Contains(err.Error(), "server closed"):
		return "closed"
	}
	return "other"
}

// windows groups the answers by when each was due, every width.
func windows(answers map[int64]answer, width time.Duration) []window {
	var ws []window
	var acked, written, refused, served [][]time.Duration
	for _, a := range answers {
		i := int(a.due / width)
		for len(ws) <= i {
			ws = append(ws, window{At: (time.Duration(len(ws)) * width).Seconds()})
			acked = append(acked, nil)
			written = append(written, nil)
			refused = append(refused, nil)
			served = append(served, nil)
		}
		ws[i].Sent++
		if a.written > 0 {
			written[i] = append(written[i], a.written)
		}
		if a.dialed {
			ws[i].Dialed++
		}
		switch {
		case a.code == 0:
			ws[i].Unanswered++
		case a.code/100 == 2:
			ws[i].Acked++
			acked[i] = append(acked[i], a.late)
		case a.code == http.StatusServiceUnavailable:
			ws[i].Refused++
			refused[i] = append(refused[i], a.late)
			if a.written > 0 {
				served[i] = append(served[i], a.late-a.written)
			}
		default:
			ws[i].Other++
		}
	}
	for i := range ws {
		slices.Sort(acked[i])
		ws[i].AckP50ms, ws[i].AckP99ms = pct(acked[i], 0.50), pct(acked[i], 0.99)
		slices.Sort(written[i])
		ws[i].WrittenP99ms = pct(written[i], 0.99)
		slices.Sort(refused[i])
		slices.Sort(served[i])
		ws[i].RefusedP99ms, ws[i].RefusedServedP99ms = pct(refused[i], 0.99), pct(served[i], 0.99)
	}
	return ws
}

// storedIDs returns which of the deliveries ns (their ids by id) are in the
// dedup keys of source.
func storedIDs(ctx context.Context, conn *pgx.Conn, source string, id func(int64) string, ns []int64) (map[string]bool, error) {
	ids := make([]string, len(ns))
	for i, n := range ns {
		ids[i] = id(n)
	}
	rows, err := conn.Query(ctx, `SELECT delivery_id FROM envelope_key WHERE source = $1 AND delivery_id = ANY($2)`, source, ids)
	if err != nil {
		return nil, err
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	m := make(map[string]bool, len(got))
	for _, g := range got {
		m[g] = true
	}
	return m, err
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

// awaitDrained returns once no envelope received since from is pending, or
// at deadline. It polls the pending count of envelope_count (the deltas the
// writers append: its cost grows with the deltas since the worker's last
// compaction, never with the envelopes kept), not the status index, whose
// 'pending' range also holds an entry for every envelope processed since the
// table was last vacuumed. After a peak, on a server without autovacuum, an
// EXISTS on that range took 42 ms and 7,884 buffers a call: at four polls a
// second, a sixth of a core taken from the drain being measured. The count
// is of every envelope, so when it has not fallen over four polls (about a
// second) while above zero, one EXISTS tells whether those left pending were
// received before from (then the drain is over). While envelopes received
// before from are still being processed the count falls, and the wait goes
// on until they are done too: it never ends before the drain does.
func awaitDrained(ctx context.Context, conn *pgx.Conn, from, deadline time.Time) error {
	last, still := int64(-1), 0
	for {
		counts, err := envelope.CountBySource(ctx, conn, false)
		if err != nil {
			return err
		}
		var pending int64
		for _, c := range counts {
			pending += c.Pending
		}
		if pending == 0 || time.Now().After(deadline) {
			return nil
		}
		if still++; pending < last {
			still = 0
		}
		last = pending
		if still >= 4 {
			since, err := envelope.Exists(ctx, conn, envelope.Selection{Status: envelope.StatusPending, Since: from})
			if err != nil || !since {
				return err
			}
			still = 0
		}
		time.Sleep(250 * time.Millisecond)
	}
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
	if err := awaitDrained(ctx, conn, from, time.Now().Add(*timeout)); err != nil {
		return err
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
		return fmt.Errorf("%s still pending after %s", cli.Count(r.Pending, "envelope", "envelopes"), *timeout)
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

// padBody returns the JSON object body grown to about n bytes by a
// "metadata" member: half hex digests chained from seed (they do not
// compress), half repeated text (it does), as a provider's event carries
// ids and descriptions. A body already n bytes or more is returned as is.
func padBody(body []byte, n int, seed string) []byte {
	const frame = `,"metadata":{"fingerprint":"","note":""}`
	extra := n - len(body) - len(frame)
	if extra <= 0 || len(body) == 0 || body[len(body)-1] != '}' {
		return body
	}
	var digests strings.Builder
	sum := sha256.Sum256([]byte(seed))
	for digests.Len() < extra/2 {
		digests.WriteString(hex.EncodeToString(sum[:]))
		sum = sha256.Sum256(sum[:])
	}
	note := strings.Repeat("Widget, standard edition, boxed. ", extra/33+1)[:extra-extra/2]
	out := append([]byte(nil), body[:len(body)-1]...)
	out = fmt.Appendf(out, `,"metadata":{"fingerprint":"%s","note":"%s"}`, digests.String()[:extra/2], note)
	return append(out, '}')
}
