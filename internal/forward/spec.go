package forward

import "github.com/inboxhq/inbox/internal/forward/forwardspec"

// The destination type and its rules live in forwardspec (a leaf package,
// so config decodes into them without importing forward); these names
// keep them at hand here.
type (
	// Destination is one endpoint a source's deliveries are forwarded to.
	Destination = forwardspec.Destination
	// Mode is whether a destination receives deliveries besides or instead
	// of the built-in handler.
	Mode = forwardspec.Mode
)

// Forwarding modes and limits (forwardspec's).
const (
	Besides        = forwardspec.Besides
	Instead        = forwardspec.Instead
	DefaultTimeout = forwardspec.DefaultTimeout
)
