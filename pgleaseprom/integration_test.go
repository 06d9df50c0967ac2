package pgleaseprom

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
	"github.com/pglease/pglease/internal/pgtest"
)

// The tests share a throwaway PostgreSQL cluster (or PGLEASE_TEST_DSN's
// server), and fail on goroutines leaked past them.
func TestMain(m *testing.M) { pgtest.Main(m) }

// eventLog records a client's events, after the observer under test has
// seen each, so that a test waits for an event rather than for time.
type eventLog struct {
	mu     sync.Mutex
	events []pglease.Event
	next   int           // the first event await has not looked at
	signal chan struct{} // closed and replaced on every event
}

func newEventLog() *eventLog { return &eventLog{signal: make(chan struct{})} }

// tee returns an observer passing each event to o, then recording it.
func (l *eventLog) tee(o pglease.Observer) pglease.Observer {
	return observerFunc(func(e pglease.Event) {
		o.Observe(e)
		l.mu.Lock()
		l.events = append(l.events, e)
		close(l.signal)
		l.signal = make(chan struct{})
		l.mu.Unlock()
	})
}

// await returns the first event not yet awaited that matches, skipping the
// others, within pgtest.Patience.
func (l *eventLog) await(t *testing.T, what string, match func(pglease.Event) bool) pglease.Event {
	t.Helper()
	timer := time.NewTimer(pgtest.Patience)
	defer timer.Stop()
	for {
		l.mu.Lock()
		for l.next < len(l.events) {
			e := l.events[l.next]
			l.next++
			if match(e) {
				l.mu.Unlock()
				return e
			}
		}
		signal := l.signal
		l.mu.Unlock()
		select {
		case <-signal:
		case <-timer.C:
			t.Fatalf("timed out after %s waiting for %s", pgtest.Patience, what)
		}
	}
}

func is(kind pglease.EventKind, name string) func(pglease.Event) bool {
	return func(e pglease.Event) bool { return e.Kind == kind && e.Name == name }
}

func openClient(t *testing.T, cfg pglease.Config) *pglease.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pglease.Open(ctx, pgtest.DSN(t), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// A real client's events through the observer: acquisitions, heartbeats,
// a release, a loss (force-released by another client), an election, and
// a release whose delete fails (the table is gone). Every lease ends
// counted, whatever the way.
func TestWithClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*pgtest.Patience)
	defer cancel()
	reg := prometheus.NewRegistry()
	o, err := Register(reg, Options{NameLabel: true})
	if err != nil {
		t.Fatal(err)
	}
	log := newEventLog()
	table := pgtest.Schema(t) + ".leases"
	c := openClient(t, pglease.Config{Table: table, Observer: log.tee(o)})
	operator := openClient(t, pglease.Config{Table: table})

	// Acquire, renew (TTL 1 s: a heartbeat every third of a second),
	// release.
	l, err := c.TryAcquire(ctx, "job", pglease.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	log.await(t, "the acquisition", is(pglease.EventAcquired, "job"))
	if got := value(t, reg, "pglease_leases_held", "name", "job"); got != 1 {
		t.Fatalf("leases_held{job} = %v while held, want 1", got)
	}
	for i := range 2 {
		log.await(t, fmt.Sprintf("heartbeat %d", i+1), func(e pglease.Event) bool {
			return e.Kind == pglease.EventHeartbeat && e.Count == 1
		})
	}
	if n, _ := histogram(t, reg, "pglease_renew_latency_seconds"); n < 2 {
		t.Fatalf("renew_latency_seconds count %d after two heartbeats", n)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	log.await(t, "the release", is(pglease.EventReleased, "job"))

	// A lease taken by another client is lost at the next renewal.
	if _, err := c.TryAcquire(ctx, "taken", pglease.WithTTL(time.Second)); err != nil {
		t.Fatal(err)
	}
	log.await(t, "the acquisition of taken", is(pglease.EventAcquired, "taken"))
	if _, err := admin.ForceRelease(ctx, operator, "taken"); err != nil {
		t.Fatal(err)
	}
	log.await(t, "the loss of the force-released lease", is(pglease.EventLost, "taken"))

	// An election: is_leader is 1 during the term, 0 after it.
	ectx, stop := context.WithCancel(ctx)
	leading := make(chan struct{})
	el, err := c.NewElector("leader", func(ctx context.Context) error {
		close(leading)
		<-ctx.Done()
		return nil
	}, pglease.ElectorConfig{LeaseOptions: []pglease.Option{pglease.WithTTL(time.Second)}})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- el.Run(ectx) }()
	pgtest.Receive(t, leading, "the elector's term")
	log.await(t, "the election", is(pglease.EventElected, "leader"))
	if got := value(t, reg, "pglease_is_leader", "name", "leader"); got != 1 {
		t.Fatalf("is_leader{leader} = %v during the term, want 1", got)
	}
	stop()
	if err := pgtest.Receive(t, ran, "Run to return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	log.await(t, "the demotion", is(pglease.EventDemoted, "leader"))
	log.await(t, "the release of the term's lease", is(pglease.EventReleased, "leader"))
	if got := value(t, reg, "pglease_is_leader", "name", "leader"); got != 0 {
		t.Fatalf("is_leader{leader} = %v after the term, want 0", got)
	}

	// A release that cannot delete its row (a trigger refuses the delete;
	// the error is not retryable) still ends the lease for the gauge.
	doomed, err := c.TryAcquire(ctx, "doomed")
	if err != nil {
		t.Fatal(err)
	}
	log.await(t, "the acquisition of doomed", is(pglease.EventAcquired, "doomed"))
	schema := table[:len(table)-len(".leases")]
	pgtest.Exec(t, fmt.Sprintf(`CREATE FUNCTION %[1]s.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$;
		CREATE TRIGGER refuse BEFORE DELETE ON %[2]s FOR EACH ROW EXECUTE FUNCTION %[1]s.refuse()`, schema, table))
	relErr := doomed.Release(ctx)
	if relErr == nil {
		t.Fatal("Release succeeded though a trigger refused its delete")
	}
	e := log.await(t, "the failed release", is(pglease.EventReleased, "doomed"))
	if e.Err == nil {
		t.Fatalf("EventReleased of the failed release has no Err (Release returned %v)", relErr)
	}

	for _, name := range []string{"job", "taken", "leader", "doomed"} {
		if got := value(t, reg, "pglease_leases_held", "name", name); got != 0 {
			t.Errorf("leases_held{%s} = %v after its end, want 0", name, got)
		}
		if n, _ := histogram(t, reg, "pglease_acquire_wait_seconds", "name", name); n != 1 {
			t.Errorf("acquire_wait_seconds{%s} count %d, want 1", name, n)
		}
		if n, _ := histogram(t, reg, "pglease_hold_seconds", "name", name); n != 1 {
			t.Errorf("hold_seconds{%s} count %d, want 1", name, n)
		}
	}
	for name, want := range map[string]float64{"job": 0, "doomed": 1} {
		if got := value(t, reg, "pglease_release_errors_total", "name", name); got != want {
			t.Errorf("release_errors_total{%s} = %v, want %v", name, got, want)
		}
	}
	if got := value(t, reg, "pglease_events_total", "event", "lost", "name", "taken"); got != 1 {
		t.Errorf("events_total{lost,taken} = %v, want 1", got)
	}
	if got := value(t, reg, "pglease_dropped_events_total"); got != 0 {
		t.Errorf("dropped_events_total = %v, want 0", got)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	if testing.Verbose() {
		scrape, err := testutil.GatherAndFormat(reg, expfmt.TypeTextPlain, metricNames("pglease")...)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the scrape after the scenario:\n%s", scrape)
	}
}

// observerFunc adapts a function to pglease.Observer.
type observerFunc func(pglease.Event)

func (f observerFunc) Observe(e pglease.Event) { f(e) }
