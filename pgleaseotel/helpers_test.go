package pgleaseotel_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/internal/pgtest"
	"github.com/pglease/pglease/pgleaseotel"
)

// telemetry is an Observer with in-memory providers: spans go to spans,
// metrics are read from reader.
type telemetry struct {
	obs    *pgleaseotel.Observer
	tp     *sdktrace.TracerProvider
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
}

func newTelemetry(t *testing.T, nameAttribute bool) *telemetry {
	t.Helper()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	obs, err := pgleaseotel.New(pgleaseotel.Options{MeterProvider: mp, TracerProvider: tp, NameAttribute: nameAttribute})
	if err != nil {
		t.Fatal(err)
	}
	return &telemetry{obs: obs, tp: tp, spans: spans, reader: reader}
}

func (tm *telemetry) observe(events ...pglease.Event) {
	for _, e := range events {
		tm.obs.Observe(e)
	}
}

// ended returns the ended spans named name, in the order they ended.
func (tm *telemetry) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tm.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// open returns the spans named name started and not ended.
func (tm *telemetry) open(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tm.spans.Started() {
		if s.Name() == name && s.EndTime().IsZero() {
			out = append(out, s)
		}
	}
	return out
}

// one returns the single span of spans, failing the test if there are
// not exactly one.
func one(t *testing.T, what string, spans []sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
	t.Helper()
	if len(spans) != 1 {
		t.Fatalf("%d %s spans, want 1", len(spans), what)
	}
	return spans[0]
}

// attr returns the span's attribute key.
func attr(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// metrics collects the metrics of the pgleaseotel scope, by name.
func (tm *telemetry) metrics(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tm.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != pgleaseotel.ScopeName {
			t.Fatalf("scope %q, want %q", sm.Scope.Name, pgleaseotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// intValue returns the value of the point of the int64 sum or gauge name
// whose attributes are exactly attrs.
func intValue(t *testing.T, ms map[string]metricdata.Metrics, name string, attrs ...attribute.KeyValue) (int64, bool) {
	t.Helper()
	var points []metricdata.DataPoint[int64]
	switch d := ms[name].Data.(type) {
	case metricdata.Sum[int64]:
		points = d.DataPoints
	case metricdata.Gauge[int64]:
		points = d.DataPoints
	case nil:
		return 0, false
	default:
		t.Fatalf("%s is a %T", name, d)
	}
	want := attribute.NewSet(attrs...)
	for _, p := range points {
		if p.Attributes.Equals(&want) {
			return p.Value, true
		}
	}
	return 0, false
}

// mustInt is intValue failing the test when there is no such point.
func mustInt(t *testing.T, ms map[string]metricdata.Metrics, name string, attrs ...attribute.KeyValue) int64 {
	t.Helper()
	v, ok := intValue(t, ms, name, attrs...)
	if !ok {
		t.Fatalf("%s has no point %v: %+v", name, attrs, ms[name].Data)
	}
	return v
}

// histogram returns the count and sum of the point of the float64
// histogram name whose attributes are exactly attrs (zeros if none).
func histogram(t *testing.T, ms map[string]metricdata.Metrics, name string, attrs ...attribute.KeyValue) (uint64, float64) {
	t.Helper()
	d, ok := ms[name].Data.(metricdata.Histogram[float64])
	if !ok {
		return 0, 0
	}
	want := attribute.NewSet(attrs...)
	for _, p := range d.DataPoints {
		if p.Attributes.Equals(&want) {
			return p.Count, p.Sum
		}
	}
	return 0, 0
}

// signals is an Observer that passes events to next and then records
// them, so that a test can wait until next has seen an event.
type signals struct {
	next    pglease.Observer
	mu      sync.Mutex
	events  []pglease.Event
	seen    int           // events already returned by await
	changed chan struct{} // closed and replaced at every event
}

func newSignals(next pglease.Observer) *signals {
	return &signals{next: next, changed: make(chan struct{})}
}

func (s *signals) Observe(e pglease.Event) {
	s.next.Observe(e)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, e)
	close(s.changed)
	s.changed = make(chan struct{})
}

// await returns the next event, after those already returned, of kind for
// name; it fails the test if none comes within pgtest.Patience.
func (s *signals) await(t *testing.T, kind pglease.EventKind, name string) pglease.Event {
	t.Helper()
	timer := time.NewTimer(pgtest.Patience)
	defer timer.Stop()
	for {
		s.mu.Lock()
		for s.seen < len(s.events) {
			e := s.events[s.seen]
			s.seen++
			if e.Kind == kind && e.Name == name {
				s.mu.Unlock()
				return e
			}
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-timer.C:
			t.Fatalf("timed out after %s waiting for %s of %q", pgtest.Patience, kind, name)
		}
	}
}
