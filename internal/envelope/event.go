package envelope

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// FirstOfShopifyEvent returns the id of the source's lowest-numbered Shopify
// envelope whose X-Shopify-Event-Id header is eventID, when that is not id
// itself; ok is false when id is the first. Shopify may send one event under
// several X-Shopify-Webhook-Id values (its "Ignore duplicate webhooks"
// guidance: dedupe on X-Shopify-Event-Id): every delivery is stored, the
// first is the primary and every later one a duplicate of it. Served by the
// envelope_shopify_event_idx index.
func FirstOfShopifyEvent(ctx context.Context, tx pgx.Tx, source, eventID string, id int64) (int64, bool, error) {
	var first int64
	err := tx.QueryRow(ctx, `
		SELECT id FROM envelope
		 WHERE provider = 'shopify' AND source = $1 AND headers->>'X-Shopify-Event-Id' = $2 AND id < $3
		 ORDER BY id LIMIT 1`, source, eventID, id).Scan(&first)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("look up the first envelope of Shopify event %q: %w", eventID, err)
	}
	return first, true, nil
}
