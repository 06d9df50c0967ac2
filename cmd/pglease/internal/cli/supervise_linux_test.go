package cli

import (
	"os/exec"
	"syscall"
	"testing"
)

// A process group whose only member is a zombie (dead, not yet reaped)
// counts as gone; one with a running member does not.
func TestGroupAliveIgnoresZombies(t *testing.T) {
	start := func(arg string) *exec.Cmd {
		cmd := exec.Command("sh", "-c", arg)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	running := start("exec sleep 300")
	defer func() { _ = running.Process.Kill(); _ = running.Wait() }()
	if !groupAlive(running.Process.Pid) {
		t.Fatal("a group with a running member counts as gone")
	}

	zombie := start("exit 0")
	defer func() { _ = zombie.Wait() }()
	pgid := zombie.Process.Pid
	waitFor(t, "the short-lived member to exit", func() bool { running, _ := groupRunning(pgid); return !running })
	// Not reaped: the kernel still lists the group.
	if err := syscall.Kill(-pgid, 0); err != nil {
		t.Fatalf("kill(-pgid, 0) = %v: the zombie was reaped early", err)
	}
	if groupAlive(pgid) {
		t.Fatal("a group of one zombie counts as alive")
	}
}
