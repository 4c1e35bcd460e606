package audit_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/pgtest"
)

const schemaDocPath = "../../docs/schema.md"

// documented is one relation of docs/schema.md: a ### heading naming it in
// backticks, and its table of columns.
type documented struct {
	Name    string
	Partial bool              // "(selected columns)": the listed columns must exist, not all be listed
	Columns map[string]string // column -> documented type
	Order   []string
}

var (
	headingName = regexp.MustCompile("^### `([a-z_]+)(\\(([a-z_]+)\\))?`")
	columnRow   = regexp.MustCompile("^\\| `([a-z_0-9]+)` \\| ([a-z_ \\[\\]]+) \\|")
)

func parseSchemaDoc(md []byte) ([]documented, error) {
	var out []documented
	var cur *documented
	sc := bufio.NewScanner(bytes.NewReader(md))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			cur = nil
			if m := headingName.FindStringSubmatch(line); m != nil {
				name := m[1]
				if m[2] != "" {
					name += m[2]
				}
				out = append(out, documented{Name: name, Partial: strings.Contains(line, "(selected columns)"), Columns: map[string]string{}})
				cur = &out[len(out)-1]
			}
			continue
		}
		if cur == nil {
			continue
		}
		if m := columnRow.FindStringSubmatch(line); m != nil {
			if _, dup := cur.Columns[m[1]]; dup {
				return nil, fmt.Errorf("line %d: %s documents column %s twice", n, cur.Name, m[1])
			}
			cur.Columns[m[1]] = strings.TrimSpace(m[2])
			cur.Order = append(cur.Order, m[1])
		}
	}
	return out, sc.Err()
}

// mustDocument lists what an auditor queries; docs/schema.md must cover
// each, plus every table and view whose name starts with envelope or ledger.
var mustDocument = []string{
	"envelope", "envelope_attempt", "envelope_conflict", "envelope_replay",
	"ledger_account", "ledger_transaction", "ledger_entry", "ledger_balance",
	"envelope_audit", "ledger_transaction_audit", "ledger_payment_audit", "envelope_retry_stats",
	"envelope_conflict_audit", "envelope_replay_audit", "ledger_balance_at(ts)", "river_job",
}

func TestSchemaDocListsEveryColumn(t *testing.T) {
	t.Parallel()
	md, err := os.ReadFile(schemaDocPath)
	require.NoError(t, err)
	docs, err := parseSchemaDoc(md)
	require.NoError(t, err)
	byName := map[string]documented{}
	for _, d := range docs {
		require.NotContains(t, byName, d.Name, "%s is documented twice", d.Name)
		require.NotEmpty(t, d.Columns, "%s documents no columns", d.Name)
		byName[d.Name] = d
	}

	ctx := context.Background()
	pool := pgtest.NewPool(t)
	rows, err := pool.Query(ctx, `
		SELECT c.relname FROM pg_class c
		 WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p', 'v')
		   AND NOT c.relispartition -- documented with its table
		   AND (c.relname LIKE 'envelope%' OR c.relname LIKE 'ledger%')`)
	require.NoError(t, err)
	relations, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, name := range append(relations, mustDocument...) {
		require.Contains(t, byName, name, "docs/schema.md does not document %s", name)
	}

	for _, d := range docs {
		from := d.Name
		if strings.HasSuffix(from, "(ts)") {
			from = strings.TrimSuffix(from, "(ts)") + "(now())"
		}
		rows, err := pool.Query(ctx, `SELECT * FROM `+from+` LIMIT 0`)
		require.NoError(t, err, "docs/schema.md documents %s, which the database does not have", d.Name)
		// Copied: pgx reuses the descriptions' memory for the next query.
		fields := append([]pgconn.FieldDescription(nil), rows.FieldDescriptions()...)
		rows.Close()
		actual := map[string]string{}
		for _, f := range fields {
			var typ string
			require.NoError(t, pool.QueryRow(ctx, `SELECT format_type($1, NULL)`, f.DataTypeOID).Scan(&typ))
			actual[f.Name] = strings.ReplaceAll(typ, "timestamp with time zone", "timestamptz")
		}
		for col, typ := range d.Columns {
			require.Contains(t, actual, col, "docs/schema.md lists %s.%s, which does not exist", d.Name, col)
			require.Equal(t, actual[col], typ, "type of %s.%s", d.Name, col)
		}
		if d.Partial {
			continue
		}
		for _, f := range fields {
			require.Contains(t, d.Columns, f.Name, "docs/schema.md does not document %s.%s", d.Name, f.Name)
		}
		var order []string
		for _, f := range fields {
			order = append(order, f.Name)
		}
		require.Equal(t, order, d.Order, "docs/schema.md lists %s's columns out of order", d.Name)
	}
}
