package pglease

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// runElector runs e until the test ends; at cleanup it cancels Run's
// context and waits for Run to return. Register what unblocks a lead
// function after calling it, so that it runs first.
func runElector(t *testing.T, ctx context.Context, e *Elector) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		pgtest.Receive(t, done, "Run to return")
	})
}

// currentTerm returns the lease of e's current term, or nil.
func currentTerm(e *Elector) *Lease {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.term
}

// probe serves one request to e's health handler.
func probe(e *Elector) (int, string) {
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	return rec.Code, rec.Body.String()
}

// An elector that does not lead is healthy: one that never ran, and one
// that campaigns while another instance leads.
func TestElectorIsHealthyWhileNotLeading(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	other := testClient(t, Config{Table: c.cfg.Table})
	idle, err := c.NewElector("healthy", func(context.Context) error { return nil }, ElectorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := idle.Check(nil); err != nil {
		t.Fatalf("an elector that never ran: %v", err)
	}
	if code, body := probe(idle); code != http.StatusOK || body != "ok" {
		t.Fatalf("probe: %d %q", code, body)
	}
	held, err := other.Acquire(ctx, "healthy")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(ctx) }()
	e, err := c.NewElector("healthy", func(ctx context.Context) error { <-ctx.Done(); return nil }, ElectorConfig{HealthTolerance: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runElector(t, ctx, e)
	waitSubscribed(t, c, "healthy", 1) // campaigning
	if err := e.Check(nil); err != nil {
		t.Fatalf("a campaigning elector: %v", err)
	}
}

// A leader whose renewals succeed stays healthy past the deadlines its
// lease had, with the default tolerance.
func TestElectorIsHealthyWhileRenewalsKeepItsLease(t *testing.T) {
	ctx := testCtx(t)
	log := newEventLog()
	c := testClient(t, Config{Observer: log})
	elected := make(chan struct{}, 1)
	e, err := c.NewElector("renewed", func(ctx context.Context) error {
		elected <- struct{}{}
		<-ctx.Done()
		return nil
	}, ElectorConfig{LeaseOptions: []Option{WithTTL(time.Second)}})
	if err != nil {
		t.Fatal(err)
	}
	runElector(t, ctx, e)
	pgtest.Receive(t, elected, "the elector to lead")
	l := currentTerm(e)
	awaitKeptPast(t, log, l, l.Deadline().Add(c.renewEvery(l.TTL())))
	if err := e.Check(nil); err != nil {
		t.Fatalf("a leader renewing its lease: %v", err)
	}
	if code, body := probe(e); code != http.StatusOK || body != "ok" {
		t.Fatalf("probe: %d %q", code, body)
	}
}

// Renewals fail, the lease reaches its local deadline and the term's
// context is cancelled, but the lead function does not return: past the
// deadline plus the tolerance the elector is unhealthy, and says why. Once
// lead returns it is healthy again, and the Demoted event carries the loss.
func TestElectorIsUnhealthyWhenLeadOutlivesALeaseLostToFailingRenewals(t *testing.T) {
	ctx := testCtx(t)
	log := newEventLog()
	c, proxy := proxiedClient(t, Config{Observer: log})
	const tolerance = 100 * time.Millisecond
	elected := make(chan struct{}, 1)
	cancelled := make(chan error, 1)
	unblock := make(chan struct{})
	e, err := c.NewElector("wedged", func(ctx context.Context) error {
		elected <- struct{}{}
		<-ctx.Done()
		cancelled <- context.Cause(ctx)
		<-unblock // a cleanup stuck on something
		return nil
	}, ElectorConfig{LeaseOptions: []Option{WithTTL(time.Second)}, HealthTolerance: tolerance})
	if err != nil {
		t.Fatal(err)
	}
	runElector(t, ctx, e)
	unblocked := false
	unblockLead := func() {
		if !unblocked {
			unblocked = true
			close(unblock)
			proxy.Blackhole(false)
			proxy.ResetAll() // connections that lost data reconnect
		}
	}
	t.Cleanup(unblockLead)
	pgtest.Receive(t, elected, "the elector to lead")
	if err := e.Check(nil); err != nil {
		t.Fatalf("a new leader: %v", err)
	}
	l := currentTerm(e)
	proxy.Blackhole(true)
	if cause := pgtest.Receive(t, cancelled, "the term to end"); !errors.Is(cause, ErrLeaseLost) {
		t.Fatalf("the term ended with %v", cause)
	}
	// Measured from the local deadline, the end of the term.
	dl := l.Deadline()
	if err := e.check(dl.Add(tolerance)); err != nil {
		t.Fatalf("within the tolerance: %v", err)
	}
	if err := e.check(dl.Add(tolerance + time.Millisecond)); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("past the tolerance: %v", err)
	}
	pgtest.WaitFor(t, patience, "the probe to fail", func() bool { return e.Check(nil) != nil })
	code, body := probe(e)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "has not returned") || !strings.Contains(body, "lease lost") {
		t.Fatalf("probe: %d %q", code, body)
	}
	unblockLead()
	pgtest.WaitFor(t, patience, "the probe to pass once lead returned", func() bool { return e.Check(nil) == nil })
	d := log.await(t, "the Demoted event", is(EventDemoted, "wedged"))
	if d.Token != l.Token() || !errors.Is(d.Err, ErrLeaseLost) {
		t.Fatalf("Demoted %+v", d)
	}
}

// A lead function that ignores the cancellation of its context after a
// resignation keeps its lease renewed; the elector is unhealthy once the
// tolerance has passed since the resignation.
func TestElectorIsUnhealthyWhenLeadIgnoresCancellation(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	const tolerance = 100 * time.Millisecond
	elected := make(chan struct{}, 1)
	unblock := make(chan struct{})
	e, err := c.NewElector("deaf", func(context.Context) error {
		elected <- struct{}{}
		<-unblock
		return nil
	}, ElectorConfig{HealthTolerance: tolerance})
	if err != nil {
		t.Fatal(err)
	}
	runElector(t, ctx, e)
	unblocked := false
	unblockLead := func() {
		if !unblocked {
			unblocked = true
			close(unblock)
		}
	}
	t.Cleanup(unblockLead)
	pgtest.Receive(t, elected, "the elector to lead")
	before := time.Now()
	e.Resign()
	pgtest.WaitFor(t, patience, "the probe to fail", func() bool { return e.Check(nil) != nil })
	if err := e.Check(nil); !errors.Is(err, errResigned) {
		t.Fatalf("Check: %v", err)
	}
	// The term ended at the resignation, not at the lease's deadline (the
	// lease is still renewed).
	if err := e.check(before.Add(tolerance)); err != nil {
		t.Fatalf("within the tolerance of the resignation: %v", err)
	}
	if code, body := probe(e); code != http.StatusServiceUnavailable || !strings.Contains(body, "resigned") {
		t.Fatalf("probe: %d %q", code, body)
	}
	unblockLead()
	pgtest.WaitFor(t, patience, "the probe to pass once lead returned", func() bool { return e.Check(nil) == nil })
}
