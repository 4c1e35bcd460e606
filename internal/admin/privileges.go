package admin

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// CanReplay reports whether pool's role holds the privileges Replay needs:
// INSERT on envelope_replay (the audit row) and river_job (the new job), and
// UPDATE on envelope (back to pending). The worker's role (inbox_worker,
// migration 00110) does not: a console on the worker's own connection is
// then read-only, and says so, instead of failing at the first replay.
func CanReplay(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	var ok bool
	err := pool.QueryRow(ctx, `
		SELECT has_table_privilege('envelope_replay', 'INSERT')
		   AND has_table_privilege('river_job', 'INSERT')
		   AND has_table_privilege('envelope', 'UPDATE')
		   AND has_sequence_privilege('envelope_replay_id_seq', 'USAGE')
		   AND has_sequence_privilege('river_job_id_seq', 'USAGE')`).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("check replay privileges: %w", err)
	}
	return ok, nil
}
