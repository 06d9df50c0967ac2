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
		if wantLabel := map[bool]string{true: "", false: labelClients}[shared]; s2.label != wantLabel {
			t.Errorf("S2 shared=%v: label %q, want %q", shared, s2.label, wantLabel)
		}
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
		for _, one := range []bool{false, true} {
			s3 := runS3(ctx, nil, cfg, memPeer(), w, one)
			if s3.err != nil || s3.violations != 0 || len(s3.lat) != cfg.s3Samples || s3.oneClient != one || s3.within != cfg.s3Cap {
				t.Fatalf("S3 %d waiters, one client %v: err %v, %d overlaps, %d samples, want %d", w, one, s3.err, s3.violations, len(s3.lat), cfg.s3Samples)
			}
			// A hand-off on a channel is far below the holder's hold time.
			if s3.lat.pct(50) >= cfg.s3Hold {
				t.Errorf("S3 %d waiters, one client %v: p50 %v", w, one, s3.lat.pct(50))
			}
		}
	}
}

// stuckLocker grants a name once and never again: no hand-off happens.
type stuckLocker struct{ memLocker }

func (s *stuckLocker) lock(ctx context.Context, name string, block bool) (unlock, error) {
	if _, err := s.memLocker.lock(ctx, name, block); err != nil {
		return nil, err
	}
	return func(context.Context) error { return nil }, nil // never frees the slot
}

// A lock that never hands over gives an S3 row without samples within the
// cap, not a hang or an error.
func TestS3WithoutHandoff(t *testing.T) {
	cfg := quickConfig()
	cfg.s3Cap = 100 * time.Millisecond
	s := &stuckLocker{memLocker{slots: map[string]chan struct{}{}}}
	p := &peer{id: "stuck", title: "stuck", backend: "mem", open: func(context.Context, *env, peerOpts) (locker, error) { return s, nil }}
	t0 := time.Now()
	r := runS3(context.Background(), nil, cfg, p, 8, true)
	if r.err != nil || len(r.lat) != 0 || r.violations != 0 {
		t.Fatalf("err %v, %d samples, %d overlaps", r.err, len(r.lat), r.violations)
	}
	if el := time.Since(t0); el > cfg.s3Cap+time.Second {
		t.Errorf("took %v with a cap of %v", el, cfg.s3Cap)
	}
	if got, want := noHandoff(&r), "no hand-off within 100ms"; got != want {
		t.Errorf("noHandoff = %q, want %q", got, want)
	}
}

// A participant whose first lock fails ends the row with its error; the
// others, which never started, do not hang.
func TestS3FirstLockFails(t *testing.T) {
	boom := errors.New("boom")
	p := &peer{id: "fail", title: "fail", backend: "mem", open: func(context.Context, *env, peerOpts) (locker, error) { return failLocker{boom}, nil }}
	r := runS3(context.Background(), nil, quickConfig(), p, 8, true)
	if !errors.Is(r.err, boom) || len(r.lat) != 0 {
		t.Fatalf("err %v, %d samples", r.err, len(r.lat))
	}
}

type failLocker struct{ err error }

func (f failLocker) lock(context.Context, string, bool) (unlock, error) { return nil, f.err }
func (f failLocker) close()                                             {}
