package console

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pglease/pglease/cmd/pglease/internal/queue"
)

// PerLeaseWarning is what the help of the per-lease metrics and the log
// say about their cost.
const PerLeaseWarning = "every lease name becomes a time series"

var (
	descLeases = prometheus.NewDesc("pglease_table_leases",
		"Lease rows in the table by state (held, stale: held without a recent heartbeat, expired), as of the console's last read.",
		[]string{"state"}, nil)
	descOldest = prometheus.NewDesc("pglease_table_oldest_heartbeat_age_seconds",
		"Age of the oldest heartbeat among held (and stale) leases; 0 when none is held.", nil, nil)
	descWaiters = prometheus.NewDesc("pglease_table_waiters",
		"Clients queued for a lease of the table (blocked Acquire calls of single names), as of the console's last read; absent when the role may not read the waiters table.", nil, nil)
	descOldestWait = prometheus.NewDesc("pglease_table_oldest_wait_seconds",
		"How long the client that has waited longest for a lease of the table has waited; 0 when nobody waits (absent as pglease_table_waiters).", nil, nil)
	descExists = prometheus.NewDesc("pglease_table_exists",
		"1 when the lease table exists, else 0.", nil, nil)
	descRefresh = prometheus.NewDesc("pglease_table_last_refresh_timestamp_seconds",
		"Unix time of the console's last successful read of the table; 0 before the first.", nil, nil)
	descViewers = prometheus.NewDesc("pglease_console_viewers",
		"Open event streams (browser tabs showing the console).", nil, nil)
	descListener = prometheus.NewDesc("pglease_console_listener_up",
		"1 when the console's notification listener is connected, else 0.", nil, nil)
	descExpiresIn = prometheus.NewDesc("pglease_table_lease_expires_in_seconds",
		"Seconds until the lease expires, negative once expired (--metrics-per-lease: "+PerLeaseWarning+").",
		[]string{"name"}, nil)
	descHeartbeat = prometheus.NewDesc("pglease_table_lease_heartbeat_age_seconds",
		"Seconds since the lease's last heartbeat (--metrics-per-lease: "+PerLeaseWarning+").",
		[]string{"name"}, nil)
	descToken = prometheus.NewDesc("pglease_table_lease_token",
		"Fencing token of the lease's current or last holder (--metrics-per-lease: "+PerLeaseWarning+").",
		[]string{"name"}, nil)
)

// collector exports the hub's latest snapshot; a scrape never queries the
// database. Ages are advanced by the time since the read.
type collector struct {
	h        *hub
	perLease bool
}

// Describe implements prometheus.Collector.
func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLeases, descOldest, descWaiters, descOldestWait, descExists, descRefresh, descViewers, descListener} {
		ch <- d
	}
	if c.perLease {
		ch <- descExpiresIn
		ch <- descHeartbeat
		ch <- descToken
	}
}

// Collect implements prometheus.Collector.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	s, lastOK := c.h.latest()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		// A label value that is not valid UTF-8 (a name no pglease client
		// writes) is left out rather than failing the scrape.
		if m, err := prometheus.NewConstMetric(d, prometheus.GaugeValue, v, labels...); err == nil {
			ch <- m
		}
	}
	held, stale, expired := s.counts()
	gauge(descLeases, float64(held), stateHeld)
	gauge(descLeases, float64(stale), stateStale)
	gauge(descLeases, float64(expired), stateExpired)
	now := s.serverNowAt(time.Now())
	var oldest time.Duration
	for _, l := range s.Leases {
		if l.State != stateExpired {
			oldest = max(oldest, now.Sub(l.RenewedAt))
		}
	}
	gauge(descOldest, oldest.Seconds())
	if s.Status.QueuesOK {
		var waiters int
		var longest time.Duration
		seen := map[string]bool{} // the rows of a name (a semaphore's slots, shared rows) share a queue
		for _, l := range s.Leases {
			q := queue.Of(l.Info)
			if seen[q] {
				continue
			}
			seen[q] = true
			waiters += len(l.Waiters)
			for _, w := range l.Waiters {
				longest = max(longest, now.Sub(w.Since))
			}
		}
		gauge(descWaiters, float64(waiters))
		gauge(descOldestWait, longest.Seconds())
	}
	gauge(descExists, b2f(s.Status.TableExists))
	refreshed := 0.0
	if !lastOK.IsZero() {
		refreshed = float64(lastOK.UnixNano()) / 1e9
	}
	gauge(descRefresh, refreshed)
	gauge(descViewers, float64(c.h.viewers()))
	gauge(descListener, b2f(s.Status.ListenerUp))
	if !c.perLease {
		return
	}
	for _, l := range s.Leases {
		gauge(descExpiresIn, l.ExpiresAt.Sub(now).Seconds(), l.Name)
		gauge(descHeartbeat, now.Sub(l.RenewedAt).Seconds(), l.Name)
		gauge(descToken, float64(l.Token), l.Name)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// metricsHandler serves /metrics: the console's collector, and the Go
// runtime's and the process's metrics.
func (c *Console) metricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{h: c.hub, perLease: c.cfg.MetricsPerLease},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}
