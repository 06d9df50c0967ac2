package pgleaseotel

import (
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/pglease/pglease"
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

	mu      sync.Mutex
	clients map[string]*clientState // by client id
	names   map[string]metric.MeasurementOption
	// Names ever reported held (with NameAttribute) or leading, so that
	// the gauges report 0 rather than nothing once they are no longer.
	heldNames, leaderNames map[string]struct{}
}

// clientState is what the events of one client have said so far.
type clientState struct {
	held    map[string]int                  // name → leases held
	leading map[string]int                  // name → elector terms begun and not ended
	spans   map[string]map[int64]trace.Span // name → token → open lease span
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
		tracer:      tp.Tracer(ScopeName),
		byName:      opts.NameAttribute,
		clients:     map[string]*clientState{},
		names:       map[string]metric.MeasurementOption{},
		heldNames:   map[string]struct{}{},
		leaderNames: map[string]struct{}{},
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
	switch e.Kind {
	case pglease.EventAcquired:
		lease := o.startLease(e, now)
		var stale []trace.Span
		o.update(e.Client, func(c *clientState) {
			c.held[e.Name]++
			o.knowHeld(e.Name)
			// A client holds a name once at a time: a lease span of
			// the name still open lost its end to dropped events.
			stale = c.takeSpans(e.Name)
			c.spans[e.Name] = map[int64]trace.Span{e.Token: lease}
		})
		endInferred(now, stale...)
	case pglease.EventReleased, pglease.EventLost:
		var lease trace.Span
		o.update(e.Client, func(c *clientState) {
			count(c.held, e.Name, -1)
			lease = c.spans[e.Name][e.Token]
			delete(c.spans[e.Name], e.Token)
			if len(c.spans[e.Name]) == 0 {
				delete(c.spans, e.Name)
			}
		})
		o.endLease(lease, e, now)
	case pglease.EventStaleReclaimed:
		var lease trace.Span
		o.update(e.Client, func(c *clientState) { lease = c.spans[e.Name][e.Token] })
		if lease != nil {
			lease.AddEvent("pglease.stale_reclaimed", trace.WithTimestamp(now),
				trace.WithAttributes(attrPrevious.String(e.Previous)))
		}
	case pglease.EventElected:
		o.update(e.Client, func(c *clientState) {
			c.leading[e.Name]++
			o.leaderNames[e.Name] = struct{}{}
		})
	case pglease.EventDemoted:
		o.update(e.Client, func(c *clientState) { count(c.leading, e.Name, -1) })
	case pglease.EventDropped:
		var unheld []trace.Span
		o.update(e.Client, func(c *clientState) {
			c.held, c.leading = set(e.Held), set(e.Leading)
			for _, n := range e.Held {
				o.knowHeld(n)
			}
			for _, n := range e.Leading {
				o.leaderNames[n] = struct{}{}
			}
			for name := range c.spans {
				if c.held[name] == 0 {
					unheld = append(unheld, c.takeSpans(name)...)
				}
			}
		})
		endInferred(now, unheld...)
	}
}

// update runs f on the state of the client with id under o.mu, and forgets
// the client once its state is empty.
func (o *Observer) update(id string, f func(*clientState)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := o.clients[id]
	if c == nil {
		c = &clientState{held: map[string]int{}, leading: map[string]int{}, spans: map[string]map[int64]trace.Span{}}
		o.clients[id] = c
	}
	f(c)
	if len(c.held) == 0 && len(c.leading) == 0 && len(c.spans) == 0 {
		delete(o.clients, id)
	}
}

// takeSpans removes and returns the open lease spans of name.
func (c *clientState) takeSpans(name string) []trace.Span {
	var spans []trace.Span
	for _, s := range c.spans[name] {
		spans = append(spans, s)
	}
	delete(c.spans, name)
	return spans
}

// knowHeld notes that name was held, for the held gauge by name.
func (o *Observer) knowHeld(name string) {
	if o.byName {
		o.heldNames[name] = struct{}{}
	}
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

// count adds delta to m[name], deleting names that reach zero.
func count(m map[string]int, name string, delta int) {
	if n := m[name] + delta; n > 0 {
		m[name] = n
	} else {
		delete(m, name)
	}
}

// set counts each of names once.
func set(names []string) map[string]int {
	m := make(map[string]int, len(names))
	for _, n := range names {
		m[n] = 1
	}
	return m
}
