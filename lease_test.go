package pglease

import (
	"errors"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

func TestTryAcquireRelease(t *testing.T) {
	ctx := testCtx(t)
	a := testClient(t, Config{})
	b := testClient(t, Config{Table: a.cfg.Table})

	l, err := a.TryAcquire(ctx, "job", WithTTL(5*time.Second))
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	if l.Token() <= 0 {
		t.Fatalf("token %d, want > 0", l.Token())
	}
	_, err = b.TryAcquire(ctx, "job")
	var held *HeldError
	if !errors.Is(err, ErrNotAcquired) || !errors.As(err, &held) {
		t.Fatalf("second TryAcquire: %v, want HeldError", err)
	}
	if held.Holder.Owner != a.Owner() || held.Holder.Token != l.Token() || held.Holder.Remaining <= 0 {
		t.Fatalf("holder = %+v, want owner %q token %d", held.Holder, a.Owner(), l.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Done not closed after Release")
	}
	if !errors.Is(l.Err(), ErrReleased) {
		t.Fatalf("Err = %v, want ErrReleased", l.Err())
	}
	l2, err := b.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatalf("TryAcquire after release: %v", err)
	}
	if l2.Token() <= l.Token() {
		t.Fatalf("token %d not above %d", l2.Token(), l.Token())
	}
}

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
	if err := l.Err(); !errors.Is(err, ErrReleased) {
		t.Errorf("Err while another goroutine ends the lease: %v, want ErrReleased", err)
	}
	if err := l.Context().Err(); err == nil {
		t.Error("Context().Err() is nil while another goroutine ends the lease")
	}
	select {
	case <-l.Done():
	default:
		t.Error("Done not closed once Err reported the end")
	}
	close(proceed)
	if err := <-released; err != nil {
		t.Fatal(err)
	}
}

// Guard works for a lease whose TTL is longer than the server's largest
// idle_in_transaction_session_timeout (about 24.8 days): the timeout it
// sets is clamped to the setting's range instead of being refused by the
// server, which the client would otherwise take for "not held".
func TestGuardOfALeaseLongerThanTheIdleTimeoutRange(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	l, err := c.TryAcquire(ctx, "month", WithTTL(30*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	tx, err := pgtest.Pool(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := l.Guard(ctx, tx); err != nil {
		t.Fatalf("Guard: %v", err)
	}
	var setting string
	if err := tx.QueryRow(ctx, "SELECT current_setting('idle_in_transaction_session_timeout')").Scan(&setting); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit after Guard: %v", err)
	}
	if l.Err() != nil {
		t.Fatalf("lease ended: %v", l.Err())
	}
	t.Logf("idle_in_transaction_session_timeout inside the guarded transaction: %s", setting)
}
