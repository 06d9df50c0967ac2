package pgleaseprom

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/pglease/pglease"
)

// newRegistered returns an observer registered with a registry of its own.
func newRegistered(t *testing.T, opt Options) (*Observer, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	o, err := Register(reg, opt)
	if err != nil {
		t.Fatal(err)
	}
	return o, reg
}

// series returns the series of metric whose labels include want, failing
// the test unless there is exactly one.
func series(t *testing.T, g prometheus.Gatherer, metric string, want ...string) *dto.Metric {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var found []*dto.Metric
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(want); i += 2 {
				if labels[want[i]] != want[i+1] {
					continue next
				}
			}
			found = append(found, m)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d series of %s%v, want 1", len(found), metric, want)
	}
	return found[0]
}

// value returns the value of a gauge or counter series (labels as pairs).
func value(t *testing.T, g prometheus.Gatherer, metric string, labels ...string) float64 {
	t.Helper()
	m := series(t, g, metric, labels...)
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	t.Fatalf("%s is neither a gauge nor a counter", metric)
	return 0
}

// histogram returns the sample count and sum of a histogram series.
func histogram(t *testing.T, g prometheus.Gatherer, metric string, labels ...string) (uint64, float64) {
	t.Helper()
	h := series(t, g, metric, labels...).GetHistogram()
	if h == nil {
		t.Fatalf("%s is not a histogram", metric)
	}
	return h.GetSampleCount(), h.GetSampleSum()
}

func feed(o *Observer, events ...pglease.Event) {
	for _, e := range events {
		o.Observe(e)
	}
}

// ev builds an event of client "c1".
func ev(kind pglease.EventKind, name string) pglease.Event {
	return pglease.Event{Kind: kind, Name: name, Client: "c1"}
}

// An acquisition that took over an expired lease (Previous set) counts as
// acquired and as stale_reclaimed, a series that exists at 0 before.
func TestStaleReclaimedCountsAcquisitionsOfExpiredLeases(t *testing.T) {
	o, reg := newRegistered(t, Options{})
	if got := value(t, reg, "pglease_events_total", "event", "stale_reclaimed"); got != 0 {
		t.Fatalf("events_total{stale_reclaimed} = %v before any event, want 0", got)
	}
	taken := ev(pglease.EventAcquired, "b")
	taken.Previous = "crashed"
	feed(o, ev(pglease.EventAcquired, "a"), taken)
	for kind, want := range map[string]float64{"acquired": 2, "stale_reclaimed": 1} {
		if got := value(t, reg, "pglease_events_total", "event", kind); got != want {
			t.Errorf("events_total{event=%q} = %v, want %v", kind, got, want)
		}
	}
}

// The held-leases gauge follows acquisitions and their ends: releases,
// losses and failed releases (an EventReleased with Err, which also counts
// a release error).
func TestLeasesHeldFollowsAcquiredAndEnded(t *testing.T) {
	o, reg := newRegistered(t, Options{})
	if got := value(t, reg, "pglease_leases_held"); got != 0 {
		t.Fatalf("leases_held = %v before any event, want 0", got)
	}
	feed(o, ev(pglease.EventAcquired, "a"), ev(pglease.EventAcquired, "b"), ev(pglease.EventAcquired, "c"))
	if got := value(t, reg, "pglease_leases_held"); got != 3 {
		t.Fatalf("leases_held = %v after three acquisitions, want 3", got)
	}
	steps := []struct {
		e    pglease.Event
		held float64
	}{
		{ev(pglease.EventReleased, "a"), 2},
		{pglease.Event{Kind: pglease.EventLost, Name: "b", Client: "c1", Err: pglease.ErrLeaseLost}, 1},
		{pglease.Event{Kind: pglease.EventReleased, Name: "c", Client: "c1", Err: errors.New("release \"c\": connection refused")}, 0},
	}
	for _, s := range steps {
		o.Observe(s.e)
		if got := value(t, reg, "pglease_leases_held"); got != s.held {
			t.Fatalf("leases_held = %v after %s of %s (Err %v), want %v", got, s.e.Kind, s.e.Name, s.e.Err, s.held)
		}
	}
	if got := value(t, reg, "pglease_release_errors_total"); got != 1 {
		t.Fatalf("release_errors_total = %v, want 1 (the failed release only)", got)
	}
	for kind, want := range map[string]float64{"acquired": 3, "released": 2, "lost": 1} {
		if got := value(t, reg, "pglease_events_total", "event", kind); got != want {
			t.Fatalf("events_total{event=%q} = %v, want %v", kind, got, want)
		}
	}
	// The library never reports an end without its acquisition; were it
	// to, the gauge would not go negative.
	o.Observe(ev(pglease.EventReleased, "never-acquired"))
	if got := value(t, reg, "pglease_leases_held"); got != 0 {
		t.Fatalf("leases_held = %v after a stray release, want 0", got)
	}
}

// With NameLabel, each name has its series, which stays (at 0) once the
// name is no longer held.
func TestLeasesHeldByName(t *testing.T) {
	o, reg := newRegistered(t, Options{NameLabel: true})
	feed(o, ev(pglease.EventAcquired, "a"), ev(pglease.EventAcquired, "b"), ev(pglease.EventReleased, "a"),
		ev(pglease.EventContended, "x"))
	want := `
# HELP pglease_leases_held Leases held now by the clients of this observer.
# TYPE pglease_leases_held gauge
pglease_leases_held{name="a"} 0
pglease_leases_held{name="b"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "pglease_leases_held"); err != nil {
		t.Fatal(err)
	}
	if got := value(t, reg, "pglease_events_total", "event", "contended", "name", "x"); got != 1 {
		t.Fatalf("events_total{contended,x} = %v", got)
	}
	if n, _ := histogram(t, reg, "pglease_acquire_wait_seconds", "name", "b"); n != 1 {
		t.Fatalf("acquire_wait_seconds{name=b} count %d", n)
	}
}

// An EventDropped replaces the state of its client with the snapshot it
// carries: whatever the dropped events were, the gauges are exact again.
func TestDroppedSnapshotCorrectsDrift(t *testing.T) {
	o, reg := newRegistered(t, Options{})
	// The releases of b and the acquisition of c were dropped.
	feed(o, ev(pglease.EventAcquired, "a"), ev(pglease.EventAcquired, "b"),
		pglease.Event{Kind: pglease.EventDropped, Client: "c1", Count: 2, Held: []string{"a"}})
	if got := value(t, reg, "pglease_leases_held"); got != 1 {
		t.Fatalf("leases_held = %v after the snapshot [a], want 1", got)
	}
	// Counting goes on from the snapshot.
	feed(o, ev(pglease.EventReleased, "a"), ev(pglease.EventReleased, "b"))
	if got := value(t, reg, "pglease_leases_held"); got != 0 {
		t.Fatalf("leases_held = %v, want 0", got)
	}
	// A snapshot may also add what was dropped.
	o.Observe(pglease.Event{Kind: pglease.EventDropped, Client: "c1", Count: 5, Held: []string{"x", "y", "z"}})
	if got := value(t, reg, "pglease_leases_held"); got != 3 {
		t.Fatalf("leases_held = %v after the snapshot [x y z], want 3", got)
	}
	if got := value(t, reg, "pglease_dropped_events_total"); got != 7 {
		t.Fatalf("dropped_events_total = %v, want 7", got)
	}
	if got := value(t, reg, "pglease_events_total", "event", "dropped"); got != 2 {
		t.Fatalf("events_total{event=dropped} = %v, want 2", got)
	}
}

// Two clients sharing the observer are summed; a snapshot of one replaces
// its own part only, and a client whose leases all ended leaves nothing.
func TestClientsSharingTheObserver(t *testing.T) {
	o, reg := newRegistered(t, Options{NameLabel: true})
	feed(o,
		pglease.Event{Kind: pglease.EventAcquired, Name: "a", Client: "c1"},
		pglease.Event{Kind: pglease.EventAcquired, Name: "b", Client: "c1"},
		pglease.Event{Kind: pglease.EventAcquired, Name: "c", Client: "c2"},
		pglease.Event{Kind: pglease.EventAcquired, Name: "a#1", Client: "c2"},
	)
	check := func(when string, want map[string]float64) {
		t.Helper()
		for name, w := range want {
			if got := value(t, reg, "pglease_leases_held", "name", name); got != w {
				t.Fatalf("%s: leases_held{name=%q} = %v, want %v", when, name, got, w)
			}
		}
	}
	check("four acquisitions", map[string]float64{"a": 1, "b": 1, "c": 1, "a#1": 1})
	// c2 dropped events: it now holds b (taken over from c1, whose loss
	// comes later) and no longer c nor a#1. c1's part is untouched.
	o.Observe(pglease.Event{Kind: pglease.EventDropped, Client: "c2", Count: 3, Held: []string{"b"}})
	check("c2's snapshot", map[string]float64{"a": 1, "b": 2, "c": 0, "a#1": 0})
	o.Observe(pglease.Event{Kind: pglease.EventLost, Name: "b", Client: "c1"})
	check("c1's loss of b", map[string]float64{"a": 1, "b": 1, "c": 0, "a#1": 0})
	feed(o, pglease.Event{Kind: pglease.EventReleased, Name: "a", Client: "c1"},
		pglease.Event{Kind: pglease.EventReleased, Name: "b", Client: "c2"})
	check("all released", map[string]float64{"a": 0, "b": 0, "c": 0, "a#1": 0})
	o.mu.Lock()
	left := o.tally.Clients()
	o.mu.Unlock()
	if left != 0 {
		t.Fatalf("state of %d clients kept with nothing held", left)
	}
}

// is_leader is 1 between EventElected and EventDemoted, per elector name,
// EventDropped's Leading corrects it, and a campaigning elector that has
// not led yet shows 0.
func TestIsLeader(t *testing.T) {
	o, reg := newRegistered(t, Options{})
	feed(o, ev(pglease.EventElected, "e1"), ev(pglease.EventElected, "e2"), ev(pglease.EventLeaderChanged, "e1"))
	want := func(when string, e1, e2 float64) {
		t.Helper()
		if got := value(t, reg, "pglease_is_leader", "name", "e1"); got != e1 {
			t.Fatalf("%s: is_leader{name=e1} = %v, want %v", when, got, e1)
		}
		if got := value(t, reg, "pglease_is_leader", "name", "e2"); got != e2 {
			t.Fatalf("%s: is_leader{name=e2} = %v, want %v", when, got, e2)
		}
	}
	want("both elected", 1, 1)
	o.Observe(ev(pglease.EventDemoted, "e1"))
	want("e1 demoted", 0, 1)
	// e2's demotion was dropped, e1's new term too.
	o.Observe(pglease.Event{Kind: pglease.EventDropped, Client: "c1", Count: 2, Leading: []string{"e1"}})
	want("the snapshot", 1, 0)
	// Another client's elector of e2 (it took over) adds to the sum.
	o.Observe(pglease.Event{Kind: pglease.EventElected, Name: "e2", Client: "c2"})
	want("c2 elected", 1, 1)
	// A campaigning elector that does not lead (it reports the leader it
	// sees) has its series, at 0.
	o.Observe(pglease.Event{Kind: pglease.EventLeaderChanged, Name: "e3", Client: "c3", Owner: "other", Token: 7})
	if got := value(t, reg, "pglease_is_leader", "name", "e3"); got != 0 {
		t.Fatalf("is_leader{name=e3} = %v for an elector that sees another leader, want 0", got)
	}
	// Lease metrics do not count elections; electors' leases come with
	// their own acquisitions.
	if got := value(t, reg, "pglease_leases_held"); got != 0 {
		t.Fatalf("leases_held = %v, want 0", got)
	}
}

// The renewal latency is observed once per renewal statement
// (EventHeartbeat), never per renewed lease (EventRenewed).
func TestRenewLatencyOncePerHeartbeat(t *testing.T) {
	o, reg := newRegistered(t, Options{NameLabel: true})
	for i := range 3 {
		latency := time.Duration(i+1) * 10 * time.Millisecond
		o.Observe(pglease.Event{Kind: pglease.EventHeartbeat, Client: "c1", Latency: latency, Count: 50})
		for j := range 50 {
			o.Observe(pglease.Event{Kind: pglease.EventRenewed, Client: "c1", Name: fmt.Sprint("l", j), Latency: latency})
		}
	}
	n, sum := histogram(t, reg, "pglease_renew_latency_seconds")
	if n != 3 || sum < 0.0599 || sum > 0.0601 {
		t.Fatalf("renew_latency_seconds: count %d, sum %v; want 3 and 0.06", n, sum)
	}
	if got := value(t, reg, "pglease_events_total", "event", "renewed", "name", "l7"); got != 3 {
		t.Fatalf("events_total{renewed,l7} = %v, want 3", got)
	}
	if got := value(t, reg, "pglease_events_total", "event", "heartbeat", "name", ""); got != 3 {
		t.Fatalf("events_total{heartbeat} = %v, want 3", got)
	}
}

// EventAcquired's Wait goes to acquire_wait_seconds; the Hold of
// EventReleased and EventLost (failed releases included) to hold_seconds.
func TestAcquireWaitAndHoldHistograms(t *testing.T) {
	o, reg := newRegistered(t, Options{})
	feed(o,
		pglease.Event{Kind: pglease.EventAcquired, Name: "a", Wait: 2 * time.Millisecond},
		pglease.Event{Kind: pglease.EventAcquired, Name: "b", Wait: 3 * time.Second},
		pglease.Event{Kind: pglease.EventReleased, Name: "a", Hold: 90 * time.Second},
		pglease.Event{Kind: pglease.EventLost, Name: "b", Hold: 10 * time.Minute, Err: pglease.ErrLeaseLost},
		pglease.Event{Kind: pglease.EventAcquired, Name: "c", Wait: time.Second},
		pglease.Event{Kind: pglease.EventReleased, Name: "c", Hold: time.Second, Err: errors.New("boom")},
	)
	if n, sum := histogram(t, reg, "pglease_acquire_wait_seconds"); n != 3 || sum < 4.0019 || sum > 4.0021 {
		t.Fatalf("acquire_wait_seconds: count %d, sum %v; want 3 and 4.002", n, sum)
	}
	if n, sum := histogram(t, reg, "pglease_hold_seconds"); n != 3 || sum != 691 {
		t.Fatalf("hold_seconds: count %d, sum %v; want 3 and 691", n, sum)
	}
	want := `
# HELP pglease_acquire_wait_seconds Time from the call (Acquire, TryAcquire, AcquireAll…) to the acquisition, of the leases acquired.
# TYPE pglease_acquire_wait_seconds histogram
pglease_acquire_wait_seconds_bucket{le="1"} 2
pglease_acquire_wait_seconds_bucket{le="2"} 2
pglease_acquire_wait_seconds_bucket{le="3"} 3
pglease_acquire_wait_seconds_bucket{le="+Inf"} 3
pglease_acquire_wait_seconds_sum 4.002
pglease_acquire_wait_seconds_count 3
`
	o2, reg2 := newRegistered(t, Options{WaitBuckets: []float64{1, 2, 3}})
	feed(o2,
		pglease.Event{Kind: pglease.EventAcquired, Name: "a", Wait: 2 * time.Millisecond},
		pglease.Event{Kind: pglease.EventAcquired, Name: "b", Wait: 3 * time.Second},
		pglease.Event{Kind: pglease.EventAcquired, Name: "c", Wait: time.Second})
	if err := testutil.GatherAndCompare(reg2, strings.NewReader(want), "pglease_acquire_wait_seconds"); err != nil {
		t.Fatal(err)
	}
}

// Registering twice, or two observers of one namespace, returns an error
// instead of panicking; another namespace registers beside.
func TestDoubleRegistrationReturnsAnError(t *testing.T) {
	reg := prometheus.NewRegistry()
	o := New(Options{})
	if err := reg.Register(o); err != nil {
		t.Fatal(err)
	}
	var are prometheus.AlreadyRegisteredError
	if err := reg.Register(o); !errors.As(err, &are) {
		t.Fatalf("second Register of the observer: %v, want an AlreadyRegisteredError", err)
	}
	if _, err := Register(reg, Options{}); err == nil {
		t.Fatal("a second observer of namespace pglease registered")
	}
	if _, err := Register(reg, Options{Namespace: "other", NameLabel: true}); err != nil {
		t.Fatalf("an observer of namespace other: %v", err)
	}
	// A collector of the library's metric name with other labels is
	// refused as well.
	clash := prometheus.NewGauge(prometheus.GaugeOpts{Name: "other_leases_held", Help: "clash"})
	if err := reg.Register(clash); err == nil {
		t.Fatal("a gauge other_leases_held registered beside the observer's")
	}
}

// The metrics pass client_golang's linter (promlint), with and without the
// name label, once every series exists.
func TestMetricsLint(t *testing.T) {
	for _, opt := range []Options{{}, {NameLabel: true}} {
		o := New(opt)
		feed(o,
			ev(pglease.EventAcquired, "a"), ev(pglease.EventReleased, "a"),
			pglease.Event{Kind: pglease.EventReleased, Name: "a", Client: "c1", Err: errors.New("x")},
			ev(pglease.EventHeartbeat, ""), ev(pglease.EventElected, "e"),
			pglease.Event{Kind: pglease.EventDropped, Client: "c1", Count: 1})
		if n := testutil.CollectAndCount(o); n < 8 {
			t.Fatalf("%+v: %d series, want at least one of each of the 8 metrics", opt, n)
		}
		problems, err := testutil.CollectAndLint(o)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("%+v: %s: %s", opt, p.Metric, p.Text)
		}
	}
}

// Describe announces exactly the metrics Collect exports, under the
// namespace.
func TestDescribeMatchesCollect(t *testing.T) {
	o := New(Options{Namespace: "myapp_leases"})
	ch := make(chan *prometheus.Desc, 32)
	o.Describe(ch)
	close(ch)
	described := map[string]bool{}
	for d := range ch {
		described[descName(d)] = true
	}
	want := metricNames("myapp_leases")
	if len(described) != len(want) {
		t.Fatalf("described %v, want %v", described, want)
	}
	for _, n := range want {
		if !described[n] {
			t.Fatalf("%s not described: %v", n, described)
		}
	}
}

// metricNames lists the observer's metrics under namespace ns.
func metricNames(ns string) []string {
	var names []string
	for _, n := range []string{"events_total", "leases_held", "release_errors_total", "dropped_events_total",
		"renew_latency_seconds", "acquire_wait_seconds", "hold_seconds", "is_leader"} {
		names = append(names, ns+"_"+n)
	}
	return names
}

// descName extracts fqName from a Desc's String (the Desc has no getter).
func descName(d *prometheus.Desc) string {
	s := d.String()
	_, s, _ = strings.Cut(s, `fqName: "`)
	s, _, _ = strings.Cut(s, `"`)
	return s
}

// Observers and scrapes may run concurrently (run with -race).
func TestConcurrentObserveAndCollect(t *testing.T) {
	o, reg := newRegistered(t, Options{NameLabel: true})
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Go(func() {
			client := fmt.Sprint("c", c)
			for i := range 200 {
				name := fmt.Sprint("n", i%10)
				o.Observe(pglease.Event{Kind: pglease.EventAcquired, Name: name, Client: client})
				o.Observe(pglease.Event{Kind: pglease.EventReleased, Name: name, Client: client})
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			if _, err := reg.Gather(); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Wait()
	for i := range 10 {
		if got := value(t, reg, "pglease_leases_held", "name", fmt.Sprint("n", i)); got != 0 {
			t.Fatalf("leases_held{n%d} = %v, want 0", i, got)
		}
	}
	if got := value(t, reg, "pglease_events_total", "event", "acquired", "name", "n3"); got != 80 {
		t.Fatalf("events_total{acquired,n3} = %v, want 80", got)
	}
}
