//go:build unix

package cli_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestFastFailoverAfterHolderSIGKILL: with --fast-failover a waiter takes
// over within a second of the holder's pglease being SIGKILLed (its
// database session ends), not after the TTL.
func TestFastFailoverAfterHolderSIGKILL(t *testing.T) {
	env, table := tableEnv(t)
	dir := t.TempDir()
	mark := filepath.Join(dir, "held")
	holder := start(t, env, "run", "ff", "--fast-failover", "--ttl", "10s", "--table", table, "--",
		"sh", "-c", "echo $PGLEASE_TOKEN > "+mark+"; exec sleep 60")
	waitFor(t, 5*time.Second, "the holder's command", func() bool { _, err := os.Stat(mark); return err == nil })
	waiter := start(t, env, "run", "ff", "--wait", "--fast-failover", "--ttl", "10s", "--table", table, "--", "true")
	time.Sleep(500 * time.Millisecond) // let the waiter block on the holder
	killed := time.Now()
	holder.signal(syscall.SIGKILL)
	if code := waiter.wait(15 * time.Second); code != 0 {
		t.Fatalf("waiter exit %d: %s", code, waiter.stderr)
	}
	took := time.Since(killed)
	t.Logf("failover took %s", took)
	if took > 2*time.Second {
		t.Errorf("failover took %s, want well under the 10s TTL", took)
	}
}
