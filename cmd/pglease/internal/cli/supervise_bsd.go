//go:build unix && !linux

package cli

import "syscall"

// becomeSubreaper is Linux-only; elsewhere orphans go to init, which reaps
// them, so the group still empties.
func becomeSubreaper() {}

// setPdeathsig is Linux-only.
func setPdeathsig(*syscall.SysProcAttr) {}

// groupRunning cannot tell zombies apart here: every member counts.
func groupRunning(int) (running, known bool) { return false, false }
