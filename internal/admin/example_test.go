package admin_test

import (
	"fmt"
	"time"

	"github.com/inboxhq/inbox/internal/admin"
	"github.com/inboxhq/inbox/internal/envelope"
)

// A Filter becomes a parameterized WHERE clause: values travel as
// arguments, never inside the SQL text. A relative bound ("24h": received in
// the last 24 hours) resolves against the database's clock
// (envelope.ReadClock), and bounds the ids too: a window reads only its
// partitions.
func ExampleFilter_Where() {
	since, err := admin.ParseBound("24h")
	if err != nil {
		panic(err)
	}
	f := admin.Filter{Source: "stripe", Status: envelope.StatusFailed, Since: since}
	if err := f.Validate(); err != nil {
		panic(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	where, args := f.Where(envelope.Clock{Now: now})
	fmt.Println(where)
	fmt.Println(args...)
	// Output:
	// source = $1 AND status = $2 AND received_at >= $3 AND id >= $4
	// stripe failed 2026-02-28 12:00:00 +0000 UTC 203888472883200
}

// Bounds accept RFC 3339 times and ages, whole days included.
func ExampleParseBound() {
	for _, s := range []string{"2026-01-02T15:04:05Z", "90m", "7d"} {
		b, err := admin.ParseBound(s)
		if err != nil {
			panic(err)
		}
		fmt.Println(b)
	}
	// Output:
	// 2026-01-02T15:04:05Z
	// 1h30m ago
	// 7d ago
}
