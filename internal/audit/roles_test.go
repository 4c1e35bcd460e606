package audit_test

import (
	"context"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/pgtest"
)

// grantDecisions is the privilege matrix of migration 00110_roles.sql, for
// every table, view and sequence in the schema: relation (or
// relation.column for column grants) -> role -> privileges. A relation with
// no role listed is a decision too ("no role may touch it"). A table added
// by a later migration fails TestEveryRelationHasAGrantDecision until it is
// listed here and granted there: the next table cannot be forgotten.
var grantDecisions = map[string]map[string]string{
	"envelope": {
		"inbox_worker": "DELETE,INSERT,SELECT,UPDATE",
		"inbox_admin":  "DELETE,INSERT,SELECT,UPDATE",
		"inbox_ingest": "INSERT",
	},
	"envelope.origin":      {"inbox_ingest": "SELECT"},
	"envelope.id":          {"inbox_ingest": "SELECT"},
	"envelope.source":      {"inbox_ingest": "SELECT"},
	"envelope.delivery_id": {"inbox_ingest": "SELECT"},
	"envelope.body_sha256": {"inbox_ingest": "SELECT"},
	"envelope.body_size":   {"inbox_ingest": "UPDATE"},
	"envelope_attempt":     {"inbox_worker": "DELETE,INSERT,SELECT", "inbox_admin": "DELETE,SELECT"},
	"envelope_duplicate":   {"inbox_ingest": "INSERT", "inbox_worker": "DELETE,INSERT,SELECT", "inbox_admin": "DELETE,INSERT,SELECT"},
	"envelope_conflict":    {"inbox_ingest": "INSERT", "inbox_worker": "DELETE,INSERT,SELECT", "inbox_admin": "DELETE,INSERT,SELECT"},
	"backfill_run":         {"inbox_worker": "INSERT,SELECT,UPDATE", "inbox_admin": "INSERT,SELECT,UPDATE"},
	"envelope_count":       {"inbox_worker": "SELECT", "inbox_admin": "SELECT"},
	// Arrivals per minute (migration 00198): written by a SECURITY DEFINER
	// trigger and compaction only.
	"envelope_arrival": {"inbox_worker": "SELECT", "inbox_admin": "SELECT"},
	// Bodies (migration 00200): ingest stores them, the worker and admin
	// read them and store them too (backfill, reconcile); nobody updates or
	// deletes one: retention drops a partition.
	"envelope_body":      {"inbox_ingest": "INSERT", "inbox_worker": "INSERT,SELECT", "inbox_admin": "INSERT,SELECT"},
	"envelope_with_body": {"inbox_admin": "SELECT"},
	// The dedup keys and the partitions (migration 00190): ingest, the
	// worker's backfill and the admin's replay store envelopes, each taking
	// its key (or taking over one whose partition was dropped).
	"envelope_key":             {"inbox_ingest": "INSERT,SELECT", "inbox_worker": "INSERT,SELECT", "inbox_admin": "INSERT,SELECT"},
	"envelope_key.envelope_id": {"inbox_ingest": "UPDATE", "inbox_worker": "UPDATE", "inbox_admin": "UPDATE"},
	"envelope_partition":       {"inbox_ingest": "SELECT", "inbox_worker": "SELECT", "inbox_admin": "SELECT"},
	"envelope_digest":          {"inbox_ingest": "INSERT,SELECT,UPDATE", "inbox_worker": "DELETE,SELECT", "inbox_admin": "SELECT"},
	"envelope_conflict.id":     {"inbox_ingest": "SELECT"},
	// A variant already recorded is counted on its row (migration 00182).
	"envelope_conflict.envelope_id":      {"inbox_ingest": "SELECT"},
	"envelope_conflict.body_sha256":      {"inbox_ingest": "SELECT,UPDATE"},
	"envelope_conflict.overflow":         {"inbox_ingest": "SELECT"},
	"envelope_conflict.repeats":          {"inbox_ingest": "SELECT,UPDATE"},
	"envelope_conflict.last_received_at": {"inbox_ingest": "UPDATE"},
	"envelope_conflict.body_size":        {"inbox_ingest": "UPDATE"},
	"envelope_conflict.headers":          {"inbox_ingest": "UPDATE"},
	"envelope_replay":                    {"inbox_worker": "DELETE,SELECT", "inbox_admin": "DELETE,INSERT,SELECT"},
	"envelope_resolution":                {"inbox_worker": "INSERT,SELECT", "inbox_admin": "INSERT,SELECT"},
	"ledger_account":                     {"inbox_worker": "INSERT,SELECT", "inbox_admin": "SELECT"},
	"ledger_transaction":                 {"inbox_worker": "INSERT,SELECT", "inbox_admin": "SELECT"},
	"ledger_presentment":                 {"inbox_worker": "INSERT,SELECT", "inbox_admin": "SELECT"},
	"ledger_transaction.description":     {"inbox_worker": "UPDATE"},
	"ledger_entry":                       {"inbox_worker": "INSERT,SELECT", "inbox_admin": "SELECT"},
	"throttle_window":                    {"inbox_worker": "DELETE,INSERT,SELECT,UPDATE", "inbox_admin": "SELECT"},
	"river_job": {
		"inbox_ingest": "INSERT,SELECT,UPDATE",
		"inbox_worker": "DELETE,INSERT,SELECT,UPDATE",
		"inbox_admin":  "DELETE,INSERT,SELECT,UPDATE",
	},
	"river_leader":       {"inbox_worker": "DELETE,INSERT,SELECT,UPDATE", "inbox_admin": "SELECT"},
	"river_queue":        {"inbox_worker": "DELETE,INSERT,SELECT,UPDATE", "inbox_admin": "SELECT"},
	"river_notification": {"inbox_worker": "DELETE,INSERT,SELECT,UPDATE", "inbox_admin": "SELECT"},
	"river_migration":    {"inbox_worker": "SELECT", "inbox_admin": "SELECT"},
	"goose_db_version":   {"inbox_admin": "SELECT"},

	"envelope_audit":           {"inbox_admin": "SELECT"},
	"envelope_conflict_audit":  {"inbox_admin": "SELECT"},
	"envelope_replay_audit":    {"inbox_admin": "SELECT"},
	"envelope_retry_stats":     {"inbox_admin": "SELECT"},
	"ledger_balance":           {"inbox_worker": "SELECT", "inbox_admin": "SELECT"},
	"ledger_payment_audit":     {"inbox_admin": "SELECT"},
	"ledger_transaction_audit": {"inbox_admin": "SELECT"},

	"envelope_id_seq":            {"inbox_ingest": "USAGE", "inbox_worker": "USAGE", "inbox_admin": "USAGE"},
	"envelope_duplicate_id_seq":  {"inbox_ingest": "USAGE", "inbox_worker": "USAGE", "inbox_admin": "USAGE"},
	"envelope_conflict_id_seq":   {"inbox_ingest": "USAGE", "inbox_worker": "USAGE", "inbox_admin": "USAGE"},
	"backfill_run_id_seq":        {"inbox_worker": "USAGE", "inbox_admin": "USAGE"},
	"envelope_resolution_id_seq": {"inbox_worker": "USAGE", "inbox_admin": "USAGE"},
	"envelope_attempt_id_seq":    {"inbox_worker": "SELECT,USAGE"},
	"envelope_replay_id_seq":     {"inbox_admin": "USAGE"},
	"ledger_account_id_seq":      {"inbox_worker": "SELECT,USAGE"},
	"ledger_transaction_id_seq":  {"inbox_worker": "SELECT,USAGE"},
	"ledger_entry_id_seq":        {"inbox_worker": "SELECT,USAGE"},
	"river_job_id_seq":           {"inbox_ingest": "USAGE", "inbox_worker": "SELECT,USAGE", "inbox_admin": "USAGE"},
	"river_notification_id_seq":  {"inbox_worker": "SELECT,USAGE"},
	"goose_db_version_id_seq":    {},
}

var inboxRoles = []string{pgtest.RoleIngest, pgtest.RoleWorker, pgtest.RoleAdmin}

// actualGrants reads the privileges the three roles hold on relations and
// columns of schema public, in grantDecisions' shape.
func actualGrants(t *testing.T, conn *pgx.Conn) (relations []string, grants map[string]map[string]string) {
	t.Helper()
	ctx := context.Background()
	rows, err := conn.Query(ctx, `
		SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		 WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
		   -- a partition is reached through its table, whose grants apply
		   AND NOT c.relispartition
		   -- an extension's own relations (pg_stat_statements, installed by an
		   -- operator or in template1) are not the schema's to grant
		   AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e')
		 ORDER BY 1`)
	require.NoError(t, err)
	relations, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)

	rows, err = conn.Query(ctx, `
		SELECT c.relname, r.rolname, a.privilege_type
		  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		 CROSS JOIN LATERAL aclexplode(c.relacl) a JOIN pg_roles r ON r.oid = a.grantee
		 WHERE n.nspname = 'public' AND r.rolname = ANY($1)
		UNION ALL
		SELECT c.relname || '.' || at.attname, r.rolname, a.privilege_type
		  FROM pg_attribute at JOIN pg_class c ON c.oid = at.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		 CROSS JOIN LATERAL aclexplode(at.attacl) a JOIN pg_roles r ON r.oid = a.grantee
		 WHERE n.nspname = 'public' AND r.rolname = ANY($1) AND at.attnum > 0 AND NOT at.attisdropped`, inboxRoles)
	require.NoError(t, err)
	privs := map[string]map[string][]string{}
	var rel, role, priv string
	_, err = pgx.ForEachRow(rows, []any{&rel, &role, &priv}, func() error {
		if privs[rel] == nil {
			privs[rel] = map[string][]string{}
		}
		privs[rel][role] = append(privs[rel][role], priv)
		return nil
	})
	require.NoError(t, err)
	grants = map[string]map[string]string{}
	for rel, byRole := range privs {
		grants[rel] = map[string]string{}
		for role, ps := range byRole {
			sort.Strings(ps)
			grants[rel][role] = strings.Join(ps, ",")
		}
	}
	return relations, grants
}

func TestEveryRelationHasAGrantDecision(t *testing.T) {
	t.Parallel()
	conn, err := pgx.Connect(context.Background(), pgtest.NewURL(t))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	relations, grants := actualGrants(t, conn)
	for _, rel := range relations {
		_, ok := grantDecisions[rel]
		require.True(t, ok, "relation %s has no grant decision: grant what inbox_ingest, inbox_worker and inbox_admin need in a migration, and list it in grantDecisions (an empty map if none)", rel)
	}
	for rel, want := range grantDecisions {
		got := grants[rel]
		if got == nil {
			got = map[string]string{}
		}
		require.Equal(t, want, got, "grants on %s", rel)
	}
	for rel := range grants {
		_, ok := grantDecisions[rel]
		require.True(t, ok, "grants on %s are not in grantDecisions", rel)
	}
}

// The roles are group roles: no one logs in as them, and they carry no
// attribute beyond their grants.
func TestInboxRolesAreNologinGroupRoles(t *testing.T) {
	t.Parallel()
	conn, err := pgx.Connect(context.Background(), pgtest.NewURL(t))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	for _, role := range inboxRoles {
		var login, super, createRole, createDB, bypassRLS bool
		require.NoError(t, conn.QueryRow(context.Background(),
			`SELECT rolcanlogin, rolsuper, rolcreaterole, rolcreatedb, rolbypassrls FROM pg_roles WHERE rolname = $1`, role).
			Scan(&login, &super, &createRole, &createDB, &bypassRLS), role)
		require.Equal(t, [5]bool{}, [5]bool{login, super, createRole, createDB, bypassRLS}, role)
	}
}
