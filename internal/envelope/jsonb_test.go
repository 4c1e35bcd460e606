package envelope_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/pgtest"
)

// jsonbAccepts asks PostgreSQL whether jsonb takes b, the way the store sends
// it (a parameter cast to jsonb).
func jsonbAccepts(t testing.TB, pool *pgxpool.Pool, b []byte) bool {
	t.Helper()
	var n int
	err := pool.QueryRow(context.Background(), `SELECT octet_length($1::text::jsonb::text)`, string(b)).Scan(&n)
	return err == nil
}

// jsonbCases are valid JSON for encoding/json. want is JSONBSafe's answer;
// pg is PostgreSQL 15's (JSONBSafe may say false where the server would
// accept: that only drops the parsed copy).
var jsonbCases = []struct {
	name     string
	body     string
	want, pg bool
}{
	{"plain object", `{"id":"evt_1","amount":2000}`, true, true},
	{"emoji as a surrogate pair", `{"note":"Thanks \ud83d\ude00"}`, true, true},
	{"emoji as UTF-8", `{"note":"Thanks 😀"}`, true, true},
	{"lone high surrogate (a string cut inside an emoji)", `{"note":"Thanks \ud83d"}`, false, false},
	{"lone high surrogate then text", `{"note":"\ud83dx"}`, false, false},
	{"high surrogate then another high", `{"note":"\ud83d\ud83d"}`, false, false},
	{"high surrogate then a non-surrogate escape", `{"note":"\ud83d\u0041"}`, false, false},
	{"lone low surrogate", `{"note":"\ude00"}`, false, false},
	{"lone surrogate in a key", `{"\ud800":1}`, false, false},
	{"NUL escape", `{"note":"a\u0000b"}`, false, false},
	{"escaped backslash before u0000 is text", `{"note":"a\\u0000b"}`, true, true},
	{"escaped quote then NUL", `{"note":"\"\u0000"}`, false, false},
	{"number far beyond numeric", `{"amount":1e1000000}`, false, false},
	{"negative exponent beyond numeric's scale", `{"amount":1e-1000000}`, false, false},
	{"zero with a huge negative exponent", `{"amount":0e-20000}`, false, false},
	{"largest scale", `{"amount":1e-1000}`, true, true},
	{"exponent past 1000 (accepted by PostgreSQL 15, refused by older servers)", `{"amount":1e1001}`, false, true},
	{"big exponent, upper case", `[1E+999]`, true, true},
	{"long integer", `[` + "1" + strings.Repeat("0", 131071) + `]`, true, true},
	{"integer past numeric's weight", `[` + "1" + strings.Repeat("0", 131072) + `]`, false, false},
	{"integer with leading zeros in the fraction", `[0.` + strings.Repeat("0", 16382) + `1]`, true, true},
	{"fraction past numeric's scale", `[0.` + strings.Repeat("0", 16383) + `1]`, false, false},
	{"trailing zeros count in the scale", `[1.` + strings.Repeat("0", 16384) + `]`, false, false},
	{"trailing zeros within the scale", `[1.` + strings.Repeat("0", 16383) + `]`, true, true},
	{"negative zero", `[-0.0e-5]`, true, true},
	{"nested 1000 deep", strings.Repeat("[", 1000) + strings.Repeat("]", 1000), true, true},
	{"nested 1001 deep", strings.Repeat("[", 1001) + strings.Repeat("]", 1001), false, true},
	{"invalid UTF-8 in a string", "{\"note\":\"\xff\"}", false, false},
	{"not JSON", `id=1&total=2`, false, false},
	{"empty", ``, false, false},
}

func TestJSONBSafeAgreesWithPostgreSQL(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	for _, tc := range jsonbCases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, envelope.JSONBSafe([]byte(tc.body)))
			require.Equal(t, tc.pg, jsonbAccepts(t, pool, []byte(tc.body)), "PostgreSQL's answer changed")
		})
	}
}

// FuzzJSONBSafe checks that JSONBSafe never says true for a body jsonb
// refuses (that would answer 500 to a validly signed delivery on every
// retry).
func FuzzJSONBSafe(f *testing.F) {
	pool := pgtest.NewPool(f)
	for _, tc := range jsonbCases {
		if len(tc.body) < 4096 {
			f.Add([]byte(tc.body))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if envelope.JSONBSafe(b) && !jsonbAccepts(t, pool, b) {
			t.Fatalf("JSONBSafe(%q) is true but jsonb refuses it", b)
		}
	})
}
