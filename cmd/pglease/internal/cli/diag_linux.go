package cli

import (
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// diagThread locks the calling goroutine to its thread and blocks SIGTTOU
// there: a write of that thread to a terminal with tostop, from a
// background process group, then goes through instead of raising SIGTTOU
// (see diagWriter). Other threads, and the processes pglease starts, keep
// their signal mask.
func diagThread() {
	runtime.LockOSThread()
	var set unix.Sigset_t
	bits := uint(unsafe.Sizeof(set.Val[0]) * 8)
	n := uint(unix.SIGTTOU - 1)
	set.Val[n/bits] |= 1 << (n % bits)
	_ = unix.PthreadSigmask(unix.SIG_BLOCK, &set, nil)
}

// mutedTerminal is always false here: diagThread lets the writes through.
func mutedTerminal(*os.File) bool { return false }
