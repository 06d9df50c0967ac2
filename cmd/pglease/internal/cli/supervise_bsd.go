//go:build unix && !linux

package cli

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// becomeSubreaper is Linux-only; elsewhere orphans go to init, which reaps
// them, so the group still empties.
func becomeSubreaper() {}

// setPdeathsig is Linux-only.
func setPdeathsig(*syscall.SysProcAttr) {}

// groupRunning cannot tell zombies apart here: every member counts.
func groupRunning(int) (running, known bool) { return false, false }

// escaped cannot find descendants that left the command's group here:
// without a subreaper they are re-parented to init. The job is the group.
func escaped(int) []int { return nil }

// clockNow reads the clock the supervisor enforces deadlines by, in
// nanoseconds: CLOCK_MONOTONIC, the same in every process.
func clockNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("pglease: clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	return ts.Nano()
}
