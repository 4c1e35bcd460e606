package admin

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/inboxhq/inbox/internal/envelope"
)

// NotFoundError is returned when envelope ids do not exist. It matches
// envelope.ErrNotFound with errors.Is.
type NotFoundError struct {
	IDs []int64
}

func (e *NotFoundError) Error() string {
	if len(e.IDs) == 1 {
		return fmt.Sprintf("envelope %d not found", e.IDs[0])
	}
	return "envelopes " + JoinIDs(e.IDs, ", ") + " not found"
}

// Is makes errors.Is(err, envelope.ErrNotFound) true.
func (e *NotFoundError) Is(target error) bool { return target == envelope.ErrNotFound }

// PurgedError is returned when envelopes asked for by id cannot be replayed
// because retention dropped their body: there is nothing to process.
type PurgedError struct {
	IDs []int64
}

func (e *PurgedError) Error() string {
	return "envelope " + JoinIDs(e.IDs, ", ") + ": body dropped by retention, nothing to replay"
}

// ResolvedError is returned when envelopes asked for by id are resolved: an
// operator closed them (dealt with elsewhere), and a replay must not undo
// that silently. Un-resolving them first records who and why.
type ResolvedError struct {
	IDs []int64
}

func (e *ResolvedError) Error() string {
	return "envelope " + JoinIDs(e.IDs, ", ") + ": resolved (closed by an operator), not replayed; un-resolve it first (worker envelopes unresolve ID --reason ...)"
}

// JoinIDs formats envelope ids in decimal, separated by sep: the one
// spelling of an id list in errors and reports.
func JoinIDs(ids []int64, sep string) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(s, sep)
}
