package pglease

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// Events arrive in order; an observer that panics at every renewal breaks
// neither renewals nor the delivery of later events.
func TestObserverGetsEventsInOrderAndSurvivesItsOwnPanic(t *testing.T) {
	ctx := testCtx(t)
	log := newEventLog()
	c := testClient(t, Config{Observer: observerFunc(func(e Event) {
		log.Observe(e)
		if e.Kind == EventRenewed {
			panic("a broken observer")
		}
	})})
	other := testClient(t, Config{Table: c.cfg.Table})
	ol, err := other.TryAcquire(ctx, "o")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(ctx, "o"); !errors.Is(err, ErrNotAcquired) {
		t.Fatal(err)
	}
	_ = ol.Release(ctx)
	l, err := c.TryAcquire(ctx, "o", WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Renewals after the first panic keep the lease past its deadline,
	// and their events still arrive.
	awaitKeptPast(t, log, l, l.Deadline())
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil { // waits for the last event's delivery
		t.Fatal(err)
	}
	k := slices.DeleteFunc(log.kinds(), func(k EventKind) bool { return k == EventHeartbeat })
	want := []EventKind{EventContended, EventAcquired, EventRenewed}
	if len(k) < 4 || k[0] != want[0] || k[1] != want[1] || k[2] != want[2] || k[len(k)-1] != EventReleased {
		t.Fatalf("events %v", k)
	}
}

// An acquisition that took over an expired lease names its owner in its
// EventAcquired (Previous); one of a name nobody held names nobody.
func TestAcquiredEventNamesTheOwnerOfTheExpiredLeaseItTookOver(t *testing.T) {
	ctx := testCtx(t)
	log := newEventLog()
	c := testClient(t, Config{Observer: log})
	holder, token := startHolder(t, c.cfg.Table, "p", time.Second, false)
	_ = holder.Process.Kill() // its lease expires a second later
	_ = holder.Wait()
	l, err := c.Acquire(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if e := log.await(t, "the acquisition of p", is(EventAcquired, "p")); e.Token != l.Token() || l.Token() <= token ||
		e.Previous == "" || e.Previous == c.Owner() {
		t.Fatalf("EventAcquired %+v (lease token %d, the dead holder's %d): want Previous naming the dead holder", e, l.Token(), token)
	}
	q, err := c.TryAcquire(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Release(ctx)
	if e := log.await(t, "the acquisition of q", is(EventAcquired, "q")); e.Previous != "" {
		t.Fatalf("EventAcquired of a name nobody held: Previous %q, want none", e.Previous)
	}
}

// Every kind has a name.
func TestEveryEventKindHasAName(t *testing.T) {
	for k := EventAcquired; k <= EventDropped; k++ {
		if _, ok := kindNames[k]; !ok {
			t.Errorf("%v has no name", k)
		}
	}
	if s := EventKind(0).String(); s != "EventKind(0)" {
		t.Errorf("EventKind(0) = %q", s)
	}
}
