package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

func releaseCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

// ---- S1: uncontended try + release on distinct names ----

type s1Row struct {
	peer               *peer
	n                  int
	pair, try, release durs // sorted
	opsPerSec          float64
	stmtsPerOp         float64       // PostgreSQL peers: statements per try+release
	srvPerOp           time.Duration // PostgreSQL: server planning + execution time per try+release
	err                error
}

func runS1(ctx context.Context, e *env, cfg *config, p *peer) (r s1Row) {
	r.peer = p
	lk, err := p.open(ctx, e, peerOpts{tableTag: "_s1", oneConn: true})
	if err != nil {
		r.err = err
		return r
	}
	defer lk.close()
	prefix := "s1-" + randHex(4) + "-"
	one := func(i int) (time.Duration, time.Duration, error) {
		name := fmt.Sprintf("%s%d", prefix, i)
		t0 := time.Now()
		u, err := lk.lock(ctx, name, false)
		if err != nil {
			return 0, 0, fmt.Errorf("try %s: %w", name, err)
		}
		t1 := time.Now()
		if err := u(ctx); err != nil {
			return 0, 0, fmt.Errorf("release %s: %w", name, err)
		}
		return t1.Sub(t0), time.Since(t1), nil
	}
	for i := range cfg.s1Warmup {
		if _, _, err := one(-1 - i); err != nil {
			r.err = err
			return r
		}
	}
	var snap counters
	if p.backend == "pg" {
		if snap, err = e.snapshot(ctx, "pg"); err != nil {
			r.err = err
			return r
		}
	}
	start := time.Now()
	for i := 0; time.Since(start) < cfg.s1Dur && i < 200000; i++ {
		a, b, err := one(i)
		if err != nil {
			r.err = err
			return r
		}
		r.try = append(r.try, a)
		r.release = append(r.release, b)
		r.pair = append(r.pair, a+b)
	}
	el := time.Since(start)
	r.n = len(r.pair)
	if p.backend == "pg" {
		end, err := e.snapshot(ctx, "pg")
		if err != nil {
			r.err = err
			return r
		}
		d := end.sub(snap)
		r.stmtsPerOp = float64(d.stmts) / float64(r.n)
		r.srvPerOp = d.srvTime / time.Duration(r.n)
	}
	r.opsPerSec = float64(r.n) / el.Seconds()
	r.pair, r.try, r.release = r.pair.sorted(), r.try.sorted(), r.release.sorted()
	return r
}

// ---- S2: 16 goroutines on one name ----

type s2Row struct {
	peer        *peer
	label       string
	acqPerSec   float64
	counts      []int64
	jain        float64
	minC, maxC  int64
	violations  int64
	stmtsPerAcq float64 // PostgreSQL peers: statements per acquisition (attempts, releases, polls)
	errs        int64
	firstErr    error
	err         error
}

// labelClients marks the S2 rows in which every goroutine has a client of
// its own.
const labelClients = " (16 clients)"

// runS2 runs 16 goroutines on one name, sharing one locker or (not shared)
// with a locker each, as 16 processes would.
func runS2(ctx context.Context, e *env, cfg *config, p *peer, shared bool) (r s2Row) {
	r.peer = p
	if !shared {
		r.label = labelClients
	}
	const g = 16
	opts := peerOpts{tableTag: "_s2", ttl: cfg.waitTTL(p)}
	lks := make([]locker, g)
	if shared {
		opts.conns = g + 2
		lk, err := p.open(ctx, e, opts)
		if err != nil {
			r.err = err
			return r
		}
		defer lk.close()
		for i := range lks {
			lks[i] = lk
		}
	} else {
		opts.conns = 2
		for i := range lks {
			lk, err := p.open(ctx, e, opts)
			if err != nil {
				r.err = err
				return r
			}
			defer lk.close()
			lks[i] = lk
		}
	}
	name := "s2-" + randHex(6)
	r.counts = make([]int64, g)
	var inCS atomic.Int32
	var errMu sync.Mutex
	var snap counters
	if p.backend == "pg" {
		var err error
		if snap, err = e.snapshot(ctx, "pg"); err != nil {
			r.err = err
			return r
		}
	}
	runCtx, cancel := context.WithTimeout(ctx, cfg.s2Dur)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				u, err := lks[i].lock(runCtx, name, true)
				if err != nil {
					if runCtx.Err() != nil {
						return
					}
					atomic.AddInt64(&r.errs, 1)
					errMu.Lock()
					if r.firstErr == nil {
						r.firstErr = err
					}
					errMu.Unlock()
					time.Sleep(10 * time.Millisecond)
					continue
				}
				if inCS.Add(1) != 1 {
					atomic.AddInt64(&r.violations, 1)
				}
				if runCtx.Err() == nil {
					r.counts[i]++
				}
				inCS.Add(-1)
				rctx, rcancel := releaseCtx()
				_ = u(rctx)
				rcancel()
			}
		}()
	}
	wg.Wait()
	el := min(time.Since(start), cfg.s2Dur)
	var total int64
	r.minC = -1
	for _, c := range r.counts {
		total += c
		if r.minC < 0 || c < r.minC {
			r.minC = c
		}
		r.maxC = max(r.maxC, c)
	}
	r.acqPerSec = float64(total) / el.Seconds()
	r.jain = jain(r.counts)
	if p.backend == "pg" && total > 0 {
		end, err := e.snapshot(ctx, "pg")
		if err != nil {
			r.err = err
			return r
		}
		r.stmtsPerAcq = float64(end.sub(snap).stmts) / float64(total)
	}
	return r
}

// ---- S3: hand-off to blocked waiters ----

type s3Row struct {
	peer       *peer
	waiters    int
	oneClient  bool          // the holder and the waiters are goroutines of one locker
	within     time.Duration // the row's time limit (cfg.s3Cap)
	lat        durs          // sorted
	violations int64
	err        error
}

// runS3 measures hand-offs among waiters+1 participants, each with a
// locker of its own, or, with oneClient, all goroutines of one locker (as
// the goroutines of one process would contend).
func runS3(ctx context.Context, e *env, cfg *config, p *peer, waiters int, oneClient bool) (r s3Row) {
	r.peer, r.waiters, r.oneClient, r.within = p, waiters, oneClient, cfg.s3Cap
	r.lat, r.violations, r.err = measureHandoffs(ctx, e, cfg, p, waiters, oneClient)
	return r
}

// measureHandoffs measures hand-offs among waiters+1 participants (see runS3):
// the sorted latencies, the overlapping critical sections seen, and the
// first error.
func measureHandoffs(ctx context.Context, e *env, cfg *config, p *peer, waiters int, oneClient bool) (lat durs, violations int64, err error) {
	var r struct {
		violations int64
		err        error
	}
	n := waiters + 1
	lks := make([]locker, n)
	if oneClient {
		// A connection for every participant (advisory locks hold one
		// per holder or waiter) and a few for the library.
		lk, err := p.open(ctx, e, peerOpts{tableTag: "_s3", conns: int32(n + 2), ttl: cfg.waitTTL(p)})
		if err != nil {
			return nil, 0, err
		}
		defer lk.close()
		for i := range lks {
			lks[i] = lk
		}
	} else {
		for i := range lks {
			lk, err := p.open(ctx, e, peerOpts{tableTag: "_s3", conns: 2, ttl: cfg.waitTTL(p)})
			if err != nil {
				return nil, 0, err
			}
			defer lk.close()
			lks[i] = lk
		}
	}
	name := "s3-" + randHex(6)
	runCtx, cancel := context.WithTimeout(ctx, cfg.s3Cap)
	defer cancel()
	var (
		mu      sync.Mutex
		stamp   time.Time
		gen     = make(chan struct{})
		inCS    atomic.Int32
		started = make(chan struct{})
	)
	participant := func(i int) {
		if i != 0 {
			// The first holder holds before the others queue up.
			select {
			case <-started:
			case <-runCtx.Done(): // it failed
				return
			}
		}
		for runCtx.Err() == nil {
			u, err := lks[i].lock(runCtx, name, true)
			if err != nil {
				if runCtx.Err() == nil {
					mu.Lock()
					if r.err == nil {
						r.err = err
					}
					mu.Unlock()
					cancel()
				}
				return
			}
			now := time.Now()
			if inCS.Add(1) != 1 {
				atomic.AddInt64(&r.violations, 1)
			}
			mu.Lock()
			if !stamp.IsZero() {
				lat = append(lat, now.Sub(stamp))
				if len(lat) >= cfg.s3Samples {
					cancel()
				}
			}
			close(gen)
			gen = make(chan struct{})
			mine := gen
			mu.Unlock()
			if i == 0 && stamp.IsZero() {
				close(started)
			}
			// Hold long enough for the previous holder to queue up again.
			sleepCtx(runCtx, cfg.s3Hold)
			inCS.Add(-1)
			mu.Lock()
			stamp = time.Now()
			mu.Unlock()
			rctx, rcancel := releaseCtx()
			_ = u(rctx)
			rcancel()
			// Wait until another participant took over: every sample is a
			// hand-off to a waiter that was already blocked.
			select {
			case <-mine:
			case <-runCtx.Done():
			}
		}
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); participant(i) }()
	}
	wg.Wait()
	return lat.sorted(), r.violations, r.err
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
