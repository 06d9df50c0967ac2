package pgtest

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// Child starts the test binary again as a child process that runs no test
// (its TestMain recognises it by a variable of env and runs its own main),
// with env added to the environment and its output on the test's stderr.
// When the test ends the child gets SIGTERM, and SIGKILL if it has not
// exited within Patience. The multi-process tests of the nested modules
// (a replica, a pod, a worker each) start their processes with it.
func Child(t testing.TB, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(Patience):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return cmd
}
