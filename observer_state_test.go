package pglease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// leaseKey names one lease in a stream of events.
type leaseKey struct {
	name  string
	token int64
}

// checkPaired checks the contract an adapter counting held leases relies
// on: every lease reported acquired is reported ended exactly once, by
// EventReleased or EventLost, after its acquisition; nothing else is
// reported ended.
func checkPaired(t *testing.T, events []Event) {
	t.Helper()
	open := map[leaseKey]bool{}
	ended := map[leaseKey]bool{}
	for i, e := range events {
		k := leaseKey{e.Name, e.Token}
		switch e.Kind {
		case EventAcquired:
			if open[k] || ended[k] {
				t.Errorf("event %d: %v acquired twice", i, k)
			}
			open[k] = true
		case EventReleased, EventLost:
			if !open[k] {
				t.Errorf("event %d: %v %s without being reported acquired (or a second time)", i, k, e.Kind)
			}
			delete(open, k)
			ended[k] = true
		}
	}
	for k := range open {
		t.Errorf("%v reported acquired, never reported ended", k)
	}
}

// Every way a lease ends is reported once, after its acquisition: a
// release, a release whose delete fails, a loss (force-released), the
// release of a set, and Close with leases held.
func TestEveryReportedLeaseIsReportedEndedOnce(t *testing.T) {
	ctx := testCtx(t)
	log := newEventLog()
	c := testClient(t, Config{Observer: log})
	admin := testClient(t, Config{Table: c.cfg.Table})

	l, err := c.TryAcquire(ctx, "released")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	lost, err := c.TryAcquire(ctx, "lost", WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.forceRelease(ctx, "lost"); err != nil {
		t.Fatal(err)
	}
	log.await(t, "the force-released lease to be reported lost", is(EventLost, "lost"))
	if !errors.Is(context.Cause(lost.Context()), ErrLeaseLost) {
		t.Fatalf("lost lease ended with %v", context.Cause(lost.Context()))
	}

	set, err := c.TryAcquireAll(ctx, []string{"s1", "s2"})
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(ctx, "held-at-close"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(ctx, "held-at-close-2", WithFastFailover()); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	log.mu.Lock()
	events := slices.Clone(log.events)
	log.mu.Unlock()
	checkPaired(t, events)
	var acquired int
	for _, e := range events {
		if e.Kind == EventAcquired {
			acquired++
			if e.Client != c.id {
				t.Errorf("event of client %q, want %q", e.Client, c.id)
			}
		}
	}
	if acquired != 6 {
		t.Fatalf("%d acquisitions reported, want 6: %v", acquired, log.kinds())
	}
}

// A release whose delete fails still ends the lease for observers: it is
// reported as EventReleased with the error, so that a held-leases gauge
// goes back down.
func TestFailedReleaseIsReportedWithItsError(t *testing.T) {
	ctx := testCtx(t)
	log := newEventLog()
	c := testClient(t, Config{Observer: log})
	l, err := c.TryAcquire(ctx, "doomed")
	if err != nil {
		t.Fatal(err)
	}
	// A trigger refuses the delete; the error is not retryable. (Without
	// its table a release succeeds: the row went with the table.)
	schema, _, _ := strings.Cut(c.cfg.Table, ".")
	pgtest.Exec(t, fmt.Sprintf(`CREATE FUNCTION %[1]s.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$;
		CREATE TRIGGER refuse BEFORE DELETE ON %[2]s FOR EACH ROW EXECUTE FUNCTION %[1]s.refuse()`, schema, c.cfg.Table))
	relErr := l.Release(ctx)
	if relErr == nil || !strings.Contains(relErr.Error(), "refused") {
		t.Fatalf("Release with a trigger that refuses the delete: %v", relErr)
	}
	e := log.await(t, "the failed release to be reported", is(EventReleased, "doomed"))
	if e.Err == nil || e.Err.Error() != relErr.Error() {
		t.Fatalf("EventReleased.Err = %v, want Release's error %v", e.Err, relErr)
	}
	if e.Token != l.Token() || e.Hold <= 0 {
		t.Fatalf("event %+v", e)
	}
}

// A renewal statement is reported once (EventHeartbeat, with the number of
// leases it renewed), beside the per-lease EventRenewed.
func TestOneHeartbeatPerRenewalStatement(t *testing.T) {
	ctx := testCtx(t)
	log := newEventLog()
	c := testClient(t, Config{Observer: log})
	// A TTL that a renewal delayed by a loaded machine does not outlive:
	// with 1 s, a renewal that came late once lost a lease (under -race in
	// CI), and no heartbeat renewed three leases after that.
	for _, name := range []string{"a", "b", "c"} {
		if _, err := c.TryAcquire(ctx, name, WithTTL(3*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	log.await(t, "a heartbeat renewing the three leases", func(e Event) bool {
		return e.Kind == EventHeartbeat && e.Count == 3
	})
	// The next heartbeat comes with its three renewals, all with its
	// latency.
	hb := log.await(t, "the next heartbeat", func(e Event) bool { return e.Kind == EventHeartbeat })
	var renewed []Event
	for len(renewed) < 3 {
		renewed = append(renewed, log.await(t, "the heartbeat's renewals", func(e Event) bool { return e.Kind == EventRenewed }))
	}
	for _, r := range renewed {
		if r.Latency != hb.Latency {
			t.Fatalf("renewal latency %v, heartbeat's %v", r.Latency, hb.Latency)
		}
	}
}

// EventAcquired carries the wait, from the call to the acquisition, and
// the call's context; EventReleased the hold time.
func TestAcquiredEventCarriesWaitAndContext(t *testing.T) {
	type key struct{}
	ctx := context.WithValue(testCtx(t), key{}, "caller")
	log := newEventLog()
	c := testClient(t, Config{Observer: log})
	other := testClient(t, Config{Table: c.cfg.Table})
	held, err := other.TryAcquire(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	called := time.Now()
	var released time.Time
	got := make(chan *Lease, 1)
	go func() {
		l, err := c.Acquire(ctx, "w")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	log.await(t, "the waiter to find the name held", is(EventContended, "w"))
	released = time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	returned := time.Now()
	e := log.await(t, "the acquisition", is(EventAcquired, "w"))
	if e.Wait < released.Sub(called) || e.Wait > returned.Sub(called) {
		t.Fatalf("Wait %v, want between %v (until the holder's release) and %v (until Acquire returned)",
			e.Wait, released.Sub(called), returned.Sub(called))
	}
	if e.Context == nil || e.Context.Value(key{}) != "caller" {
		t.Fatal("EventAcquired does not carry Acquire's context")
	}
	begun := time.Now()
	if err := l.Release(context.WithValue(ctx, key{}, "release")); err != nil {
		t.Fatal(err)
	}
	r := log.await(t, "the release", is(EventReleased, "w"))
	if r.Hold < begun.Sub(returned) || r.Err != nil || r.Context.Value(key{}) != "release" {
		t.Fatalf("EventReleased %+v", r)
	}
}

// blockingObserver holds every delivery until let through.
type blockingObserver struct {
	gate   chan struct{}
	mu     sync.Mutex
	events []Event
}

func (o *blockingObserver) Observe(e Event) {
	<-o.gate
	o.mu.Lock()
	o.events = append(o.events, e)
	o.mu.Unlock()
}

// When the observer falls behind, events beyond the queue's bound are
// dropped; once it catches up it gets one EventDropped counting them, with
// the state they changed (names held, electors leading).
func TestDroppedEventsAreReportedWithTheState(t *testing.T) {
	obs := &blockingObserver{gate: make(chan struct{})}
	var wg sync.WaitGroup
	q := &eventQueue{obs: obs, client: "c1", start: func(f func()) bool {
		wg.Go(f)
		return true
	}}
	q.send(Event{Kind: EventAcquired, Name: "a"})
	q.send(Event{Kind: EventAcquired, Name: "b"})
	q.send(Event{Kind: EventElected, Name: "b"})
	for range maxQueued {
		q.send(Event{Kind: EventRenewed, Name: "a"})
	}
	// Queued or not (the first event may be out of the queue, waiting in
	// Observe), the queue is full by now: these are dropped.
	q.send(Event{Kind: EventReleased, Name: "a"})
	q.send(Event{Kind: EventAcquired, Name: "c"})
	q.send(Event{Kind: EventDemoted, Name: "b"})
	q.send(Event{Kind: EventElected, Name: "c"})
	close(obs.gate)
	wg.Wait()
	last := obs.events[len(obs.events)-1]
	if last.Kind != EventDropped {
		t.Fatalf("last event %v, want dropped", last.Kind)
	}
	delivered := len(obs.events) - 1
	sent := 3 + maxQueued + 4
	if last.Count != sent-delivered || last.Count < 4 {
		t.Fatalf("Count %d, want %d (sent %d, delivered %d)", last.Count, sent-delivered, sent, delivered)
	}
	if !slices.Equal(last.Held, []string{"b", "c"}) || !slices.Equal(last.Leading, []string{"c"}) || last.Client != "c1" {
		t.Fatalf("dropped event %+v", last)
	}
	// Nothing more is dropped: the next event comes alone.
	q.send(Event{Kind: EventReleased, Name: "b"})
	wg.Wait()
	if e := obs.events[len(obs.events)-1]; e.Kind != EventReleased || len(obs.events) != delivered+2 {
		t.Fatalf("after catching up: %v (%d events)", e.Kind, len(obs.events))
	}
}
