// Package pgleaseprom exports pglease events as Prometheus metrics. It is a
// module of its own so that users of pglease who do not use Prometheus never
// download it.
//
// An [Observer] is both a [pglease.Observer] and a [prometheus.Collector]:
// pass it to the clients' Config and register it with a registry, which
// returns an error (a second observer with the same Namespace in one
// registry, say) instead of panicking:
//
//	obs := pgleaseprom.New(pgleaseprom.Options{})
//	if err := prometheus.DefaultRegisterer.Register(obs); err != nil {
//		return err
//	}
//	client, err := pglease.Open(ctx, dsn, pglease.Config{Observer: obs})
//
// or, in one step, obs, err := pgleaseprom.Register(reg, pgleaseprom.Options{}).
//
// Several clients may share one observer: their metrics are summed, and
// the state behind the gauges is kept per client (per [pglease.Event]
// Client id), so that the snapshot a [pglease.EventDropped] carries
// replaces that client's part only.
//
// The metrics (with the default Namespace "pglease"; labels in brackets,
// name only with [Options.NameLabel]):
//
//	pglease_events_total{event[,name]}          counter    events observed, by kind (pglease.EventKind.String(): acquired, released, lost, heartbeat…), and stale_reclaimed for each acquisition that took over an expired lease (Event.Previous)
//	pglease_leases_held[{name}]                 gauge      leases held now, exact even when events were dropped
//	pglease_release_errors_total[{name}]        counter    releases whose row could not be deleted (the lease ended anyway; the row expires after its TTL)
//	pglease_dropped_events_total                counter    events the clients dropped because this observer fell behind
//	pglease_renew_latency_seconds               histogram  round trip of each renewal statement (one per heartbeat, whatever the number of leases it renews)
//	pglease_acquire_wait_seconds[{name}]        histogram  from the call (Acquire, TryAcquire…) to the acquisition
//	pglease_hold_seconds[{name}]                histogram  how long leases were held, observed when released or lost
//	pglease_is_leader{name}                     gauge      1 while an elector of name of these clients is in a term, else 0
//
// Who waits is the table's, not one client's: a [Queues] collector
// (NewQueues) reads the table's queue at each scrape and exports
// pglease_waiters{table} and pglease_oldest_wait_seconds{table}.
//
// The gauges are computed when scraped, from the acquisitions and ends the
// observer has seen; a client that dropped events reports the state it has
// afterwards (EventDropped's Held and Leading), which replaces what the
// observer had counted for it. The counters and histograms miss the dropped
// events: pglease_dropped_events_total counts them.
package pgleaseprom

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/holdings"
)

// Options configures the metrics. The zero value is ready to use.
type Options struct {
	// Namespace prefixes every metric name. Default "pglease". Two
	// observers registered with one registry need different namespaces.
	Namespace string

	// NameLabel adds the lease name as label "name" to the lease metrics
	// (pglease_events_total, pglease_leases_held,
	// pglease_release_errors_total, pglease_acquire_wait_seconds and
	// pglease_hold_seconds). Every name ever seen is a set of time series
	// until the process exits, a histogram's more than a dozen: leave it
	// off when names are unbounded (one per job id or webhook, the slots
	// "name#i" of a large semaphore). pglease_is_leader always has the
	// name: electors are few.
	NameLabel bool

	// RenewBuckets, WaitBuckets and HoldBuckets are the upper bounds of the
	// buckets of pglease_renew_latency_seconds (default 0.5 ms to 16 s,
	// doubling), pglease_acquire_wait_seconds (default 1 ms to about
	// 17 min, ×4) and pglease_hold_seconds (default 10 ms to a week), in
	// seconds.
	RenewBuckets []float64
	WaitBuckets  []float64
	HoldBuckets  []float64
}

// The buckets used when Options leaves them nil.
var (
	defaultRenewBuckets = prometheus.ExponentialBuckets(0.0005, 2, 16)
	defaultWaitBuckets  = prometheus.ExponentialBuckets(0.001, 4, 11)
	defaultHoldBuckets  = []float64{0.01, 0.1, 1, 10, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600, 7 * 24 * 3600}
)

// Observer is a [pglease.Observer] that keeps Prometheus metrics of the
// events it receives, and the [prometheus.Collector] that exports them.
// Create it with [New]; it is safe for concurrent use, by any number of
// clients.
type Observer struct {
	byName bool

	events        *prometheus.CounterVec
	releaseErrors *prometheus.CounterVec
	dropped       prometheus.Counter
	renew         prometheus.Histogram
	wait          *prometheus.HistogramVec
	hold          *prometheus.HistogramVec
	heldDesc      *prometheus.Desc
	leaderDesc    *prometheus.Desc

	mu    sync.Mutex
	tally *holdings.Tally // what the clients hold, behind the gauges
}

// New returns an observer whose metrics are not registered yet: register
// it, as any collector, with prometheus.Registerer.Register, which fails
// when the metrics are registered already (use another Namespace or
// registry then).
func New(opt Options) *Observer {
	ns := opt.Namespace
	if ns == "" {
		ns = "pglease"
	}
	var nameLabels []string
	if opt.NameLabel {
		nameLabels = []string{"name"}
	}
	buckets := func(b, def []float64) []float64 {
		if b == nil {
			return def
		}
		return b
	}
	o := &Observer{
		byName: opt.NameLabel,
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "events_total",
			Help: "Lease events observed, by kind: acquired, released, contended, lost, renewed, stale_reclaimed, alert, elected, demoted, leader_changed, heartbeat, dropped.",
		}, append([]string{"event"}, nameLabels...)),
		releaseErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "release_errors_total",
			Help: "Releases whose row could not be deleted (the lease ended all the same; its row expires after its TTL).",
		}, nameLabels),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: "dropped_events_total",
			Help: "Events the clients dropped because the observer fell behind (counters and histograms miss them; gauges do not).",
		}),
		renew: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Name: "renew_latency_seconds",
			Help:    "Round trip of successful renewal statements, one per heartbeat whatever the number of leases it renewed.",
			Buckets: buckets(opt.RenewBuckets, defaultRenewBuckets),
		}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "acquire_wait_seconds",
			Help:    "Time from the call (Acquire, TryAcquire, AcquireAll…) to the acquisition, of the leases acquired.",
			Buckets: buckets(opt.WaitBuckets, defaultWaitBuckets),
		}, nameLabels),
		hold: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "hold_seconds",
			Help:    "How long leases were held, observed when they were released or lost.",
			Buckets: buckets(opt.HoldBuckets, defaultHoldBuckets),
		}, nameLabels),
		heldDesc: prometheus.NewDesc(prometheus.BuildFQName(ns, "", "leases_held"),
			"Leases held now by the clients of this observer.", nameLabels, nil),
		leaderDesc: prometheus.NewDesc(prometheus.BuildFQName(ns, "", "is_leader"),
			"1 while an elector of name of the clients of this observer is in a term (its lead function runs), else 0.",
			[]string{"name"}, nil),
		tally: holdings.New(),
	}
	// Series that alerts take increase() of exist before their first
	// event, at 0 (a counter born at 1 shows no increase).
	if opt.NameLabel {
		o.events.WithLabelValues(pglease.EventHeartbeat.String(), "")
		o.events.WithLabelValues(pglease.EventDropped.String(), "")
	} else {
		for _, k := range kinds() {
			o.events.WithLabelValues(k.String())
		}
		o.events.WithLabelValues(staleReclaimed)
		o.releaseErrors.WithLabelValues()
		o.wait.WithLabelValues()
		o.hold.WithLabelValues()
	}
	return o
}

// staleReclaimed is the event label counted, beside "acquired", for an
// acquisition that took over an expired lease (an EventAcquired with
// Previous set): the library reports both in one event.
const staleReclaimed = "stale_reclaimed"

// kinds returns the event kinds the library names.
func kinds() []pglease.EventKind {
	var ks []pglease.EventKind
	for k := pglease.EventKind(1); !strings.HasPrefix(k.String(), "EventKind("); k++ {
		ks = append(ks, k)
	}
	return ks
}

// Register returns a new observer registered with reg, or the error of
// reg.Register.
func Register(reg prometheus.Registerer, opt Options) (*Observer, error) {
	o := New(opt)
	if err := reg.Register(o); err != nil {
		return nil, err
	}
	return o, nil
}

// Observe implements [pglease.Observer].
func (o *Observer) Observe(e pglease.Event) {
	var name []string
	if o.byName {
		name = []string{e.Name}
	}
	o.events.WithLabelValues(append([]string{e.Kind.String()}, name...)...).Inc()
	switch e.Kind {
	case pglease.EventAcquired:
		if e.Previous != "" {
			o.events.WithLabelValues(append([]string{staleReclaimed}, name...)...).Inc()
		}
		o.wait.WithLabelValues(name...).Observe(e.Wait.Seconds())
		if o.byName {
			// The series of the lease's end exist before it ends.
			o.events.WithLabelValues(pglease.EventReleased.String(), e.Name)
			o.events.WithLabelValues(pglease.EventLost.String(), e.Name)
			o.releaseErrors.WithLabelValues(name...)
			o.hold.WithLabelValues(name...)
		}
	case pglease.EventReleased, pglease.EventLost:
		o.hold.WithLabelValues(name...).Observe(e.Hold.Seconds())
		if e.Kind == pglease.EventReleased && e.Err != nil {
			o.releaseErrors.WithLabelValues(name...).Inc()
		}
	case pglease.EventHeartbeat:
		o.renew.Observe(e.Latency.Seconds())
	case pglease.EventDropped:
		o.dropped.Add(float64(e.Count))
	}
	o.track(e)
}

// track updates the state behind the gauges.
func (o *Observer) track(e pglease.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.tally.Observe(e)
}

// Describe implements [prometheus.Collector].
func (o *Observer) Describe(ch chan<- *prometheus.Desc) {
	o.events.Describe(ch)
	o.releaseErrors.Describe(ch)
	o.dropped.Describe(ch)
	o.renew.Describe(ch)
	o.wait.Describe(ch)
	o.hold.Describe(ch)
	ch <- o.heldDesc
	ch <- o.leaderDesc
}

// Collect implements [prometheus.Collector]. The gauges are computed from
// the observer's state as it is now.
func (o *Observer) Collect(ch chan<- prometheus.Metric) {
	for _, m := range o.gauges() {
		ch <- m
	}
	o.events.Collect(ch)
	o.releaseErrors.Collect(ch)
	o.dropped.Collect(ch)
	o.renew.Collect(ch)
	o.wait.Collect(ch)
	o.hold.Collect(ch)
}

// gauges returns pglease_leases_held and pglease_is_leader, summed over
// the clients.
func (o *Observer) gauges() []prometheus.Metric {
	o.mu.Lock()
	defer o.mu.Unlock()
	var ms []prometheus.Metric
	held := o.tally.Held()
	if o.byName {
		for _, n := range o.tally.Names() {
			ms = append(ms, prometheus.MustNewConstMetric(o.heldDesc, prometheus.GaugeValue, float64(held[n]), n))
		}
	} else {
		total := 0
		for _, k := range held {
			total += k
		}
		ms = append(ms, prometheus.MustNewConstMetric(o.heldDesc, prometheus.GaugeValue, float64(total)))
	}
	leading := o.tally.Leading()
	for _, n := range o.tally.Electors() {
		ms = append(ms, prometheus.MustNewConstMetric(o.leaderDesc, prometheus.GaugeValue, float64(leading[n]), n))
	}
	return ms
}
