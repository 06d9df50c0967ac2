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
