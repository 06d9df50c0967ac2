//go:build unix

package pglease

import (
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/pglease/pglease/internal/pgtest"
)

// A copy of the session's descriptor, held by another process, keeps the
// session (and so a fast-failover lease) alive after this process's own
// socket is gone, until that process exits; and handing it over leaves the
// client's connection working.
func TestSessionFileKeepsTheSessionUntilEveryCopyIsClosed(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	other := testClient(t, Config{Table: c.cfg.Table})
	if err := c.migrate(ctx); err != nil {
		t.Fatal(err)
	}

	plain, err := c.Acquire(ctx, "plain")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.SessionFile(); !errors.Is(err, ErrSessionUnavailable) {
		t.Fatalf("SessionFile of a plain lease: %v, want ErrSessionUnavailable", err)
	}

	l, err := c.Acquire(ctx, "sf", WithFastFailover())
	if err != nil {
		t.Fatal(err)
	}
	// Both slots of a semaphore, on the same session.
	for range 2 {
		if _, err := c.Acquire(ctx, "sem", WithFastFailover(), WithSlots(2)); err != nil {
			t.Fatal(err)
		}
	}
	f, err := l.SessionFile()
	if err != nil {
		t.Fatal(err)
	}
	holder := exec.Command("sleep", "300")
	holder.ExtraFiles = []*os.File{f}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })

	// Passing the copy to a child did not make the client's socket
	// blocking: the session still answers within its bounds.
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("renewal after handing the descriptor over: %v", err)
	}
	sess, _ := c.session()
	sess.mu.Lock()
	sock := sess.sock
	sess.mu.Unlock()
	pid := pgtest.Value[int](t, "SELECT session_pid FROM "+c.cfg.Table+" WHERE name = 'sf'")

	// This process's socket goes without a word to the server, as when
	// the process is killed: the lease ends here, the session does not.
	_ = sock.Close()
	pgtest.Receive(t, l.Context().Done(), "the lease to end with its socket")
	if _, err := other.TryAcquire(ctx, "sf", WithFastFailover()); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("a waiter got the lease while a copy of the holder's session lived: %v", err)
	}
	if _, err := other.TryAcquire(ctx, "sem", WithFastFailover(), WithSlots(2)); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("a waiter got a slot while a copy of the holder's session lived: %v", err)
	}
	if n := pgtest.Value[int](t, "SELECT count(*)::int FROM pg_stat_activity WHERE pid = $1", pid); n != 1 {
		t.Fatalf("the holder's backend %d is gone while a copy of its socket lives", pid)
	}

	// The last copy goes: the session ends and the lease fails over.
	_ = holder.Process.Kill()
	_ = holder.Wait()
	for _, w := range []struct {
		name string
		opts []Option
	}{{"sf", []Option{WithFastFailover()}}, {"sem", []Option{WithFastFailover(), WithSlots(2)}}} {
		pgtest.WaitFor(t, pgtest.Patience, "a waiter to take "+w.name+" over once the last copy closed", func() bool {
			n, err := other.TryAcquire(ctx, w.name, w.opts...)
			if err == nil {
				_ = n.Release(ctx)
			}
			return err == nil
		})
	}
}
