//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package cli

import "net"

// hasPendingBytes cannot look at the socket here: it says no, and eviction
// relies on evictAfter alone.
func hasPendingBytes(net.Conn) bool { return false }
