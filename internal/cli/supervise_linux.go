package cli

import "syscall"

const prSetChildSubreaper = 36 // PR_SET_CHILD_SUBREAPER, linux/prctl.h

// becomeSubreaper makes orphaned descendants re-parent to this process
// instead of init, so the supervisor can reap them and tell when the
// command's process group is really gone.
func becomeSubreaper() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
}

// setPdeathsig makes the kernel SIGKILL a demo worker when the demo dies.
func setPdeathsig(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
