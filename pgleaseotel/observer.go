package pgleaseotel

import (
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/holdings"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/pglease/pglease/pgleaseotel"

// Attribute keys of the metrics and spans.
const (
	attrKind     = attribute.Key("pglease.event.kind")
	attrName     = attribute.Key("pglease.lease.name")
	attrToken    = attribute.Key("pglease.lease.token")
	attrOwner    = attribute.Key("pglease.lease.owner")
	attrClient   = attribute.Key("pglease.client.id")
	attrWait     = attribute.Key("pglease.acquire.wait")
	attrHold     = attribute.Key("pglease.lease.hold")
	attrLatency  = attribute.Key("pglease.release.duration")
	attrPrevious = attribute.Key("pglease.lease.previous_owner")
	attrInferred = attribute.Key("pglease.lease.end_inferred")
)

// Options configures an [Observer].
type Options struct {
	// MeterProvider provides the meter. Default: otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// TracerProvider provides the tracer. Default:
	// otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// NameAttribute adds the lease name as an attribute of the metrics.
	// Leave it off when names are unbounded (one per job id, say): every
	// name is a time series, kept for the life of the process.
	NameAttribute bool
}

// Observer is a [pglease.Observer] that records metrics and spans. One
// Observer may serve several clients (events name theirs); it is safe for
// concurrent use.
type Observer struct {
	tracer trace.Tracer
	inst   instruments
	byName bool

	mu    sync.Mutex
	tally *holdings.Tally                            // what the clients hold, behind the gauges
	spans map[string]map[string]map[int64]trace.Span // client id → name → token → open lease span
	names map[string]metric.MeasurementOption
}

// New returns an Observer recording to the providers of opts. The error is
// that of creating an instrument.
func New(opts Options) (*Observer, error) {
	mp, tp := opts.MeterProvider, opts.TracerProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	o := &Observer{
		tracer: tp.Tracer(ScopeName),
		byName: opts.NameAttribute,
		tally:  holdings.New(),
		spans:  map[string]map[string]map[int64]trace.Span{},
		names:  map[string]metric.MeasurementOption{},
	}
	if err := o.inst.init(mp.Meter(ScopeName), o.observeGauges); err != nil {
		return nil, err
	}
	return o, nil
}

// Observe implements [pglease.Observer]. Spans are started and ended
// outside the observer's lock, so that a slow span processor delays only
// the client whose event it is.
func (o *Observer) Observe(e pglease.Event) {
	now := time.Now()
	o.record(e)
	var lease trace.Span
	if e.Kind == pglease.EventAcquired {
		lease = o.startLease(e, now)
	}
	var ended []trace.Span // lease spans whose end was lost to dropped events
	o.mu.Lock()
	o.tally.Observe(e)
	switch e.Kind {
	case pglease.EventAcquired:
		// A client holds a name once at a time: a lease span of the name
		// still open lost its end to dropped events.
		ended = o.takeSpans(e.Client, e.Name)
		if o.spans[e.Client] == nil {
			o.spans[e.Client] = map[string]map[int64]trace.Span{}
		}
		o.spans[e.Client][e.Name] = map[int64]trace.Span{e.Token: lease}
	case pglease.EventReleased, pglease.EventLost:
		lease = o.spans[e.Client][e.Name][e.Token]
		delete(o.spans[e.Client][e.Name], e.Token)
		if len(o.spans[e.Client][e.Name]) == 0 {
			o.takeSpans(e.Client, e.Name)
		}
	case pglease.EventDropped:
		for name := range o.spans[e.Client] {
			if !o.tally.Holds(e.Client, name) {
				ended = append(ended, o.takeSpans(e.Client, name)...)
			}
		}
	}
	o.mu.Unlock()
	endInferred(now, ended...)
	switch e.Kind {
	case pglease.EventReleased, pglease.EventLost:
		o.endLease(lease, e, now)
	}
}

// takeSpans removes and returns the open lease spans of the client with id
// on name, and forgets the client once it has none. o.mu is held.
func (o *Observer) takeSpans(id, name string) []trace.Span {
	var spans []trace.Span
	for _, s := range o.spans[id][name] {
		spans = append(spans, s)
	}
	delete(o.spans[id], name)
	if len(o.spans[id]) == 0 {
		delete(o.spans, id)
	}
	return spans
}

// nameOption returns the measurement option of the attribute set that
// holds only the lease name, cached.
func (o *Observer) nameOption(name string) metric.MeasurementOption {
	opt, ok := o.names[name]
	if !ok {
		opt = metric.WithAttributeSet(attribute.NewSet(attrName.String(name)))
		o.names[name] = opt
	}
	return opt
}
