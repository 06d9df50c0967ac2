//go:build unix

package cli_test

import (
	"path/filepath"
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
