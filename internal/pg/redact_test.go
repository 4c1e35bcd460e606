package pg_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/pg"
)

// Every form of DATABASE_URL a user may write keeps its password out of the
// redacted string. want, when set, is the exact output (so the redacted
// string stays useful for an operator); secret is what must not appear.
func TestRedactHidesThePasswordInEveryForm(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, in, secret, want string
	}{
		{"URL userinfo", "postgres://inbox:Sup3rS3cret@db.internal:5432/inbox?sslmode=require", "Sup3rS3cret",
			"postgres://inbox:xxxxx@db.internal:5432/inbox?sslmode=require"},
		{"postgresql scheme, escaped password", "postgresql://inbox:p%40ss%2Fw0rd%3F@db/inbox", "p%40ss%2Fw0rd%3F",
			"postgresql://inbox:xxxxx@db/inbox"},
		{"URL ?password=", "postgres://inbox@db:5432/inbox?sslmode=disable&password=QueryS3cret", "QueryS3cret",
			"postgres://inbox@db:5432/inbox?password=xxxxx&sslmode=disable"},
		{"URL ?PassWord= and sslpassword", "postgres://db/inbox?PassWord=Upp3rS3cret&sslpassword=KeyS3cret", "S3cret", ""},
		{"URL with both", "postgres://u:UserS3cret@db/inbox?password=QueryS3cret", "S3cret", "postgres://u:xxxxx@db/inbox?password=xxxxx"},
		{"URL several hosts", "postgres://u:MultiS3cret@h1:5432,h2:5433/inbox", "MultiS3cret", "postgres://u:xxxxx@h1:5432,h2:5433/inbox"},
		{"URL with a numeric password cut by #", "postgres://u:1234#5678@db/inbox", "5678", ""},
		{"URL with a numeric password cut by ?", "postgres://u:1234?5678@db/inbox", "5678", ""},
		{"URL with a numeric password cut by /", "postgres://u:1234/5678@db/inbox", "5678", ""},
		{"URL with a bad escape", "postgres://u:Bad%zzS3cret@db/inbox", "S3cret", ""},
		{"URL with a bad escape in the query", "postgres://db/inbox?password=Bad%zzS3cret", "S3cret", ""},
		{"keyword/value", "host=db port=5432 user=inbox password=KvS3cret dbname=inbox sslmode=disable", "KvS3cret",
			"host=db port=5432 user=inbox password=xxxxx dbname=inbox sslmode=disable"},
		{"keyword/value, spaces around =", "host = db password = SpacedS3cret dbname=inbox", "SpacedS3cret",
			"host=db password=xxxxx dbname=inbox"},
		{"keyword/value, quoted with spaces", "host=db password='Quoted S3cret with spaces' dbname=inbox", "S3cret",
			"host=db password=xxxxx dbname=inbox"},
		{"keyword/value, quoted with an escaped quote", `host=db password='it\'s S3cret' user=inbox`, "S3cret",
			"host=db password=xxxxx user=inbox"},
		{"keyword/value, bare with a backslash escape", `password=Back\ slashS3cret host=db`, "S3cret", "password=xxxxx host=db"},
		{"keyword/value, upper case key", "host=db PASSWORD=UpperS3cret", "UpperS3cret", "host=db PASSWORD=xxxxx"},
		{"keyword/value, sslpassword", "host=db sslkey=/k sslpassword=KeyPassS3cret", "KeyPassS3cret", "host=db sslkey=/k sslpassword=xxxxx"},
		{"keyword/value, tabs and newlines", "host=db\n\tpassword=TabS3cret\n", "TabS3cret", "host=db password=xxxxx"},
		{"keyword/value, unterminated quote", "host=db password='Unterminated S3cret", "S3cret", ""},
		{"keyword/value, a word without =", "host=db password S3cretWord", "S3cretWord", ""},
		{"keyword/value, dbname that is a URL", "dbname='postgres://u:NestedS3cret@db/inbox' connect_timeout=2", "NestedS3cret",
			"dbname=postgres://u:xxxxx@db/inbox connect_timeout=2"},
		{"keyword/value, dbname that is keyword/value", `dbname='host=db password=InnerS3cret'`, "InnerS3cret", ""},
		{"garbage", "not a connection string PwS3cret", "PwS3cret", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := pg.Redact(tc.in)
			require.NotContains(t, got, tc.secret)
			require.NotEmpty(t, got)
			if tc.want != "" {
				require.Equal(t, tc.want, got)
			}
			// Whatever password pgx itself reads from the string must not
			// show either.
			if cfg, err := pgconn.ParseConfig(tc.in); err == nil && cfg.Password != "" {
				require.NotContains(t, got, cfg.Password)
			}
		})
	}
	require.Equal(t, "", pg.Redact(""))
	require.Equal(t, "postgres://inbox@db/inbox", pg.Redact("postgres://inbox@db/inbox"), "nothing to hide: unchanged")
}

// FuzzRedact checks that no password pgx would use survives Redact.
func FuzzRedact(f *testing.F) {
	for _, s := range []string{
		"postgres://u:pw@h/db?password=pw2", "host=h password='a b' dbname=x", `password=a\ b`,
		"postgresql://u:1#2@h", "dbname='postgres://u:pw@h/d'", "host=h password=",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := pg.Redact(s)
		cfg, err := pgconn.ParseConfig(s)
		if err != nil || len(cfg.Password) < 4 || strings.Contains("xxxxx", cfg.Password) {
			return
		}
		if strings.Contains(got, cfg.Password) {
			t.Fatalf("Redact(%q) = %q keeps the password %q", s, got, cfg.Password)
		}
	})
}
