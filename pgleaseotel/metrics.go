package pgleaseotel

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/pglease/pglease"
)

// instruments are the Observer's metrics.
type instruments struct {
	events        metric.Int64Counter
	releaseErrors metric.Int64Counter
	dropped       metric.Int64Counter
	renew         metric.Float64Histogram
	wait          metric.Float64Histogram
	hold          metric.Float64Histogram
	held          metric.Int64ObservableGauge
	leader        metric.Int64ObservableGauge
}

// Bucket boundaries, in seconds: renewal round trips from half a
// millisecond to seconds; waits and holds from milliseconds to a day.
var (
	renewBuckets = []float64{0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096}
	waitBuckets  = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600}
	holdBuckets  = []float64{0.01, 0.1, 1, 10, 60, 300, 900, 3600, 4 * 3600, 24 * 3600}
)

// init creates the instruments on m and registers gauges as the callback
// of the two gauges.
func (in *instruments) init(m metric.Meter, gauges metric.Callback) error {
	var err, e error
	add := func(e error) { err = errors.Join(err, e) }
	in.events, e = m.Int64Counter("pglease.events", metric.WithUnit("{event}"),
		metric.WithDescription("Lease events, by kind: acquired, released, contended, lost, renewed, stale_reclaimed, alert, elected, demoted, leader_changed, heartbeat, dropped."))
	add(e)
	in.releaseErrors, e = m.Int64Counter("pglease.release.errors", metric.WithUnit("{error}"),
		metric.WithDescription("Releases whose row could not be deleted; the lease ended all the same and its row expires after its TTL."))
	add(e)
	in.dropped, e = m.Int64Counter("pglease.events.dropped", metric.WithUnit("{event}"),
		metric.WithDescription("Events a client dropped because its observer fell behind."))
	add(e)
	in.renew, e = m.Float64Histogram("pglease.renew.duration", metric.WithUnit("s"),
		metric.WithDescription("Round trip of successful renewal statements, one per statement."),
		metric.WithExplicitBucketBoundaries(renewBuckets...))
	add(e)
	in.wait, e = m.Float64Histogram("pglease.acquire.wait", metric.WithUnit("s"),
		metric.WithDescription("Time from an acquisition call to the acquisition."),
		metric.WithExplicitBucketBoundaries(waitBuckets...))
	add(e)
	in.hold, e = m.Float64Histogram("pglease.lease.hold", metric.WithUnit("s"),
		metric.WithDescription("How long leases were held, by how they ended (released or lost)."),
		metric.WithExplicitBucketBoundaries(holdBuckets...))
	add(e)
	in.held, e = m.Int64ObservableGauge("pglease.leases.held", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases held by this process's clients."))
	add(e)
	in.leader, e = m.Int64ObservableGauge("pglease.elector.leader", metric.WithUnit("{term}"),
		metric.WithDescription("1 while an elector of this process is in a term (its lead function runs), else 0; by elector name."))
	add(e)
	if err != nil {
		return err
	}
	_, err = m.RegisterCallback(gauges, in.held, in.leader)
	return err
}

// record updates the counters and histograms for e.
func (o *Observer) record(e pglease.Event) {
	ctx := context.Background()
	kind := attrKind.String(e.Kind.String())
	var named []attribute.KeyValue // the name, if NameAttribute and e has one
	if o.byName && e.Name != "" {
		named = []attribute.KeyValue{attrName.String(e.Name)}
	}
	o.inst.events.Add(ctx, 1, metric.WithAttributes(append(named, kind)...))
	if e.Kind == pglease.EventAcquired && e.Previous != "" {
		// An acquisition that took over an expired lease is counted as
		// stale_reclaimed too: the library reports both in one event.
		o.inst.events.Add(ctx, 1, metric.WithAttributes(append(named, attrKind.String("stale_reclaimed"))...))
	}
	switch e.Kind {
	case pglease.EventAcquired:
		o.inst.wait.Record(ctx, e.Wait.Seconds(), metric.WithAttributes(named...))
	case pglease.EventReleased, pglease.EventLost:
		o.inst.hold.Record(ctx, e.Hold.Seconds(), metric.WithAttributes(append(named, kind)...))
		if e.Kind == pglease.EventReleased && e.Err != nil {
			o.inst.releaseErrors.Add(ctx, 1, metric.WithAttributes(named...))
		}
	case pglease.EventHeartbeat:
		o.inst.renew.Record(ctx, e.Latency.Seconds())
	case pglease.EventDropped:
		o.inst.dropped.Add(ctx, int64(e.Count))
	}
}

// observeGauges reports the gauges: the sums over clients of the leases
// held and of the terms begun, by name or in all. Names once reported and
// now at zero are reported 0.
func (o *Observer) observeGauges(_ context.Context, obs metric.Observer) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	held, leading := o.tally.Held(), o.tally.Leading()
	if o.byName {
		for _, n := range o.tally.Names() {
			obs.ObserveInt64(o.inst.held, int64(held[n]), o.nameOption(n))
		}
	} else {
		var total int64
		for _, k := range held {
			total += int64(k)
		}
		obs.ObserveInt64(o.inst.held, total)
	}
	for _, n := range o.tally.Electors() {
		obs.ObserveInt64(o.inst.leader, int64(leading[n]), o.nameOption(n))
	}
	return nil
}
