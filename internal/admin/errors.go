package admin

import (
	"fmt"
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
	s := make([]string, len(e.IDs))
	for i, id := range e.IDs {
		s[i] = fmt.Sprint(id)
	}
	return "envelopes " + strings.Join(s, ", ") + " not found"
}

// Is makes errors.Is(err, envelope.ErrNotFound) true.
func (e *NotFoundError) Is(target error) bool { return target == envelope.ErrNotFound }

// PurgedError is returned when envelopes asked for by id cannot be replayed
// because retention dropped their body: there is nothing to process.
type PurgedError struct {
	IDs []int64
}

func (e *PurgedError) Error() string {
	s := make([]string, len(e.IDs))
	for i, id := range e.IDs {
		s[i] = fmt.Sprint(id)
	}
	return "envelope " + strings.Join(s, ", ") + ": body dropped by retention, nothing to replay"
}
