package console_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/admin"
	"github.com/inboxhq/inbox/internal/console"
	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/pgtest"
	"github.com/inboxhq/inbox/migrations"
)

// The console reads a real hot standby (a second cluster made by
// pg_basebackup -R, following the primary's WAL) and records replays on the
// primary. With the standby's replay paused, the pages say how far behind
// it is and do not show what the primary committed since; resumed, they do.
func TestConsoleReadsAStandby(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary := pgtest.StartCluster(t)
	pool := pgtest.OpenPool(t, primary.URL())
	require.NoError(t, migrations.Migrate(ctx, pool, io.Discard))
	standby := primary.StartStandby(t)
	read := pgtest.OpenPool(t, standby.URL())

	logger := slog.New(slog.DiscardHandler)
	jobs, err := envelope.NewInsertClient(pool, logger)
	require.NoError(t, err)
	c, err := console.New(console.Options{Pool: pool, ReadPool: read, Jobs: jobs, Actor: func(*http.Request) string { return "ops" }, Logger: logger})
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	b := &bundle{pool: pool, srv: srv}

	first := seed(t, pool, 1)[0]
	visible := func(id int64) func() (bool, string) {
		return func() (bool, string) {
			n := pgtest.Count(t, read, `SELECT count(*) FROM envelope WHERE id = $1`, id)
			return n == 1, fmt.Sprintf("%d on the standby", n)
		}
	}
	pgtest.Eventually(t, 30*time.Second, "the standby has the first envelope", visible(first))
	lag, err := admin.ReadLag(ctx, read)
	require.NoError(t, err)
	require.True(t, lag.Standby)
	lag, err = admin.ReadLag(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, admin.Lag{}, lag, "the primary is no standby")

	_, body, _ := b.get(t, "/console/envelopes?status=failed")
	require.Contains(t, body, fmt.Sprintf(`href="/console/envelopes/%d"`, first))
	require.Regexp(t, `id="standby"><small>Reading: these pages read a standby, (caught up with the primary|[\d.]+ s behind the primary)`, body)

	// Replay paused on the standby: what the primary commits now is not
	// read, and the page says how far behind it is.
	_, err = read.Exec(ctx, `SELECT pg_wal_replay_pause()`)
	require.NoError(t, err)
	second := seed(t, pool, 1)[0]
	pgtest.Eventually(t, 30*time.Second, "the standby receives WAL it does not replay", func() (bool, string) {
		lag, err := admin.ReadLag(ctx, read)
		require.NoError(t, err)
		return lag.Behind > 0, fmt.Sprintf("%+v", lag)
	})
	_, body, _ = b.get(t, "/console/envelopes?status=failed")
	require.Regexp(t, `these pages read a standby, [\d.]+ s behind the primary: what happened since is not shown yet`, body)
	require.NotContains(t, body, fmt.Sprintf(`href="/console/envelopes/%d"`, second), "not replayed on the standby yet")
	code, _, _ := b.get(t, fmt.Sprintf("/console/envelopes/%d", second))
	require.Equal(t, http.StatusNotFound, code, "the envelope page reads the standby too")

	// The dry run reads the standby; the replay it confirms is recorded on
	// the primary (the standby refuses writes).
	_, page, _ := b.get(t, fmt.Sprintf("/console/replay?id=%d", first))
	require.Contains(t, page, `<b id="would-replay">1</b>`)
	form := hidden(t, page)
	form.Set("reason", "standby drill")
	code, body, h := b.post(t, "/console/replay", form)
	require.Equal(t, http.StatusSeeOther, code, body)
	b.waitDone(t, h.Get("Location"))
	require.Equal(t, 1, pgtest.Count(t, pool, `SELECT count(*) FROM envelope_replay WHERE reason = 'standby drill' AND envelope_id = $1`, first))

	_, err = read.Exec(ctx, `SELECT pg_wal_replay_resume()`)
	require.NoError(t, err)
	pgtest.Eventually(t, 30*time.Second, "the standby catches up", visible(second))
	_, body, _ = b.get(t, "/console/envelopes?status=failed")
	require.True(t, strings.Contains(body, fmt.Sprintf(`href="/console/envelopes/%d"`, second)), "shown once replayed")
}
