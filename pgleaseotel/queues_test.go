package pgleaseotel_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/internal/pgtest"
	"github.com/pglease/pglease/pgleaseotel"
)

// ObserveQueues records who waits across the fleet: a client blocked on
// a held name is counted, with its wait, and nobody once it got the lease.
func TestObserveQueuesCountsWaiters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), pgtest.Patience)
	defer cancel()
	table := pgtest.Schema(t) + ".leases"
	open := func(owner string) *pglease.Client {
		c, err := pglease.Open(ctx, pgtest.DSN(t), pglease.Config{Table: table, Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	holder, waiter := open("holder"), open("waiter")
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	reg, err := pgleaseotel.ObserveQueues(holder, pgleaseotel.QueueOptions{MeterProvider: mp, Table: "ops.leases"})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	tm := &telemetry{reader: reader}
	onTable := attribute.String("pglease.table", "ops.leases")
	oldest := func(ms map[string]metricdata.Metrics) float64 {
		g, ok := ms["pglease.wait.oldest"].Data.(metricdata.Gauge[float64])
		if !ok || len(g.DataPoints) != 1 {
			t.Fatalf("pglease.wait.oldest: %+v", ms["pglease.wait.oldest"].Data)
		}
		return g.DataPoints[0].Value
	}
	l, err := holder.Acquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if n := mustInt(t, tm.metrics(t), "pglease.waiters", onTable); n != 0 {
		t.Errorf("pglease.waiters %d before anyone waits", n)
	}
	got := make(chan *pglease.Lease, 1)
	go func() {
		l, err := waiter.Acquire(ctx, "job")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	pgtest.WaitFor(t, pgtest.Patience, "the waiter counted", func() bool {
		return mustInt(t, tm.metrics(t), "pglease.waiters", onTable) == 1
	})
	if w := oldest(tm.metrics(t)); w < 0 || w > 60 {
		t.Errorf("pglease.wait.oldest %v", w)
	}
	_ = l.Release(ctx)
	w := pgtest.Receive(t, got, "the waiter's lease")
	defer w.Release(ctx)
	pgtest.WaitFor(t, pgtest.Patience, "nobody waiting", func() bool {
		ms := tm.metrics(t)
		return mustInt(t, ms, "pglease.waiters", onTable) == 0 && oldest(ms) == 0
	})
}
