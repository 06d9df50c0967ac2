package pgleaseotel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/pglease/pglease"
)

// A lease traced from its acquisition to its release: the acquire span
// covers the event's Wait and is a child of the Acquire caller's span, the
// lease span a child of the acquire span, ended at the release; the release
// span covers the event's Latency, is a child of the Release caller's span
// and links to the lease span.
func TestSpansOfAReleasedLease(t *testing.T) {
	tm := newTelemetry(t, false)
	tracer := tm.tp.Tracer("test")
	acquireCtx, caller := tracer.Start(context.Background(), "caller")
	defer caller.End()
	const wait, latency, hold = 3 * time.Second, 40 * time.Millisecond, 5 * time.Second
	tm.observe(pglease.Event{Kind: pglease.EventAcquired, Name: "job", Client: "c1", Owner: "me", Token: 7, Wait: wait, Context: acquireCtx})

	acquire := one(t, "pglease.acquire", tm.ended("pglease.acquire"))
	if d := acquire.EndTime().Sub(acquire.StartTime()); d != wait {
		t.Errorf("acquire span lasts %s, want the wait %s", d, wait)
	}
	if acquire.Parent().SpanID() != caller.SpanContext().SpanID() || acquire.SpanContext().TraceID() != caller.SpanContext().TraceID() {
		t.Errorf("acquire span's parent %v, want the caller's span %v", acquire.Parent(), caller.SpanContext())
	}
	for key, want := range map[string]any{"pglease.lease.name": "job", "pglease.lease.token": int64(7), "pglease.lease.owner": "me", "pglease.client.id": "c1", "pglease.acquire.wait": 3.0} {
		if v, ok := attr(acquire, key); !ok || v.AsInterface() != want {
			t.Errorf("acquire span: %s = %v, want %v", key, v.AsInterface(), want)
		}
	}
	lease := one(t, "open pglease.lease", tm.open("pglease.lease"))
	if lease.Parent().SpanID() != acquire.SpanContext().SpanID() {
		t.Errorf("lease span's parent %v, want the acquire span", lease.Parent())
	}
	if !lease.StartTime().Equal(acquire.EndTime()) {
		t.Errorf("lease span starts at %v, the acquisition at %v", lease.StartTime(), acquire.EndTime())
	}

	releaseCtx, releaser := tracer.Start(context.Background(), "releaser")
	defer releaser.End()
	tm.observe(pglease.Event{Kind: pglease.EventReleased, Name: "job", Client: "c1", Owner: "me", Token: 7, Latency: latency, Hold: hold, Context: releaseCtx})

	lease = one(t, "pglease.lease", tm.ended("pglease.lease"))
	if lease.Status().Code != codes.Unset {
		t.Errorf("lease span status %v", lease.Status())
	}
	if v, _ := attr(lease, "pglease.lease.hold"); v.AsFloat64() != hold.Seconds() {
		t.Errorf("lease span hold %v, want %v", v.AsFloat64(), hold.Seconds())
	}
	release := one(t, "pglease.release", tm.ended("pglease.release"))
	if d := release.EndTime().Sub(release.StartTime()); d != latency {
		t.Errorf("release span lasts %s, want the latency %s", d, latency)
	}
	if release.Parent().SpanID() != releaser.SpanContext().SpanID() {
		t.Errorf("release span's parent %v, want the releaser's span", release.Parent())
	}
	if links := release.Links(); len(links) != 1 || links[0].SpanContext.SpanID() != lease.SpanContext().SpanID() {
		t.Errorf("release span links %v, want the lease span", links)
	}
	if !lease.EndTime().Equal(release.EndTime()) {
		t.Errorf("lease span ends at %v, the release at %v", lease.EndTime(), release.EndTime())
	}
	if n := len(tm.open("pglease.lease")); n != 0 {
		t.Errorf("%d lease spans left open", n)
	}
}

// A lost lease ends its span with status Error and the cause; no release
// span. Without a caller's span, the acquire span is a root.
func TestLeaseSpanOfALostLease(t *testing.T) {
	tm := newTelemetry(t, false)
	cause := errors.New("renewal refused")
	tm.observe(
		pglease.Event{Kind: pglease.EventAcquired, Name: "job", Token: 1},
		pglease.Event{Kind: pglease.EventLost, Name: "job", Token: 1, Err: cause, Hold: time.Second},
	)
	if acquire := one(t, "pglease.acquire", tm.ended("pglease.acquire")); acquire.Parent().IsValid() {
		t.Errorf("acquire span without a caller's span has parent %v", acquire.Parent())
	}
	lease := one(t, "pglease.lease", tm.ended("pglease.lease"))
	if st := lease.Status(); st.Code != codes.Error || st.Description != cause.Error() {
		t.Errorf("lease span status %+v, want Error %q", st, cause)
	}
	if ev := lease.Events(); len(ev) != 1 || ev[0].Name != "exception" {
		t.Errorf("lease span events %+v, want the cause recorded", ev)
	}
	if n := len(tm.ended("pglease.release")); n != 0 {
		t.Errorf("%d release spans for a lost lease", n)
	}
}

// A release whose row could not be deleted marks the release and lease
// spans Error; without a span in Release's context, the release span is a
// child of the lease span.
func TestSpansOfAFailedRelease(t *testing.T) {
	tm := newTelemetry(t, false)
	failure := errors.New("connection refused")
	tm.observe(
		pglease.Event{Kind: pglease.EventAcquired, Name: "job", Token: 1},
		pglease.Event{Kind: pglease.EventReleased, Name: "job", Token: 1, Err: failure, Context: context.Background()},
	)
	lease := one(t, "pglease.lease", tm.ended("pglease.lease"))
	release := one(t, "pglease.release", tm.ended("pglease.release"))
	for _, s := range []sdktrace.ReadOnlySpan{lease, release} {
		if st := s.Status(); st.Code != codes.Error || st.Description != failure.Error() {
			t.Errorf("%s status %+v, want Error %q", s.Name(), st, failure)
		}
	}
	if release.Parent().SpanID() != lease.SpanContext().SpanID() {
		t.Errorf("release span's parent %v, want the lease span", release.Parent())
	}
}

// A stale lease taken over (an EventAcquired with Previous) is an event
// of the lease span.
func TestStaleReclaimedIsAnEventOfTheLeaseSpan(t *testing.T) {
	tm := newTelemetry(t, false)
	tm.observe(pglease.Event{Kind: pglease.EventAcquired, Name: "job", Token: 2, Previous: "crashed"})
	ev := one(t, "open pglease.lease", tm.open("pglease.lease")).Events()
	if len(ev) != 1 || ev[0].Name != "pglease.stale_reclaimed" || len(ev[0].Attributes) != 1 || ev[0].Attributes[0].Value.AsString() != "crashed" {
		t.Errorf("lease span events %+v", ev)
	}
}

// EventDropped ends, as inferred, the lease spans of its client's names
// that it does not list as held, and no others; an acquisition of a name
// whose earlier lease span is still open ends that one.
func TestDroppedEventsEndTheSpansOfLeasesNoLongerHeld(t *testing.T) {
	tm := newTelemetry(t, false)
	tm.observe(
		pglease.Event{Kind: pglease.EventAcquired, Client: "c1", Name: "a", Token: 1},
		pglease.Event{Kind: pglease.EventAcquired, Client: "c1", Name: "b", Token: 2},
		pglease.Event{Kind: pglease.EventAcquired, Client: "c2", Name: "a", Token: 3},
		// c1 released a and b, then acquired b again, unreported.
		pglease.Event{Kind: pglease.EventDropped, Client: "c1", Count: 3, Held: []string{"b"}},
	)
	ended := one(t, "pglease.lease", tm.ended("pglease.lease"))
	if v, _ := attr(ended, "pglease.lease.token"); v.AsInt64() != 1 {
		t.Fatalf("ended lease span of token %d, want 1", v.AsInt64())
	}
	if v, ok := attr(ended, "pglease.lease.end_inferred"); !ok || !v.AsBool() || ended.Status().Code != codes.Unset {
		t.Errorf("inferred end: attribute %v, status %v", v.AsInterface(), ended.Status())
	}
	if n := len(tm.open("pglease.lease")); n != 2 {
		t.Fatalf("%d lease spans open, want c1's b and c2's a", n)
	}
	// c1's next lease of b: the span of token 2 has ended unreported.
	tm.observe(pglease.Event{Kind: pglease.EventAcquired, Client: "c1", Name: "b", Token: 4})
	var tokens []int64
	for _, s := range tm.open("pglease.lease") {
		v, _ := attr(s, "pglease.lease.token")
		tokens = append(tokens, v.AsInt64())
	}
	if len(tokens) != 2 || tokens[0] != 3 || tokens[1] != 4 {
		t.Errorf("open lease spans of tokens %v, want [3 4]", tokens)
	}
}

// The observer's spans keep the caller's trace but not its context: a
// cancelled context is a parent like any other.
func TestCancelledCallerContextIsStillAParent(t *testing.T) {
	tm := newTelemetry(t, false)
	ctx, caller := tm.tp.Tracer("test").Start(context.Background(), "caller")
	caller.End()
	ctx, cancel := context.WithCancel(ctx)
	cancel()
	tm.observe(pglease.Event{Kind: pglease.EventAcquired, Name: "job", Token: 1, Context: ctx})
	if acquire := one(t, "pglease.acquire", tm.ended("pglease.acquire")); acquire.Parent().SpanID() != caller.SpanContext().SpanID() {
		t.Errorf("acquire span's parent %v, want the caller's", acquire.Parent())
	}
}
