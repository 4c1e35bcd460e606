package pg

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNoSchema is wrapped by ExplainSchema's error: the database answered,
// but it does not hold the inbox's tables.
var ErrNoSchema = errors.New("the database has no inbox schema")

// ExplainSchema turns a missing-table error (SQLSTATE 42P01) into one that
// says what to do (see NoSchema). Any other error is returned as is.
func ExplainSchema(err error, databaseURL string) error {
	var pgErr *pgconn.PgError
	if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "42P01" {
		return err
	}
	return NoSchema(databaseURL, err.Error())
}

// NoSchema is the error for a database that answers without the inbox's
// tables: connected to the wrong database, or to one never migrated. It
// wraps ErrNoSchema, names what was missing (detail) and shows databaseURL
// redacted.
func NoSchema(databaseURL, detail string) error {
	return fmt.Errorf("%w (%s). Is DATABASE_URL the inbox's database? For make run's, eval \"$(make -s env)\"; "+
		"for a new one, apply the schema with 'worker migrate'. DATABASE_URL is %s", ErrNoSchema, detail, Redact(databaseURL))
}
