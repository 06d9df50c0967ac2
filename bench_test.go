package pglease

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkTryAcquireRelease measures one uncontended TryAcquire plus
// Release on distinct names (two statements, one round trip each).
func BenchmarkTryAcquireRelease(b *testing.B) {
	ctx := context.Background()
	c := testClient(b, Config{})
	if err := c.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		l, err := c.TryAcquire(ctx, fmt.Sprintf("bench-%d", i%1024))
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTryAcquireContended measures a failing TryAcquire on a held name.
func BenchmarkTryAcquireContended(b *testing.B) {
	ctx := context.Background()
	a := testClient(b, Config{})
	c := testClient(b, Config{Table: a.cfg.Table})
	l, err := a.TryAcquire(ctx, "held", WithTTL(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Release(ctx)
	for b.Loop() {
		if _, err := c.TryAcquire(ctx, "held"); err == nil {
			b.Fatal("acquired a held lease")
		}
	}
}

// BenchmarkHandoff measures release → acquired by a blocked waiter in
// another client (woken by NOTIFY).
func BenchmarkHandoff(b *testing.B) {
	ctx := context.Background()
	a := testClient(b, Config{})
	w := testClient(b, Config{Table: a.cfg.Table, PollInterval: time.Hour})
	l, err := a.TryAcquire(ctx, "h", WithTTL(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	for b.Loop() {
		got := make(chan *Lease)
		go func() {
			l2, err := w.Acquire(ctx, "h", WithTTL(time.Hour))
			if err != nil {
				b.Error(err)
			}
			got <- l2
		}()
		waitSubscribed(b, w, "h", 1)
		start := time.Now()
		_ = l.Release(ctx)
		l2 := <-got
		total += time.Since(start)
		_ = l2.Release(ctx)
		if l, err = a.Acquire(ctx, "h", WithTTL(time.Hour)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs/handoff")
	_ = l.Release(ctx)
}

// BenchmarkRenewBatch measures one renewal statement covering 1,000 leases.
func BenchmarkRenewBatch(b *testing.B) {
	ctx := context.Background()
	c := testClient(b, Config{})
	leases := make([]*Lease, 1000)
	for i := range leases {
		l, err := c.TryAcquire(ctx, fmt.Sprintf("r-%d", i), WithTTL(time.Hour))
		if err != nil {
			b.Fatal(err)
		}
		leases[i] = l
	}
	var lost atomic.Int64
	for b.Loop() {
		gone, err := c.renew(ctx, leases)
		if err != nil {
			b.Fatal(err)
		}
		lost.Add(int64(len(gone)))
	}
	if lost.Load() != 0 {
		b.Fatalf("%d leases lost", lost.Load())
	}
}
