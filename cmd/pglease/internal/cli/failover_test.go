//go:build unix

package cli_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// TestFastFailoverAfterHolderSIGKILL: with --fast-failover a waiter takes
// over when the holder's pglease is SIGKILLed (its database session ends),
// before the holder's lease could have expired.
func TestFastFailoverAfterHolderSIGKILL(t *testing.T) {
	env, table := tableEnv(t)
	dir := t.TempDir()
	held, took := filepath.Join(dir, "held"), filepath.Join(dir, "took")
	holder := start(t, env, "run", "ff", "--fast-failover", "--ttl", "10s", "--table", table, "--",
		"sh", "-c", "echo $PGLEASE_TOKEN > "+held+"; exec sleep 300")
	oldToken := readInt(t, held)
	waiter := start(t, env, "run", "ff", "--wait", "--fast-failover", "--ttl", "10s", "--owner", "ff-waiter", "--table", table, "--",
		"sh", "-c", "echo $PGLEASE_TOKEN > "+took+"; exec sleep 300")
	// The waiter waits on the holder's session lock, not on the row's expiry.
	waitFor(t, "the waiter to block on the holder's session lock", func() bool {
		return pgtest.Value[int](t, "SELECT count(*)::int FROM pg_stat_activity WHERE application_name = 'pglease ff-waiter' AND wait_event = 'advisory'") > 0
	})
	// The row's expiry as it stands before the kill; a renewal can only
	// move it later.
	expires := pgtest.Value[time.Time](t, "SELECT expires_at FROM "+table+" WHERE name = 'ff' AND token = $1", oldToken)
	killed := time.Now()
	holder.signal(syscall.SIGKILL)
	newToken := readInt(t, took)
	t.Logf("failover took %s", time.Since(killed).Round(time.Millisecond))
	if newToken <= oldToken {
		t.Fatalf("the waiter's token %d is not above the holder's %d", newToken, oldToken)
	}
	acquired := pgtest.Value[time.Time](t, "SELECT acquired_at FROM "+table+" WHERE name = 'ff' AND token = $1", newToken)
	if !acquired.Before(expires) {
		t.Errorf("the waiter acquired at %s, not before the killed holder's lease expired at %s: the takeover waited for the TTL",
			acquired.Format(time.StampMicro), expires.Format(time.StampMicro))
	}
	t.Logf("the waiter acquired %s before the killed holder's lease would have expired", expires.Sub(acquired).Round(time.Millisecond))
	waiter.signal(syscall.SIGTERM)
	if code := waiter.wait(); code != 128+15 {
		t.Errorf("waiter exit %d, want 143 (its command killed by the forwarded SIGTERM): %s", code, waiter.stderr)
	}
}

// When a fast-failover holder's pglease is SIGKILLed, its command's whole
// process group is gone before the waiter's command starts: the database
// session, which the waiter waits on, ends only once the supervisor has
// reaped the group. The group here is slow to die (a process with half a
// gigabyte to free) and the machine is loaded; the waiter's command lists
// /proc first thing, and none of the holder's processes may be in it.
func TestFastFailoverKilledHoldersGroupIsGoneBeforeTheWaiterRuns(t *testing.T) {
	env, table := tableEnv(t)
	for round := range 3 {
		dir := t.TempDir()
		pids, snapshot := filepath.Join(dir, "pids"), filepath.Join(dir, "snapshot")
		holder := start(t, env, "run", "ff-order", "--fast-failover", "--ttl", "10s", "--table", table, "--", "sh", "-c",
			`perl -e '$| = 1; $x = "a" x (512 << 20); print "$$\n"; sleep 300' >> `+pids+` &
			 for i in 1 2 3 4 5; do sleep 300 & echo $! >> `+pids+`; done
			 echo $$ >> `+pids+`; wait`)
		var group []string
		waitFor(t, "the holder's group to start", func() bool {
			b, _ := os.ReadFile(pids)
			group = strings.Fields(string(b))
			return len(group) == 7
		})
		waiter := start(t, env, "run", "ff-order", "--wait", "--fast-failover", "--ttl", "10s", "--owner", "ff-order-waiter", "--table", table, "--",
			"sh", "-c", "ls /proc > "+snapshot+"; for p in $(cat "+pids+"); do cat /proc/$p/stat; done > "+snapshot+".stat 2>/dev/null; true")
		waitFor(t, "the waiter to block on the holder's session lock", func() bool {
			return pgtest.Value[int](t, "SELECT count(*)::int FROM pg_stat_activity WHERE application_name = 'pglease ff-order-waiter' AND wait_event = 'advisory'") > 0
		})
		stopLoad := loadMachine(t)
		killed := time.Now()
		holder.signal(syscall.SIGKILL)
		if code := waiter.wait(); code != 0 {
			t.Fatalf("round %d: the waiter exited %d: %s", round, code, waiter.stderr)
		}
		took := time.Since(killed)
		stopLoad()
		b, err := os.ReadFile(snapshot)
		if err != nil {
			t.Fatal(err)
		}
		listed := strings.Fields(string(b))
		for _, pid := range group {
			if slices.Contains(listed, pid) {
				stat, _ := os.ReadFile(snapshot + ".stat")
				t.Fatalf("round %d: the waiter's command ran while process %s of the killed holder's group existed:\n%s", round, pid, stat)
			}
		}
		t.Logf("round %d: the waiter's command ran alone %s after the kill", round, took.Round(time.Millisecond))
	}
}

// loadMachine keeps every CPU busy until the returned function is called.
func loadMachine(t *testing.T) (stop func()) {
	var loops []*exec.Cmd
	for range runtime.NumCPU() {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		loops = append(loops, c)
	}
	stop = func() {
		for _, c := range loops {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
		loops = nil
	}
	t.Cleanup(stop)
	return stop
}
