package pgleaseprom

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
	"github.com/pglease/pglease/internal/pgtest"
)

// Queues reads who waits across the fleet: two clients blocked on a held
// name are counted, with the wait of the first; once the lease is handed
// on and released nobody waits. A failing read is counted, not fatal.
func TestQueuesCountsWaiters(t *testing.T) {
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
	holder := open("holder")
	q := NewQueues(holder, QueueOptions{Table: "ops.leases"})
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(q); err != nil {
		t.Fatal(err)
	}
	gauge := func(name string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				m := mf.GetMetric()[0]
				if l := m.GetLabel(); len(l) != 1 || l[0].GetName() != "table" || l[0].GetValue() != "ops.leases" {
					t.Errorf("%s labels %v", name, l)
				}
				return m.GetGauge().GetValue()
			}
		}
		t.Fatalf("no %s in the scrape", name)
		return 0
	}
	l, err := holder.Acquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if n := gauge("pglease_waiters"); n != 0 {
		t.Errorf("pglease_waiters %v before anyone waits", n)
	}
	got := make(chan *pglease.Lease, 2)
	for _, owner := range []string{"w1", "w2"} {
		c := open(owner)
		go func() {
			l, err := c.Acquire(ctx, "job")
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
	}
	pgtest.WaitFor(t, pgtest.Patience, "two waiters counted", func() bool { return gauge("pglease_waiters") == 2 })
	if w := gauge("pglease_oldest_wait_seconds"); w < 0 || w > 60 {
		t.Errorf("pglease_oldest_wait_seconds %v", w)
	}
	_ = l.Release(ctx)
	next := pgtest.Receive(t, got, "the first waiter's lease")
	_ = next.Release(ctx)
	last := pgtest.Receive(t, got, "the second waiter's lease")
	_ = last.Release(ctx)
	pgtest.WaitFor(t, pgtest.Patience, "nobody waiting", func() bool {
		return gauge("pglease_waiters") == 0 && gauge("pglease_oldest_wait_seconds") == 0
	})

	holder.Close() // every read fails now
	if err := testutil.CollectAndCompare(q, strings.NewReader(`
# HELP pglease_queue_read_errors_total Scrapes whose read of the table's queue failed; the waiter gauges are left out of those scrapes.
# TYPE pglease_queue_read_errors_total counter
pglease_queue_read_errors_total{table="ops.leases"} 1
`)); err != nil {
		t.Error(err)
	}
	if _, err := admin.Waiters(ctx, holder); !errors.Is(err, pglease.ErrClosed) {
		t.Errorf("Waiters on a closed client: %v", err)
	}
}
