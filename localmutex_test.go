package pglease

import (
	"errors"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// The goroutines of one client take a name in turn: a second TryAcquire
// reports the client's own lease as the holder, and a second Acquire waits
// for its release instead of reaching the server, where it would take the
// row for one of its client's lost replies and free it.
func TestGoroutinesOfOneClientTakeANameInTurn(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	l, err := c.TryAcquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.TryAcquire(ctx, "x")
	var held *HeldError
	if !errors.As(err, &held) || held.Holder.Token != l.Token() {
		t.Fatalf("second TryAcquire in the same client: %v, want HeldError with our token", err)
	}
	got := make(chan *Lease, 1)
	go func() {
		l2, err := c.Acquire(ctx, "x")
		if err != nil {
			t.Error(err)
		}
		got <- l2
	}()
	waitSubscribed(t, c, "x", 1)
	// Not a wait for a signal: a window in which a waiter that got past
	// the local slot would return (a broken slot takes milliseconds).
	select {
	case <-got:
		t.Fatal("Acquire of a name held by the same client returned before release")
	case <-time.After(200 * time.Millisecond):
	}
	if r, ok := rows(t, c).Get("x"); !ok || r.Token != l.Token() || !r.Held {
		t.Fatalf("the row of the held lease changed while a local waiter waited: %+v (found %v)", r, ok)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := pgtest.Receive(t, got, "the local waiter to get the name")
	if l2 == nil || l2.Token() <= l.Token() {
		t.Fatalf("local waiter got %v", l2)
	}
	_ = l2.Release(ctx)
}
