// Package bench_test pins the pgbench scripts of this directory, the baselines of
// scripts/bench-pipeline and scripts/bench-worker-ab, to the current schema and to what the real
// code writes: a migration that moves a column, or a change to what the store or the worker
// writes, fails here instead of leaving a script that errors at once (or measures something the
// code no longer does).
//
// The scripts run as pgbench would run them (simple query protocol, each execution its own
// transaction or the script's own BEGIN/COMMIT), with pgbench's variables substituted in the
// text, so the tests never skip; a second variant runs pgbench itself when it is installed.
package bench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/handlers"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/internal/webhooktest"
	"github.com/inboxhq/inbox/internal/worker"
)

// seedAccounts is scripts/bench-pipeline's (and scripts/bench-worker-ab's) seeding of the ledger
// accounts before bench/worker_batch.sql, verbatim.
const seedAccounts = `INSERT INTO ledger_account (merchant, name) SELECT 'm_' || lpad(i::text, 3, '0'), n FROM generate_series(0, 99) i, unnest(ARRAY['psp_clearing', 'sales']) n`

var pgbenchVar = regexp.MustCompile(`(^|[^:]):([A-Za-z_][A-Za-z0-9_]*)\b`)

// script returns the pgbench script name with its \set lines dropped and its variables replaced by
// vars, as pgbench's -M simple substitutes them in the text: a :name that vars does not name is
// left as it is (the worker script's ':payment:' is text, not a variable).
func script(t *testing.T, name string, vars map[string]string) string {
	t.Helper()
	raw, err := os.ReadFile(name)
	require.NoError(t, err)
	var out []string
	for _, line := range strings.Split(string(raw), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, `\set`) {
			continue
		}
		if strings.HasPrefix(trimmed, `\`) {
			t.Fatalf("%s: meta-command %q: the test substitutes only \\set", name, trimmed)
		}
		out = append(out, pgbenchVar.ReplaceAllStringFunc(line, func(m string) string {
			sub := pgbenchVar.FindStringSubmatch(m)
			if v, ok := vars[sub[2]]; ok {
				return sub[1] + v
			}
			return m
		}))
	}
	sql := strings.Join(out, "\n")
	for v := range vars {
		require.Contains(t, string(raw), ":"+v, "%s does not use :%s", name, v)
	}
	return sql
}

// run sends sql as pgbench does (the simple query protocol, statements in order) on its own
// connection, and fails the test on any error.
func run(t *testing.T, pool *pgxpool.Pool, sql string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	results, err := conn.Conn().PgConn().Exec(ctx, sql).ReadAll()
	require.NoError(t, err)
	for _, r := range results {
		require.NoError(t, r.Err)
	}
}

// storeDelivery stores a Standard Webhooks payment through the real store, as ingest does for
// inboxload's deliveries, and returns its envelope id.
func storeDelivery(t *testing.T, store *envelope.Store, id, merchant string, amount int64) int64 {
	t.Helper()
	body := webhooktest.StandardPayment("pay_"+id, merchant, amount, "EUR")
	res, err := store.Insert(context.Background(), envelope.NewDelivery{
		Source: "payments", Provider: "standard", DeliveryID: id, EventType: "payment.succeeded",
		Body: body, Payload: body, SignedAt: time.Now().Truncate(time.Second),
		Headers: map[string]string{"Content-Type": "application/json", "User-Agent": "Go-http-client/1.1", "Webhook-Id": id,
			"Webhook-Signature": "[redacted]", "Webhook-Timestamp": strconv.FormatInt(time.Now().Unix(), 10)},
	})
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	return res.EnvelopeID
}

func newStore(t *testing.T, pool *pgxpool.Pool) (*envelope.Store, *river.Client[pgx.Tx]) {
	t.Helper()
	rc, err := envelope.NewInsertClient(pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	return envelope.NewStore(pool, rc), rc
}

// nullColumns returns the columns of table's row whose key column equals key that are NULL: what a
// writer leaves unset, compared between the scripts' rows and the real code's.
func nullColumns(t *testing.T, pool *pgxpool.Pool, table, keyColumn string, key int64) []string {
	t.Helper()
	var cols []string
	require.NoError(t, pool.QueryRow(context.Background(), fmt.Sprintf(`
		SELECT coalesce(array_agg(j.key ORDER BY j.key), '{}') FROM %s r, jsonb_each(to_jsonb(r)) j
		 WHERE r.%s = $1 AND j.value = 'null'`, pgx.Identifier{table}.Sanitize(), pgx.Identifier{keyColumn}.Sanitize()),
		key).Scan(&cols))
	return cols
}

// The ingest baseline stores what the real store stores for a fresh Standard Webhooks delivery:
// each execution makes one envelope_key, envelope, envelope_body and River job row, and the job is
// River's own (same unique key formula, unique states, args and defaults as river.InsertManyTx
// writes for envelope.ProcessJob through the store).
func TestIngestOneStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	store, _ := newStore(t, pool)

	realID := storeDelivery(t, store, "real-1", "m_007", 1007)
	type job struct {
		ID           int64
		Args         []byte
		UniqueStates string
		State        string
		MaxAttempts  int
		Priority     int
		Queue        string
		Metadata     []byte
		Tags         []string
		KeyMatches   bool
	}
	readJob := func(envelopeID int64) job {
		t.Helper()
		var j job
		require.NoError(t, pool.QueryRow(ctx, `
			SELECT id, args, unique_states::text, state::text, max_attempts, priority, queue, metadata, tags::text[],
			       unique_key = sha256(convert_to('&kind=process_envelope&args={"envelope_id":' || $1::bigint || '}', 'UTF8'))
			  FROM river_job WHERE kind = 'process_envelope' AND (args->>'envelope_id')::bigint = $1::bigint`, envelopeID).
			Scan(&j.ID, &j.Args, &j.UniqueStates, &j.State, &j.MaxAttempts, &j.Priority, &j.Queue, &j.Metadata, &j.Tags, &j.KeyMatches))
		return j
	}
	real := readJob(realID)
	// What the script hard-codes, checked against what River wrote: its unique key formula and bitmask
	// (available, pending, retryable, running, scheduled; available is the rightmost bit).
	require.True(t, real.KeyMatches, "River's unique key is not sha256('&kind=process_envelope&args={\"envelope_id\":ID}') any more")
	require.Equal(t, "11110001", real.UniqueStates)
	require.JSONEq(t, fmt.Sprintf(`{"envelope_id":%d,"source":"payments"}`, realID), string(real.Args))

	const n = 6
	for i := range n {
		run(t, pool, script(t, "ingest_one_statement.sql", map[string]string{"client_id": strconv.Itoa(i % 2), "n": strconv.Itoa(1000 + i)}))
	}
	const mine = `delivery_id LIKE 'pgb-%'`
	require.Equal(t, n, pgtest.Count(t, pool, `SELECT count(*) FROM envelope WHERE `+mine))
	require.Equal(t, n, pgtest.Count(t, pool, `SELECT count(*) FROM envelope_key k JOIN envelope e ON e.id = k.envelope_id AND e.source = k.source AND e.delivery_id = k.delivery_id WHERE k.`+mine))
	require.Equal(t, n, pgtest.Count(t, pool, `SELECT count(*) FROM envelope_body b JOIN envelope e ON e.id = b.id WHERE e.`+mine))
	require.Equal(t, n, pgtest.Count(t, pool, `SELECT count(*) FROM river_job j JOIN envelope e ON e.id = (j.args->>'envelope_id')::bigint WHERE j.kind = 'process_envelope' AND e.`+mine))
	require.Equal(t, n+1, pgtest.Count(t, pool, `SELECT count(*) FROM river_job`))
	// The envelopes are as the store writes them: pending, their body's hash and size, the payload
	// parsed from it (a payment the worker script can post), the body in envelope_body only.
	require.Equal(t, n, pgtest.Count(t, pool, `
		SELECT count(*) FROM envelope e JOIN envelope_body b ON b.id = e.id
		 WHERE e.`+mine+` AND e.status = 'pending' AND e.source = 'payments' AND e.provider = 'standard' AND e.event_type = 'payment.succeeded'
		   AND e.origin = 'webhook' AND e.attempts = 0 AND e.body IS NULL AND e.payload IS NULL
		   AND e.body_sha256 = sha256(b.body) AND e.body_size = octet_length(b.body) AND b.payload = convert_from(b.body, 'UTF8')::jsonb
		   AND b.payload->>'type' = 'payment.succeeded' AND b.payload->'data'->>'merchant_id' ~ '^m_[0-9]{3}$'
		   AND e.headers->>'Webhook-Id' = e.delivery_id`))

	rows, err := pool.Query(ctx, `SELECT id FROM envelope WHERE `+mine+` ORDER BY id`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, ids, n)
	for _, id := range ids {
		j := readJob(id)
		require.True(t, j.KeyMatches, "job of envelope %d: unique key", id)
		require.Equal(t, real.UniqueStates, j.UniqueStates, "job of envelope %d: unique_states", id)
		require.JSONEq(t, fmt.Sprintf(`{"envelope_id":%d,"source":"payments"}`, id), string(j.Args))
		require.Equal(t, real.State, j.State)
		require.Equal(t, real.MaxAttempts, j.MaxAttempts)
		require.Equal(t, real.Priority, j.Priority)
		require.Equal(t, real.Queue, j.Queue)
		require.JSONEq(t, string(real.Metadata), string(j.Metadata))
		require.Equal(t, real.Tags, j.Tags)
		// The same columns left unset as the real store's rows.
		require.Equal(t, nullColumns(t, pool, "river_job", "id", real.ID), nullColumns(t, pool, "river_job", "id", j.ID), "job of envelope %d", id)
		require.Equal(t, nullColumns(t, pool, "envelope", "id", realID), nullColumns(t, pool, "envelope", "id", id), "envelope %d", id)
		require.Equal(t, nullColumns(t, pool, "envelope_body", "id", realID), nullColumns(t, pool, "envelope_body", "id", id), "envelope_body %d", id)
	}
	// River's uniqueness holds against the script's jobs: the store's insert of a job for one of
	// its envelopes (a replay while it waits) is skipped as a duplicate.
	_, rc := newStore(t, pool)
	res, err := rc.InsertMany(ctx, []river.InsertManyParams{envelope.ProcessJob(ids[0], "payments", 0)})
	require.NoError(t, err)
	require.True(t, res[0].UniqueSkippedAsDuplicate)

	t.Run("pgbench", func(t *testing.T) {
		pgbench := lookPgbench(t)
		url := pgtest.NewURL(t)
		p := pgtest.OpenPool(t, url)
		out := runPgbench(t, pgbench, url, "-n", "-c", "2", "-j", "2", "-t", "5", "-f", "ingest_one_statement.sql")
		require.Contains(t, out, "number of failed transactions: 0", out)
		require.Equal(t, 10, pgtest.Count(t, p, `SELECT count(*) FROM envelope JOIN envelope_body USING (id) JOIN envelope_key k USING (source, delivery_id)`))
		require.Equal(t, 10, pgtest.Count(t, p, `SELECT count(*) FROM river_job WHERE kind = 'process_envelope' AND unique_states = B'11110001'`))
	})
}

// The worker baseline does to a batch what the real worker does: the same envelopes' claim, one
// balanced ledger transaction per payment (as the real handler posts it), the envelopes done with
// the handler's result, one attempt row each, and their jobs deleted; the rest of the backlog
// untouched.
func TestWorkerBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewURL(t)
	pool := pgtest.OpenPool(t, url)
	store, rc := newStore(t, pool)
	_, err := pool.Exec(ctx, seedAccounts)
	require.NoError(t, err)
	require.Equal(t, 200, pgtest.Count(t, pool, `SELECT count(*) FROM ledger_account`))

	// The reference: one payment processed by the real worker, as River runs its job.
	refID := storeDelivery(t, store, "ref-1", "m_042", 1042)
	var refJob int64
	require.NoError(t, pool.QueryRow(ctx, `
		UPDATE river_job SET state = 'running', attempt = attempt + 1, attempted_at = now(), attempted_by = array['ref']
		 WHERE kind = 'process_envelope' AND (args->>'envelope_id')::bigint = $1 RETURNING id`, refID).Scan(&refJob))
	row, err := rc.JobGet(ctx, refJob)
	require.NoError(t, err)
	job := &river.Job[envelope.ProcessArgs]{JobRow: row}
	require.NoError(t, json.Unmarshal(row.EncodedArgs, &job.Args))
	w := &worker.ProcessWorker{Pool: pgtest.OpenPool(t, pgtest.RoleURL(t, url, pgtest.RoleWorker)), Registry: handlers.Builtin(),
		Policy: worker.DefaultPolicy, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Name: "ref"}
	require.NoError(t, w.Work(ctx, job))
	require.Equal(t, "done", pgtest.Scalar[string](t, pool, `SELECT status FROM envelope WHERE id = $1`, refID))
	require.Zero(t, pgtest.Count(t, pool, `SELECT count(*) FROM river_job WHERE id = $1`, refJob), "the real worker deletes a finished job")
	refResult := pgtest.Scalar[map[string]any](t, pool, `SELECT result FROM envelope WHERE id = $1`, refID)

	// The backlog: 12 payments over 4 merchants, 9 stored by the real store, 3 by the ingest script.
	const backlog, batch = 12, 5
	for i := range backlog - 3 {
		storeDelivery(t, store, fmt.Sprintf("d-%d", i), fmt.Sprintf("m_%03d", i%4), int64(1000+i))
	}
	for i := range 3 {
		run(t, pool, script(t, "ingest_one_statement.sql", map[string]string{"client_id": "0", "n": strconv.Itoa(i)}))
	}
	require.Equal(t, backlog, pgtest.Count(t, pool, `SELECT count(*) FROM envelope WHERE status = 'pending'`))
	require.Equal(t, backlog, pgtest.Count(t, pool, `SELECT count(*) FROM river_job WHERE state = 'available'`))
	jobsBefore := map[int64]int64{} // envelope -> job
	rows, err := pool.Query(ctx, `SELECT (args->>'envelope_id')::bigint, id FROM river_job WHERE kind = 'process_envelope'`)
	require.NoError(t, err)
	var e, j int64
	_, err = pgx.ForEachRow(rows, []any{&e, &j}, func() error { jobsBefore[e] = j; return nil })
	require.NoError(t, err)

	workerSQL := script(t, "worker_batch.sql", map[string]string{"batch": strconv.Itoa(batch)})
	run(t, pool, workerSQL)

	// Exactly one batch done, the rest pending with their jobs.
	require.Equal(t, batch, pgtest.Count(t, pool, `SELECT count(*) FROM envelope WHERE status = 'done' AND id <> $1`, refID))
	require.Equal(t, backlog-batch, pgtest.Count(t, pool, `SELECT count(*) FROM envelope WHERE status = 'pending'`))
	require.Equal(t, backlog-batch, pgtest.Count(t, pool, `
		SELECT count(*) FROM envelope e JOIN river_job j ON (j.args->>'envelope_id')::bigint = e.id
		 WHERE e.status = 'pending' AND j.state = 'available' AND j.attempt = 0`))
	// The done envelopes' jobs are deleted, as the real worker leaves them.
	require.Equal(t, backlog-batch, pgtest.Count(t, pool, `SELECT count(*) FROM river_job`))
	require.Zero(t, pgtest.Count(t, pool, `
		SELECT count(*) FROM river_job j JOIN envelope e ON e.id = (j.args->>'envelope_id')::bigint WHERE e.status <> 'pending'`))
	// Each done envelope: processed once, its payment posted as the handler posts it, balanced on its
	// merchant's psp_clearing (debit) and sales (credit), for the amount of its payload.
	require.Equal(t, batch, pgtest.Count(t, pool, `
		SELECT count(*) FROM envelope e
		  JOIN envelope_body b ON b.id = e.id
		  JOIN ledger_transaction t ON t.envelope_id = e.id
		 WHERE e.status = 'done' AND e.id <> $1 AND e.attempts = 1 AND e.processed_at IS NOT NULL AND e.last_error IS NULL
		   AND t.kind = 'payment' AND t.merchant = b.payload->'data'->>'merchant_id' AND t.currency = 'EUR'
		   AND t.amount_minor = (b.payload->'data'->>'amount_minor')::bigint
		   AND t.idempotency_key = 'standard:' || t.merchant || ':payment:' || (b.payload->'data'->>'payment_id') AND t.payment_key = t.idempotency_key
		   AND t.source = e.source AND t.delivery_id = e.delivery_id
		   AND t.description = 'standard payment.succeeded ' || (b.payload->'data'->>'payment_id') || ' (delivery ' || e.delivery_id || ')'
		   AND (SELECT count(*) FROM ledger_entry x WHERE x.transaction_id = t.id) = 2
		   AND (SELECT sum(x.amount_minor) FROM ledger_entry x WHERE x.transaction_id = t.id) = 0
		   AND EXISTS (SELECT 1 FROM ledger_entry x JOIN ledger_account a ON a.id = x.account_id
		                WHERE x.transaction_id = t.id AND a.merchant = t.merchant AND a.name = 'psp_clearing' AND x.amount_minor = t.amount_minor)
		   AND EXISTS (SELECT 1 FROM ledger_entry x JOIN ledger_account a ON a.id = x.account_id
		                WHERE x.transaction_id = t.id AND a.merchant = t.merchant AND a.name = 'sales' AND x.amount_minor = -t.amount_minor)`, refID))
	require.Equal(t, 2*(batch+1), pgtest.Count(t, pool, `SELECT count(*) FROM ledger_entry`))
	require.Zero(t, pgtest.Scalar[int64](t, pool, `SELECT sum(amount_minor) FROM ledger_entry`))
	require.Equal(t, batch+1, pgtest.Count(t, pool, `SELECT count(*) FROM ledger_transaction`))
	// One attempt row each, done at attempt 1, naming the job it ran as (deleted now).
	rows, err = pool.Query(ctx, `
		SELECT a.envelope_id, a.job_id FROM envelope_attempt a JOIN envelope e ON e.id = a.envelope_id
		 WHERE a.envelope_id <> $1 AND a.outcome = 'done' AND a.attempt = 1 AND a.error IS NULL AND a.cause IS NULL
		   AND a.started_at <= a.finished_at AND a.finished_at <= e.processed_at + interval '1 second' AND e.status = 'done'`, refID)
	require.NoError(t, err)
	attempts := 0
	_, err = pgx.ForEachRow(rows, []any{&e, &j}, func() error {
		attempts++
		require.Equal(t, jobsBefore[e], j, "envelope %d's attempt names its job", e)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, batch, attempts)
	require.Equal(t, batch+1, pgtest.Count(t, pool, `SELECT count(*) FROM envelope_attempt`))

	// The script's rows against the real worker's: the same result document (but the transaction
	// id), the same columns left unset.
	var doneID int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT min(id) FROM envelope WHERE status = 'done' AND id <> $1`, refID).Scan(&doneID))
	got := pgtest.Scalar[map[string]any](t, pool, `SELECT result FROM envelope WHERE id = $1`, doneID)
	require.Equal(t, slices.Sorted(maps.Keys(refResult)), slices.Sorted(maps.Keys(got)))
	require.Equal(t, true, got["posted"])
	require.Equal(t, "payment", got["kind"])
	require.Equal(t, pgtest.Scalar[int64](t, pool, `SELECT id FROM ledger_transaction WHERE envelope_id = $1`, doneID), int64(got["ledger_transaction_id"].(float64)))
	require.Equal(t, pgtest.Scalar[string](t, pool, `SELECT idempotency_key FROM ledger_transaction WHERE envelope_id = $1`, doneID), got["idempotency_key"])
	require.Equal(t, nullColumns(t, pool, "envelope", "id", refID), nullColumns(t, pool, "envelope", "id", doneID))
	refTx := pgtest.Scalar[int64](t, pool, `SELECT id FROM ledger_transaction WHERE envelope_id = $1`, refID)
	require.Equal(t, nullColumns(t, pool, "ledger_transaction", "id", refTx), nullColumns(t, pool, "ledger_transaction", "id", int64(got["ledger_transaction_id"].(float64))))
	require.Equal(t, nullColumns(t, pool, "envelope_attempt", "envelope_id", refID), nullColumns(t, pool, "envelope_attempt", "envelope_id", doneID))

	// The rest drains, a batch at a time; with nothing pending the script changes nothing.
	run(t, pool, workerSQL)
	run(t, pool, workerSQL)
	run(t, pool, workerSQL)
	require.Zero(t, pgtest.Count(t, pool, `SELECT count(*) FROM envelope WHERE status = 'pending'`))
	require.Zero(t, pgtest.Count(t, pool, `SELECT count(*) FROM river_job`))
	require.Equal(t, backlog+1, pgtest.Count(t, pool, `SELECT count(*) FROM ledger_transaction`))
	require.Equal(t, 2*(backlog+1), pgtest.Count(t, pool, `SELECT count(*) FROM ledger_entry`))
	require.Equal(t, backlog+1, pgtest.Count(t, pool, `SELECT count(*) FROM envelope_attempt`))
	require.Zero(t, pgtest.Count(t, pool, `SELECT count(*) FROM ledger_balance WHERE account = 'psp_clearing' AND balance_minor <= 0`))
	require.Zero(t, pgtest.Scalar[int64](t, pool, `SELECT sum(balance_minor) FROM ledger_balance`))

	t.Run("pgbench", func(t *testing.T) {
		pgbench := lookPgbench(t)
		url := pgtest.NewURL(t)
		p := pgtest.OpenPool(t, url)
		_, err := p.Exec(ctx, seedAccounts)
		require.NoError(t, err)
		out := runPgbench(t, pgbench, url, "-n", "-c", "2", "-j", "2", "-t", "10", "-f", "ingest_one_statement.sql")
		require.Contains(t, out, "number of failed transactions: 0", out)
		_, err = p.Exec(ctx, "VACUUM ANALYZE")
		require.NoError(t, err)
		// 20 payments, 2 clients of 4 a batch, 4 transactions each: room for 32, all drained.
		out = runPgbench(t, pgbench, url, "-n", "-c", "2", "-j", "2", "-t", "4", "-D", "batch=4", "-f", "worker_batch.sql")
		require.Contains(t, out, "number of failed transactions: 0", out)
		require.Equal(t, 20, pgtest.Count(t, p, `SELECT count(*) FROM envelope WHERE status = 'done'`))
		require.Zero(t, pgtest.Count(t, p, `SELECT count(*) FROM river_job`))
		require.Equal(t, 40, pgtest.Count(t, p, `SELECT count(*) FROM ledger_entry`))
		require.Equal(t, 20, pgtest.Count(t, p, `SELECT count(*) FROM envelope_attempt WHERE outcome = 'done'`))
	})
}

// lookPgbench returns pgbench's path, or skips the pgbench variant (the textual one has run).
func lookPgbench(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("pgbench")
	if err != nil {
		t.Skip("pgbench not installed: the script ran above with its variables substituted")
	}
	return path
}

func runPgbench(t *testing.T, pgbench, url string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, pgbench, append(args, url)...).CombinedOutput()
	require.NoError(t, err, "pgbench %s: %s", strings.Join(args, " "), out)
	return string(out)
}
