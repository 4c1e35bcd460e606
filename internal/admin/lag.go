package admin

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Lag is how far behind its primary the database a pool reads is.
type Lag struct {
	// Standby says the database is a hot standby (in recovery): it serves
	// reads only, what the primary committed a moment ago.
	Standby bool `json:"standby"`
	// Behind is 0 when the standby has replayed all the WAL it received,
	// else the time since the last transaction it replayed committed on
	// the primary. A standby cut off from its primary replays all it
	// received and shows 0: pg_stat_wal_receiver tells that case.
	Behind time.Duration `json:"behind_ns"`
}

// ReadLag reads pool's database's replication lag (Standby false and 0 on a
// primary).
func ReadLag(ctx context.Context, pool *pgxpool.Pool) (Lag, error) {
	var l Lag
	var secs float64
	err := pool.QueryRow(ctx, `
		SELECT pg_is_in_recovery(),
		       CASE WHEN NOT pg_is_in_recovery() OR pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0
		            ELSE coalesce(extract(epoch FROM now() - pg_last_xact_replay_timestamp()), 0) END::float8`).Scan(&l.Standby, &secs)
	if err != nil {
		return Lag{}, fmt.Errorf("read replication lag: %w", err)
	}
	l.Behind = time.Duration(math.Max(secs, 0) * float64(time.Second))
	return l, nil
}
