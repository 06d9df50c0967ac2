// Package pgleaseprom exports pglease events as Prometheus metrics. It is a
// module of its own so that users of pglease who do not use Prometheus never
// download it.
//
//	obs := pgleaseprom.New(prometheus.DefaultRegisterer, pgleaseprom.Options{})
//	client, err := pglease.Open(ctx, dsn, pglease.Config{Observer: obs})
package pgleaseprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pglease/pglease"
)

// Options configures the metrics.
type Options struct {
	// Namespace prefixes every metric name. Default "pglease".
	Namespace string
	// NameLabel adds the lease name as a label. Leave it off when names
	// are unbounded (one per webhook id, say): every name is a time series.
	NameLabel bool
}

// Observer is a [pglease.Observer] that updates Prometheus metrics. It is
// safe for concurrent use.
type Observer struct {
	events *prometheus.CounterVec
	renew  *prometheus.HistogramVec
	held   *prometheus.GaugeVec
	leader *prometheus.GaugeVec
	byName bool
}

// New registers the metrics with reg and returns the observer. It panics
// if the metrics are already registered with reg, as prometheus.MustRegister
// does; use a fresh registry or Namespace per client.
func New(reg prometheus.Registerer, opt Options) *Observer {
	ns := opt.Namespace
	if ns == "" {
		ns = "pglease"
	}
	labels := []string{"event"}
	nameLabels := []string{}
	if opt.NameLabel {
		labels = append(labels, "name")
		nameLabels = append(nameLabels, "name")
	}
	o := &Observer{
		byName: opt.NameLabel,
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "events_total",
			Help: "Lease events: acquired, released, contended, lost, renewed, stale-reclaimed, alert, elected, demoted, leader-changed.",
		}, labels),
		renew: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "renew_latency_seconds",
			Help:    "Round trip of successful renewal statements.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, nameLabels),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "leases_held",
			Help: "Leases held by this process.",
		}, nameLabels),
		leader: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "is_leader",
			Help: "1 while a pglease elector of this process leads (its lead function runs), else 0.",
		}, nameLabels),
	}
	reg.MustRegister(o.events, o.renew, o.held, o.leader)
	return o
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
		o.held.WithLabelValues(name...).Inc()
	case pglease.EventReleased, pglease.EventLost:
		o.held.WithLabelValues(name...).Dec()
	case pglease.EventRenewed:
		o.renew.WithLabelValues(name...).Observe(e.Latency.Seconds())
	case pglease.EventElected:
		o.leader.WithLabelValues(name...).Inc()
	case pglease.EventDemoted:
		o.leader.WithLabelValues(name...).Dec()
	}
}
