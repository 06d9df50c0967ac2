//go:build darwin || dragonfly || freebsd || netbsd || openbsd

package cli

import (
	"os"

	"golang.org/x/sys/unix"
)

// diagThread does nothing here: a thread's signal mask cannot be set
// from Go, so mutedTerminal keeps the writes from raising SIGTTOU.
func diagThread() {}

// mutedTerminal reports whether f is a terminal with tostop whose
// foreground process group is not pglease's: a write would raise SIGTTOU
// (see diagWriter), so the line is dropped. The terminal may change its
// foreground group between this check and the write; the write then
// raises SIGTTOU until pglease is back in the foreground.
func mutedTerminal(f *os.File) (muted bool) {
	rc, err := f.SyscallConn() // not f.Fd, which would make f blocking
	if err != nil {
		return false
	}
	_ = rc.Control(func(fd uintptr) {
		t, err := unix.IoctlGetTermios(int(fd), unix.TIOCGETA)
		if err != nil || t.Lflag&unix.TOSTOP == 0 {
			return
		}
		fg, err := unix.IoctlGetInt(int(fd), unix.TIOCGPGRP)
		muted = err == nil && fg != unix.Getpgrp()
	})
	return muted
}
