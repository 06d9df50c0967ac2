package pglease

import (
	"errors"
	"testing"
	"time"
)

// A lease that another goroutine is in the middle of ending (marked ended,
// context not cancelled yet) never looks held: on a resumed process the
// deadline timer and the holder's own check of Err race exactly there.
func TestLeaseEndingElsewhereIsNotHeld(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	l, err := c.TryAcquire(ctx, "ending", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	inside, proceed := make(chan struct{}), make(chan struct{})
	hook := func(e *Lease) {
		if e == l {
			close(inside)
			<-proceed
		}
	}
	testHookEnding.Store(&hook)
	t.Cleanup(func() { testHookEnding.Store(nil) })
	released := make(chan error, 1)
	go func() { released <- l.Release(ctx) }()
	<-inside
	if err := causeOf(l.Context()); !errors.Is(err, ErrReleased) {
		t.Errorf("Err while another goroutine ends the lease: %v, want ErrReleased", err)
	}
	if err := l.Context().Err(); err == nil {
		t.Error("Context().Err() is nil while another goroutine ends the lease")
	}
	select {
	case <-l.Context().Done():
	default:
		t.Error("Done not closed once Err reported the end")
	}
	close(proceed)
	if err := <-released; err != nil {
		t.Fatal(err)
	}
}

// A lease released before its minimum hold keeps its row until then; a
// waiter gets it afterwards.
func TestReleaseKeepsTheRowUntilTheMinimumHold(t *testing.T) {
	ctx := testCtx(t)
	a := testClient(t, Config{})
	b := testClient(t, Config{Table: a.cfg.Table})
	// A hold long enough that the TryAcquire below comes before its end
	// even on a slow machine.
	l, err := a.TryAcquire(ctx, "cron", WithTTL(10*time.Second), WithMinHold(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryAcquire(ctx, "cron"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("acquired before the minimum hold passed: %v", err)
	}
	l2, err := b.Acquire(ctx, "cron")
	if err != nil {
		t.Fatal(err)
	}
	if info, _ := b.Get(ctx, "cron"); info.Token != l2.Token() {
		t.Fatalf("row token %d", info.Token)
	}
	_ = l2.Release(ctx)
}
