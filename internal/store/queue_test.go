package store

import (
	"context"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// A release wakes the first live waiter on its client's channel, but not
// again within WakeEvery of the last time it did: a waiter woken in vain
// looks again by itself.
func TestReleaseWakesTheFirstWaiterAtMostEveryWakeEvery(t *testing.T) {
	ctx := testCtx(t)
	s, db := migrated(t)
	ns, err := s.LockNamespace()
	if err != nil {
		t.Fatal(err)
	}
	const waiter = "00000000000000aa"
	conn := batchConn(t)
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1::text || $2::text, 1))`, ns, waiter); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, ListenSQL(ClientChannel(waiter))); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, `INSERT INTO `+s.Names.QualifiedWaiters()+` VALUES ('n', $1, now() - interval '1 second', now() + interval '1 hour')`, waiter)
	release := func() {
		t.Helper()
		// The waiter is not yet promised the lease (FairAfter), so the
		// holder may take it.
		r, err := s.Acquire(ctx, db, AcquireArgs{Name: "n", Owner: "o", TTL: time.Minute, Client: "c1", FairAfter: time.Hour})
		if err != nil || !r.Acquired {
			t.Fatalf("acquire: %+v, %v", r, err)
		}
		if _, err := s.Release(ctx, db, "n", r.Token, false); err != nil {
			t.Fatal(err)
		}
	}
	woken := func() bool {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		n, err := conn.WaitForNotification(wctx)
		if err != nil {
			return false // none came: a missing one is what a broken rule shows
		}
		if n.Payload != "n" {
			t.Fatalf("notification %q, want the name", n.Payload)
		}
		return true
	}
	release()
	if !woken() {
		t.Fatal("the first release did not wake the first waiter")
	}
	// Woken just now (made certain, whatever the machine's speed).
	pgtest.Exec(t, `UPDATE `+s.Names.QualifiedWaiters()+` SET notified_at = clock_timestamp() + interval '1 hour'`)
	release()
	if woken() {
		t.Fatal("a release woke the first waiter again within WakeEvery")
	}
	pgtest.Exec(t, `UPDATE `+s.Names.QualifiedWaiters()+` SET notified_at = now() - interval '1 second'`)
	release()
	if !woken() {
		t.Fatal("a release did not wake the first waiter once WakeEvery had passed")
	}
}
