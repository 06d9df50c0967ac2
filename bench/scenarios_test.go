package main

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// memLocker is an in-process lock service: one slot per name. Every client
// opened from it shares the slots, as clients of one server would.
type memLocker struct {
	mu    sync.Mutex
	slots map[string]chan struct{}
}

func (m *memLocker) lock(ctx context.Context, name string, block bool) (unlock, error) {
	m.mu.Lock()
	s := m.slots[name]
	if s == nil {
		s = make(chan struct{}, 1)
		m.slots[name] = s
	}
	m.mu.Unlock()
	if !block {
		select {
		case s <- struct{}{}:
		default:
			return nil, errBusy
		}
	} else {
		select {
		case s <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return func(context.Context) error { <-s; return nil }, nil
}

func (m *memLocker) close() {}

func memPeer() *peer {
	m := &memLocker{slots: map[string]chan struct{}{}}
	return &peer{id: "mem", title: "in-process", backend: "mem",
		open: func(context.Context, *env, peerOpts) (locker, error) { return m, nil }}
}

func TestMemLocker(t *testing.T) {
	lk, _ := memPeer().open(context.Background(), nil, peerOpts{})
	u, err := lk.lock(context.Background(), "a", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lk.lock(context.Background(), "a", false); !errors.Is(err, errBusy) {
		t.Fatalf("second lock of a held name: %v, want errBusy", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := lk.lock(ctx, "a", true); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("blocking lock of a held name: %v, want the deadline", err)
	}
	_ = u(context.Background())
	if _, err := lk.lock(context.Background(), "a", false); err != nil {
		t.Fatalf("lock after release: %v", err)
	}
}

// The scenarios that need no server of their own run against memLocker:
// what they report must agree with what happened.
func TestScenariosMeasureTheLock(t *testing.T) {
	ctx := context.Background()
	cfg := quickConfig()

	s1 := runS1(ctx, nil, cfg, memPeer())
	if s1.err != nil || s1.n == 0 || len(s1.pair) != s1.n || len(s1.try) != s1.n || len(s1.release) != s1.n {
		t.Fatalf("S1: err %v, n %d, %d pairs", s1.err, s1.n, len(s1.pair))
	}
	if s1.pair.pct(0) > s1.pair.pct(100) || s1.opsPerSec <= 0 {
		t.Errorf("S1: pairs not sorted or no rate: %v … %v, %v/s", s1.pair.pct(0), s1.pair.pct(100), s1.opsPerSec)
	}

	for _, shared := range []bool{true, false} {
		s2 := runS2(ctx, nil, cfg, memPeer(), shared)
		var total int64
		for _, c := range s2.counts {
			total += c
		}
		if s2.err != nil || s2.errs != 0 || s2.violations != 0 || total == 0 || len(s2.counts) != 16 {
			t.Fatalf("S2 shared=%v: err %v, %d errors, %d overlaps, %d acquisitions by %d", shared, s2.err, s2.errs, s2.violations, total, len(s2.counts))
		}
		if s2.minC > s2.maxC || s2.jain <= 0 || s2.jain > 1 {
			t.Errorf("S2: min %d max %d jain %v", s2.minC, s2.maxC, s2.jain)
		}
	}

	for _, w := range []int{1, 8} {
		s3 := runS3(ctx, nil, cfg, memPeer(), w)
		if s3.err != nil || s3.violations != 0 || len(s3.lat) != cfg.s3Samples {
			t.Fatalf("S3 %d waiters: err %v, %d overlaps, %d samples, want %d", w, s3.err, s3.violations, len(s3.lat), cfg.s3Samples)
		}
		// A hand-off on a channel is far below the holder's hold time.
		if s3.lat.pct(50) >= cfg.s3Hold {
			t.Errorf("S3 %d waiters: p50 %v", w, s3.lat.pct(50))
		}
	}
}
