package pgleaseotel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
)

// QueueOptions configures [ObserveQueues]. The zero value is ready to
// use.
type QueueOptions struct {
	// MeterProvider provides the meter. Default: otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Table is the value of the attribute "pglease.table": the client's
	// lease table as its Config names it. Default "pglease_leases".
	Table string
	// Timeout bounds each read. Default 5s.
	Timeout time.Duration
}

// ObserveQueues records who waits in client's lease table (see
// [admin.Waiters]) as two gauges, read at each collection
// through client, so that they cover every waiting client of the fleet,
// not only this process's:
//
//	pglease.waiters       {waiter}  clients queued for any lease name of the table
//	pglease.wait.oldest   s         how long the client that has waited longest has waited (0: nobody waits)
//
// both with the attribute pglease.table. A collection whose read fails
// records neither and returns the error to the SDK. Unregister the
// returned registration before closing client.
func ObserveQueues(client *pglease.Client, opts QueueOptions) (metric.Registration, error) {
	mp := opts.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	table := opts.Table
	if table == "" {
		table = "pglease_leases"
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	m := mp.Meter(ScopeName)
	waiters, err1 := m.Int64ObservableGauge("pglease.waiters", metric.WithUnit("{waiter}"),
		metric.WithDescription("Clients queued for any lease name of the table (blocked Acquire calls of single names)."))
	oldest, err2 := m.Float64ObservableGauge("pglease.wait.oldest", metric.WithUnit("s"),
		metric.WithDescription("How long the client that has waited longest for a lease of the table has waited, by the server's clock; 0 when nobody waits."))
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	attrs := metric.WithAttributes(attribute.String("pglease.table", table))
	return m.RegisterCallback(func(ctx context.Context, obs metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		ws, err := admin.Waiters(ctx, client)
		if err != nil {
			return err
		}
		var longest time.Duration
		for _, w := range ws {
			longest = max(longest, w.Waited)
		}
		obs.ObserveInt64(waiters, int64(len(ws)), attrs)
		obs.ObserveFloat64(oldest, longest.Seconds(), attrs)
		return nil
	}, waiters, oldest)
}
