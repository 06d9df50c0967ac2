package cli

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

const prSetChildSubreaper = 36 // PR_SET_CHILD_SUBREAPER, linux/prctl.h

// becomeSubreaper makes orphaned descendants re-parent to this process
// instead of init, so the supervisor can reap them and tell when the
// command's process group is really gone.
func becomeSubreaper() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
}

// setPdeathsig makes the kernel SIGKILL a demo worker when the demo dies.
func setPdeathsig(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }

// groupRunning reports whether a member of the process group is not a
// zombie, from /proc; known is false when /proc cannot tell.
func groupRunning(pgid int) (running, known bool) {
	d, err := os.Open("/proc")
	if err != nil {
		return false, false
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return false, false
	}
	for _, n := range names {
		if n[0] < '0' || n[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + n + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parens.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			return false, false
		}
		f := bytes.Fields(b[i+1:])
		if len(f) < 4 {
			return false, false
		}
		if g, _ := strconv.Atoi(string(f[2])); g == pgid && f[0][0] != 'Z' && f[0][0] != 'X' {
			return true, true
		}
	}
	return false, true
}
