package pgleaseprom

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
)

// QueueOptions configures a [Queues] collector. The zero value is ready
// to use.
type QueueOptions struct {
	// Namespace prefixes every metric name. Default "pglease".
	Namespace string
	// Table is the value of the "table" label: the client's lease table
	// as its Config names it. Default "pglease_leases".
	Table string
	// Timeout bounds the read of each scrape. Default 5s.
	Timeout time.Duration
}

// Queues is a [prometheus.Collector] of who waits in one lease table
// (see [admin.Waiters]). Unlike an [Observer], which counts what
// its own clients do, it reads the table's queue at each scrape, through
// client, so it sees every waiting client of the fleet. The metrics (with
// the default Namespace):
//
//	pglease_waiters{table}                 gauge    clients queued for any name of the table
//	pglease_oldest_wait_seconds{table}     gauge    how long the client that has waited longest has waited (0: nobody waits)
//	pglease_queue_read_errors_total{table} counter  scrapes whose read failed (the two gauges are then left out)
//
// A scrape costs one read of the table's small, unlogged waiters table;
// the role needs SELECT on it. Register one Queues per table.
type Queues struct {
	client  *pglease.Client
	timeout time.Duration
	waiters *prometheus.Desc
	oldest  *prometheus.Desc
	errors  prometheus.Counter
}

// NewQueues returns a collector of the queues of client's lease table.
func NewQueues(client *pglease.Client, opt QueueOptions) *Queues {
	ns := opt.Namespace
	if ns == "" {
		ns = "pglease"
	}
	table := opt.Table
	if table == "" {
		table = "pglease_leases"
	}
	timeout := opt.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	labels := prometheus.Labels{"table": table}
	return &Queues{client: client, timeout: timeout,
		waiters: prometheus.NewDesc(ns+"_waiters", "Clients queued for any lease name of the table (blocked Acquire calls of single names).", nil, labels),
		oldest:  prometheus.NewDesc(ns+"_oldest_wait_seconds", "How long the client that has waited longest for a lease of the table has waited, by the server's clock; 0 when nobody waits.", nil, labels),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "queue_read_errors_total",
			Help: "Scrapes whose read of the table's queue failed; the waiter gauges are left out of those scrapes.", ConstLabels: labels}),
	}
}

// Describe implements [prometheus.Collector].
func (q *Queues) Describe(ch chan<- *prometheus.Desc) {
	ch <- q.waiters
	ch <- q.oldest
	q.errors.Describe(ch)
}

// Collect implements [prometheus.Collector]: it reads the queue.
func (q *Queues) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), q.timeout)
	defer cancel()
	ws, err := admin.Waiters(ctx, q.client)
	if err != nil {
		q.errors.Inc()
	} else {
		var oldest time.Duration
		for _, w := range ws {
			oldest = max(oldest, w.Waited)
		}
		ch <- prometheus.MustNewConstMetric(q.waiters, prometheus.GaugeValue, float64(len(ws)))
		ch <- prometheus.MustNewConstMetric(q.oldest, prometheus.GaugeValue, oldest.Seconds())
	}
	q.errors.Collect(ch)
}
