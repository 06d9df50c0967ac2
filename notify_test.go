package pglease

import (
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// A waiter is woken by the release notification, not by polling: the
// fallback poll and the holder's remaining time are both far longer than the
// test allows.
func TestWaiterWakesOnReleaseWithoutPolling(t *testing.T) {
	ctx := testCtx(t)
	a := testClient(t, Config{})
	b := testClient(t, Config{Table: a.cfg.Table, PollInterval: time.Hour})
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
	waitContended(t, b, "n")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l2 := <-got:
		if l2 == nil || l2.Token() <= l.Token() {
			t.Fatalf("waiter got %v", l2)
		}
		_ = l2.Release(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("waiter was not woken by the release notification")
	}
}

// The listener connection is killed while a waiter waits; the client
// reconnects, re-subscribes, and the waiter is still woken by a release.
func TestDroppedListenerIsRecovered(t *testing.T) {
	ctx := testCtx(t)
	a := testClient(t, Config{})
	b := testClient(t, Config{Table: a.cfg.Table, PollInterval: time.Hour, Owner: "listener-victim"})
	l, err := a.TryAcquire(ctx, "n", WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lease, 1)
	go func() {
		l2, _ := b.Acquire(ctx, "n")
		got <- l2
	}()
	waitContended(t, b, "n")
	before := b.sess.currentEpoch()
	for ; before == 0; before = b.sess.currentEpoch() { // the listener is connecting
		time.Sleep(time.Millisecond)
	}
	if n := pgtest.TerminateBackends(t, "pglease listener-victim"); n == 0 {
		t.Fatal("no backend of the waiter's client to terminate")
	}
	deadline := time.Now().Add(10 * time.Second)
	for e := b.sess.currentEpoch(); e == 0 || e == before; e = b.sess.currentEpoch() {
		if time.Now().After(deadline) {
			t.Fatal("listener did not reconnect")
		}
		time.Sleep(10 * time.Millisecond)
	}
	waitContended(t, b, "n")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l2 := <-got:
		if l2 == nil {
			t.Fatal("waiter failed")
		}
		_ = l2.Release(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not woken after the listener reconnected")
	}
}
