//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package cli

import (
	"net"
	"syscall"
)

// hasPendingBytes reports whether c's socket holds received bytes that no
// one has read yet: a keep-alive client's next request that has arrived
// while the goroutine that will read it has not yet run (a loaded machine).
// Such a connection is not idle, and closing it would reset a request the
// client has sent. It never blocks and never consumes the bytes.
func hasPendingBytes(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	pending := false
	var buf [1]byte
	// Control, not Read: Read would wait for the read lock that the
	// server's goroutine, blocked reading this connection, holds.
	_ = raw.Control(func(fd uintptr) {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		pending = err == nil && n > 0
	})
	return pending
}
