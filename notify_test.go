package pglease

import (
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// A waiter is woken by the release notification, not by polling: the
// fallback poll and the holder's remaining time are both an hour.
func TestWaiterWakesOnReleaseWithoutPolling(t *testing.T) {
	ctx := testCtx(t)
	a := testClient(t, Config{})
	log := newEventLog()
	b := testClient(t, Config{Table: a.cfg.Table, PollInterval: time.Hour, Observer: log})
	l, err := a.TryAcquire(ctx, "n", WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lease, 1)
	go func() {
		l2, err := b.Acquire(ctx, "n")
		if err != nil {
			t.Error(err)
		}
		got <- l2
	}()
	log.await(t, "the waiter to find the name held", is(EventContended, "n"))
	pgtest.WaitFor(t, patience, "the waiter's client to listen", func() bool { return b.conn.sess.Load().currentEpoch() != 0 })
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := pgtest.Receive(t, got, "the waiter to be woken by the release notification")
	if l2 == nil || l2.Token() <= l.Token() {
		t.Fatalf("waiter got %v", l2)
	}
	_ = l2.Release(ctx)
}

// The listener connection is killed while a waiter waits; the client
// reconnects, listens again, and the waiter is still woken by a release.
func TestDroppedListenerIsRecovered(t *testing.T) {
	ctx := testCtx(t)
	a := testClient(t, Config{})
	// The epochs of the listener connection at which the waiter found the
	// name held.
	contended := make(chan uint64, 100)
	var b *Client
	b = testClient(t, Config{Table: a.cfg.Table, PollInterval: time.Hour, Owner: "listener-victim",
		Observer: observerFunc(func(e Event) {
			if e.Kind == EventContended && e.Name == "n" {
				select {
				case contended <- b.conn.sess.Load().currentEpoch():
				default:
				}
			}
		})})
	l, err := a.TryAcquire(ctx, "n", WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lease, 1)
	go func() {
		l2, _ := b.Acquire(ctx, "n")
		got <- l2
	}()
	pgtest.Receive(t, contended, "the waiter to find the name held")
	var before uint64
	pgtest.WaitFor(t, patience, "the waiter's client to listen", func() bool {
		before = b.conn.sess.Load().currentEpoch()
		return before != 0
	})
	if n := pgtest.TerminateBackends(t, "pglease listener-victim"); n == 0 {
		t.Fatal("no backend of the waiter's client to terminate")
	}
	// The reconnection wakes the waiter (notifications may have been
	// missed meanwhile); it tries again and finds the name still held,
	// listening on the new connection.
	for e := pgtest.Receive(t, contended, "an attempt after the reconnection"); e == 0 || e == before; {
		e = pgtest.Receive(t, contended, "an attempt after the reconnection")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := pgtest.Receive(t, got, "the waiter to be woken after the listener reconnected")
	if l2 == nil {
		t.Fatal("waiter failed")
	}
	_ = l2.Release(ctx)
}

// A dedicated session behind a transaction-pooling proxy (PgBouncer) never
// listens, however many waits, observers or step-down hearers its client
// has: its LISTEN would stay on a server backend other clients share, so
// that their notifications (and every NOTIFY's signal) would reach it and
// not this client. Its waits poll. Before, it listened as any session
// (found by the bench's waiters behind PgBouncer).
func TestASessionBehindATransactionPoolerDoesNotListen(t *testing.T) {
	c := testClient(t, Config{})
	for _, proxied := range []bool{false, true} {
		s := &session{c: c, epoch: 1, proxied: proxied, listeners: 1}
		change, _ := s.listenChange(true)
		if want := map[bool]int{false: +1, true: 0}[proxied]; change != want {
			t.Errorf("proxied %v: listen change %+d, want %+d", proxied, change, want)
		}
	}
}
