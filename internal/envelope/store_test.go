package envelope_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/pgtest"
)

type bundle struct {
	pool  *pgxpool.Pool
	store *envelope.Store
}

func setup(t *testing.T) *bundle {
	t.Helper()
	pool := pgtest.NewPool(t)
	rc, err := envelope.NewInsertClient(pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	return &bundle{pool: pool, store: envelope.NewStore(pool, rc)}
}

func (b *bundle) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), q, args...)
	require.NoError(t, err)
}

func delivery(id string) envelope.NewDelivery {
	body := []byte(`{"type":"payment.succeeded","id":"` + id + `"}`)
	return envelope.NewDelivery{Source: "src", Provider: "standard", DeliveryID: id, EventType: "payment.succeeded",
		Body: body, Payload: body, Headers: map[string]string{}}
}

// jobsFor counts the process_envelope jobs of delivery id, in any state.
const jobsFor = `SELECT count(*) FROM river_job j JOIN envelope e ON e.id = (j.args->>'envelope_id')::bigint
	WHERE j.kind = 'process_envelope' AND e.delivery_id = $1`

// failEnqueueOf makes every insert into river_job fail while delivery id is
// being stored (a trigger that raises for its envelope's job).
func (b *bundle) failEnqueueOf(t *testing.T, id string) {
	t.Helper()
	b.exec(t, `
		CREATE FUNCTION test_fail_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF EXISTS (SELECT 1 FROM envelope WHERE id = (NEW.args->>'envelope_id')::bigint AND delivery_id = '`+id+`') THEN
				RAISE EXCEPTION 'test: enqueue refused';
			END IF;
			RETURN NEW;
		END $$`)
	b.exec(t, `CREATE TRIGGER test_fail_enqueue BEFORE INSERT ON river_job FOR EACH ROW EXECUTE FUNCTION test_fail_enqueue()`)
}

// The envelope and its job commit together: when the job's insert fails,
// the envelope is not stored either, and the sender's retry stores it anew
// with a job. Fails if the job is enqueued after the envelope commits (the
// retry would be a duplicate of an envelope that has no job).
func TestInsertStoresNothingWhenTheEnqueueFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.failEnqueueOf(t, "msg_atomic")

	_, err := b.store.Insert(ctx, delivery("msg_atomic"))
	require.Error(t, err)
	require.Contains(t, err.Error(), "enqueue refused")
	require.Equal(t, 0, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope WHERE delivery_id = 'msg_atomic'`), "no envelope without its job")
	require.Equal(t, 0, pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job`))

	// Other deliveries are unaffected while the trigger is in place.
	other, err := b.store.Insert(ctx, delivery("msg_other"))
	require.NoError(t, err)
	require.False(t, other.Duplicate)

	b.exec(t, `DROP TRIGGER test_fail_enqueue ON river_job`)
	res, err := b.store.Insert(ctx, delivery("msg_atomic"))
	require.NoError(t, err)
	require.False(t, res.Duplicate, "the retry is a new delivery, not a duplicate of an envelope without a job")
	require.Equal(t, 1, pgtest.Count(t, b.pool, jobsFor, "msg_atomic"))
	require.Equal(t, 1, pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE (args->>'envelope_id')::bigint = $1 AND state = 'available'`, res.EnvelopeID))
}

// The job is written in the envelope's transaction, not beside it: when the
// transaction fails at COMMIT (here a deferred constraint trigger, as a
// serialization failure would), neither the envelope nor its job exists.
// Fails if the job is inserted through the pool instead of the transaction.
func TestInsertLeavesNoJobWhenTheCommitFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.exec(t, `
		CREATE FUNCTION test_fail_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.delivery_id = 'msg_commit' THEN
				RAISE EXCEPTION 'test: commit refused' USING ERRCODE = 'serialization_failure';
			END IF;
			RETURN NULL;
		END $$`)
	b.exec(t, `CREATE CONSTRAINT TRIGGER test_fail_commit AFTER INSERT ON envelope
		DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION test_fail_commit()`)

	_, err := b.store.Insert(ctx, delivery("msg_commit"))
	require.Error(t, err)
	require.Contains(t, err.Error(), "commit refused")
	require.Equal(t, 0, pgtest.Count(t, b.pool, `SELECT count(*) FROM envelope`))
	require.Equal(t, 0, pgtest.Count(t, b.pool, `SELECT count(*) FROM river_job`), "a job committed without its envelope")
}

// Body is the raw bytes as received, byte for byte; the jsonb Payload is
// loaded only once retention purged the body, and BodyOrPayload gives the
// one a handler reads.
func TestBodyIsTheRawBytesAndPayloadTheFallback(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	d := delivery("raw-1")
	d.Body = []byte(`{ "type": "payment.succeeded",  "id": "raw-1" }`) // spacing jsonb does not keep
	d.Payload = d.Body
	res, err := b.store.Insert(ctx, d)
	require.NoError(t, err)

	env, err := envelope.Get(ctx, b.pool, res.EnvelopeID)
	require.NoError(t, err)
	require.Equal(t, d.Body, env.Body, "the raw bytes, not jsonb's rendering")
	require.Equal(t, d.Body, env.BodyOrPayload(), "not the stored copy while the body is there")
	require.Equal(t, d.Body, env.Document())

	// The raw body gone, its parsed copy left in the row (a layout older
	// rows can have).
	b.exec(t, `WITH d AS (DELETE FROM envelope_body WHERE id = $1 RETURNING payload)
		UPDATE envelope SET payload = d.payload, body_purged_at = now() FROM d WHERE envelope.id = $1`, res.EnvelopeID)
	env, err = envelope.Get(ctx, b.pool, res.EnvelopeID)
	require.NoError(t, err)
	require.Nil(t, env.Body)
	require.JSONEq(t, string(d.Body), string(env.Document()), "the stored copy")
	require.NotEqual(t, d.Body, env.Document(), "jsonb's rendering, not the raw bytes")
	require.Equal(t, env.Document(), env.BodyOrPayload())

	b.exec(t, `UPDATE envelope SET payload = NULL WHERE id = $1`, res.EnvelopeID)
	env, err = envelope.Get(ctx, b.pool, res.EnvelopeID)
	require.NoError(t, err)
	require.Nil(t, env.BodyOrPayload(), "neither left")
}
