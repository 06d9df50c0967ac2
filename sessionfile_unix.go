//go:build unix

package pglease

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"syscall"
)

// dupConn duplicates the descriptor of c's socket (under TLS, of the
// connection beneath). The copy shares the socket's open file description,
// so it is left in non-blocking mode: os.NewFile remembers that it did not
// set the mode itself, and Fd, which os/exec calls on files it passes to a
// child, keeps it so instead of switching the socket pgx uses to blocking.
func dupConn(c net.Conn) (*os.File, error) {
	if t, ok := c.(*tls.Conn); ok {
		c = t.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("pglease: the dedicated connection (%T) has no file descriptor to share", c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("pglease: share the dedicated connection: %w", err)
	}
	var fd int
	var dupErr error
	if err := raw.Control(func(s uintptr) {
		syscall.ForkLock.RLock()
		fd, dupErr = syscall.Dup(int(s))
		if dupErr == nil {
			syscall.CloseOnExec(fd)
		}
		syscall.ForkLock.RUnlock()
	}); err != nil {
		return nil, fmt.Errorf("pglease: share the dedicated connection: %w", err)
	}
	if dupErr != nil {
		return nil, fmt.Errorf("pglease: duplicate the dedicated connection's descriptor: %w", dupErr)
	}
	return os.NewFile(uintptr(fd), "pglease-session"), nil
}
