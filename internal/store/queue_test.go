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
	register := func(name string) {
		t.Helper()
		pgtest.Exec(t, `INSERT INTO `+s.Names.QualifiedWaiters()+` VALUES ($1, $2, now() - interval '1 second', now() + interval '1 hour')`, name, waiter)
	}
	release := func(name string) {
		t.Helper()
		// The waiter is not yet promised the lease (FairAfter), so the
		// holder may take it.
		r, err := s.Acquire(ctx, db, AcquireArgs{Name: name, Owner: "o", TTL: time.Minute, Client: "c1", FairAfter: time.Hour})
		if err != nil || !r.Acquired {
			t.Fatalf("acquire %s: %+v, %v", name, r, err)
		}
		if _, err := s.Release(ctx, db, name, r.Token, false); err != nil {
			t.Fatal(err)
		}
	}
	// next is the payload of the next notification. Notifications arrive in
	// commit order, so one that should not have been sent shows up before
	// the one expected.
	next := func() string {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, pgtest.Patience)
		defer cancel()
		n, err := conn.WaitForNotification(wctx)
		if err != nil {
			t.Fatalf("no notification: %v", err)
		}
		return n.Payload
	}
	register("n")
	release("n")
	if got := next(); got != "n" {
		t.Fatalf("the first release woke the waiter for %q, want n", got)
	}
	// Woken just now (made certain, whatever the machine's speed): the
	// next release of n does not wake it; a release of m, which it has
	// not been woken for, does.
	pgtest.Exec(t, `UPDATE `+s.Names.QualifiedWaiters()+` SET notified_at = clock_timestamp() + interval '1 hour'`)
	register("m")
	release("n")
	release("m")
	if got := next(); got != "m" {
		t.Fatalf("a release woke the first waiter for %q again within WakeEvery", got)
	}
	pgtest.Exec(t, `UPDATE `+s.Names.QualifiedWaiters()+` SET notified_at = now() - interval '1 second'`)
	release("n")
	if got := next(); got != "n" {
		t.Fatalf("got %q: a release did not wake the first waiter once WakeEvery had passed", got)
	}
}
