package envelope

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// FinishManySQL is FinishMany's statement, for its plan's test.
const FinishManySQL = finishManySQL

// ConflictLookups runs ingest's two lookups of the conflict path in tx (the
// stored envelopes of (sources[j], ids[j]); the holders of (sources[j],
// digests[j])) and returns how many of each it found, for their plans' test.
func ConflictLookups(ctx context.Context, tx pgx.Tx, sources, ids []string, digests [][]byte) (stored, held int, err error) {
	s, err := lookupStoredKeys(ctx, tx, sources, ids)
	if err != nil {
		return 0, 0, err
	}
	h, err := digestHolders(ctx, tx, sources, digests)
	return len(s), len(h), err
}
