package pgleaseotel_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/pgleaseotel"
)

func kind(k pglease.EventKind) attribute.KeyValue {
	return attribute.String("pglease.event.kind", k.String())
}
func name(n string) attribute.KeyValue { return attribute.String("pglease.lease.name", n) }

// Every instrument has its OTel name and unit.
func TestMetricNamesAndUnits(t *testing.T) {
	tm := newTelemetry(t, false)
	tm.observe(
		pglease.Event{Kind: pglease.EventAcquired, Name: "a", Token: 1},
		pglease.Event{Kind: pglease.EventHeartbeat, Count: 1, Latency: time.Millisecond},
		pglease.Event{Kind: pglease.EventReleased, Name: "a", Token: 1, Err: errors.New("x")},
		pglease.Event{Kind: pglease.EventElected, Name: "e", Token: 2},
		pglease.Event{Kind: pglease.EventDropped, Count: 1, Leading: []string{"e"}},
	)
	ms := tm.metrics(t)
	for metric, unit := range map[string]string{
		"pglease.events": "{event}", "pglease.leases.held": "{lease}", "pglease.release.errors": "{error}",
		"pglease.events.dropped": "{event}", "pglease.renew.duration": "s", "pglease.acquire.wait": "s",
		"pglease.lease.hold": "s", "pglease.elector.leader": "{term}",
	} {
		if m, ok := ms[metric]; !ok || m.Unit != unit {
			t.Errorf("%s: unit %q (recorded: %v), want %q", metric, m.Unit, ok, unit)
		}
	}
	if len(ms) != 8 {
		t.Errorf("%d metrics, want 8", len(ms))
	}
}

// The counters and histograms, without the name attribute: events by kind;
// renewal round trips from heartbeats only (one per statement); an
// acquisition that took an expired lease over as stale_reclaimed too; waits;
// holds by how the lease ended; release errors; dropped events.
func TestCountersAndHistograms(t *testing.T) {
	tm := newTelemetry(t, false)
	tm.observe(
		pglease.Event{Kind: pglease.EventContended, Name: "a", Previous: "other"},
		pglease.Event{Kind: pglease.EventAcquired, Name: "a", Token: 1, Wait: 2 * time.Second},
		pglease.Event{Kind: pglease.EventRenewed, Name: "a", Token: 1, Latency: 10 * time.Millisecond},
		pglease.Event{Kind: pglease.EventAcquired, Name: "b", Token: 2, Wait: 0},
		pglease.Event{Kind: pglease.EventRenewed, Name: "b", Token: 2, Latency: 10 * time.Millisecond},
		pglease.Event{Kind: pglease.EventHeartbeat, Count: 2, Latency: 10 * time.Millisecond},
		pglease.Event{Kind: pglease.EventReleased, Name: "a", Token: 1, Hold: 3 * time.Second},
		pglease.Event{Kind: pglease.EventLost, Name: "b", Token: 2, Hold: 4 * time.Second, Err: errors.New("gone")},
		pglease.Event{Kind: pglease.EventAcquired, Name: "a", Token: 3, Previous: "crashed"},
		pglease.Event{Kind: pglease.EventReleased, Name: "a", Token: 3, Hold: time.Second, Err: errors.New("timeout")},
		pglease.Event{Kind: pglease.EventDropped, Count: 12},
	)
	ms := tm.metrics(t)
	for k, want := range map[pglease.EventKind]int64{
		pglease.EventContended: 1, pglease.EventAcquired: 3, pglease.EventRenewed: 2, pglease.EventHeartbeat: 1,
		pglease.EventReleased: 2, pglease.EventLost: 1, pglease.EventDropped: 1,
	} {
		if got := mustInt(t, ms, "pglease.events", kind(k)); got != want {
			t.Errorf("events %s = %d, want %d", k, got, want)
		}
	}
	// The acquisition that took an expired lease over counts as stale_reclaimed too.
	if got := mustInt(t, ms, "pglease.events", attribute.String("pglease.event.kind", "stale_reclaimed")); got != 1 {
		t.Errorf("events stale_reclaimed = %d, want 1", got)
	}
	if n, sum := histogram(t, ms, "pglease.renew.duration"); n != 1 || sum != 0.01 {
		t.Errorf("renew.duration count %d sum %v, want one statement of 0.01 s", n, sum)
	}
	if n, sum := histogram(t, ms, "pglease.acquire.wait"); n != 3 || sum != 2 {
		t.Errorf("acquire.wait count %d sum %v, want 3 and 2 s", n, sum)
	}
	if n, sum := histogram(t, ms, "pglease.lease.hold", kind(pglease.EventReleased)); n != 2 || sum != 4 {
		t.Errorf("lease.hold released count %d sum %v, want 2 and 4 s", n, sum)
	}
	if n, sum := histogram(t, ms, "pglease.lease.hold", kind(pglease.EventLost)); n != 1 || sum != 4 {
		t.Errorf("lease.hold lost count %d sum %v, want 1 and 4 s", n, sum)
	}
	if got := mustInt(t, ms, "pglease.release.errors"); got != 1 {
		t.Errorf("release.errors = %d", got)
	}
	if got := mustInt(t, ms, "pglease.events.dropped"); got != 12 {
		t.Errorf("events.dropped = %d, want the 12 dropped", got)
	}
	if got := mustInt(t, ms, "pglease.leases.held"); got != 0 {
		t.Errorf("leases.held = %d", got)
	}
}

// With NameAttribute, the events counter, the held gauge and the wait and
// hold histograms are by name; heartbeats, which have none, are not.
func TestNameAttribute(t *testing.T) {
	tm := newTelemetry(t, true)
	tm.observe(
		pglease.Event{Kind: pglease.EventAcquired, Name: "a", Token: 1, Wait: time.Second},
		pglease.Event{Kind: pglease.EventAcquired, Name: "b", Token: 2},
		pglease.Event{Kind: pglease.EventHeartbeat, Count: 2, Latency: time.Millisecond},
		pglease.Event{Kind: pglease.EventReleased, Name: "a", Token: 1, Hold: time.Second},
	)
	ms := tm.metrics(t)
	if got := mustInt(t, ms, "pglease.events", kind(pglease.EventAcquired), name("a")); got != 1 {
		t.Errorf("events acquired a = %d", got)
	}
	if got := mustInt(t, ms, "pglease.events", kind(pglease.EventHeartbeat)); got != 1 {
		t.Errorf("events heartbeat = %d", got)
	}
	if a, b := mustInt(t, ms, "pglease.leases.held", name("a")), mustInt(t, ms, "pglease.leases.held", name("b")); a != 0 || b != 1 {
		t.Errorf("leases.held a = %d, b = %d; want 0 and 1", a, b)
	}
	if n, _ := histogram(t, ms, "pglease.acquire.wait", name("a")); n != 1 {
		t.Errorf("acquire.wait a count %d", n)
	}
	if n, _ := histogram(t, ms, "pglease.lease.hold", name("a"), kind(pglease.EventReleased)); n != 1 {
		t.Errorf("lease.hold a count %d", n)
	}
}

// The held gauge sums the clients' states; EventDropped replaces its
// client's (whatever the dropped events were), so the gauge is exact after
// it, where counting the events seen would drift.
func TestHeldIsExactAfterDroppedEvents(t *testing.T) {
	tm := newTelemetry(t, true)
	tm.observe(
		pglease.Event{Kind: pglease.EventAcquired, Client: "c1", Name: "a", Token: 1},
		pglease.Event{Kind: pglease.EventAcquired, Client: "c1", Name: "b", Token: 2},
		pglease.Event{Kind: pglease.EventAcquired, Client: "c2", Name: "a", Token: 3},
		// Dropped: c1 released a and b and acquired c.
		pglease.Event{Kind: pglease.EventDropped, Client: "c1", Count: 3, Held: []string{"c"}},
	)
	ms := tm.metrics(t)
	for n, want := range map[string]int64{"a": 1, "b": 0, "c": 1} {
		if got := mustInt(t, ms, "pglease.leases.held", name(n)); got != want {
			t.Errorf("leases.held %s = %d, want %d", n, got, want)
		}
	}
	// c's release, which follows, brings it to zero, not below.
	tm.observe(pglease.Event{Kind: pglease.EventReleased, Client: "c1", Name: "c", Token: 4})
	if got := mustInt(t, tm.metrics(t), "pglease.leases.held", name("c")); got != 0 {
		t.Errorf("leases.held c = %d after its release", got)
	}

	total := newTelemetry(t, false)
	total.observe(
		pglease.Event{Kind: pglease.EventAcquired, Client: "c1", Name: "a", Token: 1},
		pglease.Event{Kind: pglease.EventAcquired, Client: "c1", Name: "b", Token: 2},
		pglease.Event{Kind: pglease.EventDropped, Client: "c1", Count: 5, Held: []string{"c"}},
	)
	if got := mustInt(t, total.metrics(t), "pglease.leases.held"); got != 1 {
		t.Errorf("leases.held = %d, want 1", got)
	}
}

// The leader gauge is 1 per elector name in a term, 0 once it ended or
// while it campaigns; EventDropped's Leading corrects it. It is by name even without
// NameAttribute.
func TestLeaderGauge(t *testing.T) {
	tm := newTelemetry(t, false)
	tm.observe(
		pglease.Event{Kind: pglease.EventElected, Client: "c1", Name: "x", Token: 1},
		pglease.Event{Kind: pglease.EventElected, Client: "c1", Name: "y", Token: 2},
		pglease.Event{Kind: pglease.EventDemoted, Client: "c1", Name: "x", Token: 1},
	)
	ms := tm.metrics(t)
	if x, y := mustInt(t, ms, "pglease.elector.leader", name("x")), mustInt(t, ms, "pglease.elector.leader", name("y")); x != 0 || y != 1 {
		t.Errorf("leader x = %d, y = %d; want 0 and 1", x, y)
	}
	// Dropped: y's term ended, x began another.
	tm.observe(pglease.Event{Kind: pglease.EventDropped, Client: "c1", Count: 2, Leading: []string{"x"}})
	ms = tm.metrics(t)
	if x, y := mustInt(t, ms, "pglease.elector.leader", name("x")), mustInt(t, ms, "pglease.elector.leader", name("y")); x != 1 || y != 0 {
		t.Errorf("after dropped events: leader x = %d, y = %d; want 1 and 0", x, y)
	}
	// An elector that campaigns without leading shows 0, as pgleaseprom's
	// is_leader does: an election nobody leads is visible.
	tm.observe(pglease.Event{Kind: pglease.EventLeaderChanged, Client: "c2", Name: "z"})
	if got, ok := intValue(t, tm.metrics(t), "pglease.elector.leader", name("z")); !ok || got != 0 {
		t.Errorf("leader z = %d (reported %v) while it campaigns; want 0, reported", got, ok)
	}
}

// Without providers in Options, New uses the global ones.
func TestNewUsesTheGlobalProviders(t *testing.T) {
	mp0, tp0 := otel.GetMeterProvider(), otel.GetTracerProvider()
	t.Cleanup(func() { otel.SetMeterProvider(mp0); otel.SetTracerProvider(tp0) })
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	otel.SetMeterProvider(mp)
	otel.SetTracerProvider(tp)

	obs, err := pgleaseotel.New(pgleaseotel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tm := &telemetry{obs: obs, tp: tp, spans: spans, reader: reader}
	tm.observe(pglease.Event{Kind: pglease.EventAcquired, Name: "a", Token: 1})
	if got := mustInt(t, tm.metrics(t), "pglease.leases.held"); got != 1 {
		t.Errorf("leases.held = %d", got)
	}
	one(t, "pglease.acquire", tm.ended("pglease.acquire"))
}

// Clients sharing an observer report concurrently while metrics are
// collected; in the end nothing is held and no lease span is open.
func TestConcurrentClients(t *testing.T) {
	tm := newTelemetry(t, true)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 4 {
		client := fmt.Sprintf("c%d", i)
		wg.Go(func() {
			for j := range 200 {
				n, token := fmt.Sprintf("n%d", j%5), int64(i*1000+j)
				tm.observe(
					pglease.Event{Kind: pglease.EventAcquired, Client: client, Name: n, Token: token},
					pglease.Event{Kind: pglease.EventHeartbeat, Client: client, Count: 1},
					pglease.Event{Kind: pglease.EventReleased, Client: client, Name: n, Token: token},
				)
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	for collecting := true; collecting; {
		select {
		case <-done:
			collecting = false
		default:
			tm.metrics(t)
		}
	}
	ms := tm.metrics(t)
	for j := range 5 {
		if got := mustInt(t, ms, "pglease.leases.held", name(fmt.Sprintf("n%d", j))); got != 0 {
			t.Errorf("leases.held n%d = %d", j, got)
		}
	}
	if got := mustInt(t, ms, "pglease.events", kind(pglease.EventAcquired), name("n0")); got != 4*40 {
		t.Errorf("events acquired n0 = %d, want %d", got, 4*40)
	}
	if n, m := len(tm.ended("pglease.lease")), len(tm.open("pglease.lease")); n != 800 || m != 0 {
		t.Errorf("%d lease spans ended, %d open; want 800 and 0", n, m)
	}
}
