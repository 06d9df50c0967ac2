package pglease

import (
	"errors"
	"sync"
	"testing"
	"time"
)

type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) Observe(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	if e.Kind == EventRenewed {
		panic("a broken observer")
	}
}

func (r *recorder) kinds() []EventKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []EventKind
	for _, e := range r.events {
		out = append(out, e.Kind)
	}
	return out
}

// Events arrive in order; a panicking observer breaks neither renewals nor
// later events.
func TestObserverEventsInOrderAndPanicsRecovered(t *testing.T) {
	ctx := testCtx(t)
	rec := &recorder{}
	c := testClient(t, Config{Observer: rec})
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
	time.Sleep(1200 * time.Millisecond)
	if err := l.Err(); err != nil {
		t.Fatalf("renewals broke with a panicking observer: %v", err)
	}
	_ = l.Release(ctx)
	_ = c.Close()
	k := rec.kinds()
	want := []EventKind{EventContended, EventAcquired, EventRenewed}
	if len(k) < 4 || k[0] != want[0] || k[1] != want[1] || k[2] != want[2] || k[len(k)-1] != EventReleased {
		t.Fatalf("events %v", k)
	}
}
