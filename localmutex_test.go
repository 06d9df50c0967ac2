package pglease

import (
	"errors"
	"testing"
	"time"
)

func TestWithinClientNoReentry(t *testing.T) {
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
	got := make(chan *Lease)
	go func() {
		l2, err := c.Acquire(ctx, "x")
		if err != nil {
			t.Error(err)
		}
		got <- l2
	}()
	select {
	case <-got:
		t.Fatal("Acquire of a name held by the same client returned before release")
	case <-time.After(200 * time.Millisecond):
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := <-got
	if l2 == nil || l2.Token() <= l.Token() {
		t.Fatalf("local waiter got %v", l2)
	}
	_ = l2.Release(ctx)
}
