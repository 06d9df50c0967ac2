package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Scenarios that run child processes or many leases: S4, S5, S6.

// ---- S4: crash failover ----

type s4Sample struct {
	lat       time.Duration
	early     bool // acquired before the kill: a safety violation
	err       error
	killAfter time.Duration
}

type s4Row struct {
	peer    *peer
	setting string // "default", "2s"
	ttl     time.Duration
	samples []s4Sample
	lat     durs // sorted
	err     error
}

// childCmd re-executes this binary in a child role.
func childCmd(e *env, args ...string) *exec.Cmd {
	exe, _ := os.Executable()
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), "BENCH_DSN="+e.dsn, "BENCH_ETCD="+e.etcdURL)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

var (
	childMu  sync.Mutex
	children []*atomic.Int64 // Redis requests reported by each child
)

// childRequests sums the Redis requests the children reported last.
func childRequests() int64 {
	childMu.Lock()
	defer childMu.Unlock()
	var n int64
	for _, c := range children {
		n += c.Load()
	}
	return n
}

// reportRequests prints this process's Redis request count for the parent.
func reportRequests() {
	for range time.Tick(50 * time.Millisecond) {
		fmt.Printf("OPS %d\n", redisRequests.Load())
	}
}

// startChild starts a child and waits for its line "READY".
func startChild(ctx context.Context, e *env, args ...string) (*exec.Cmd, error) {
	cmd := childCmd(e, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan error, 1)
	reqs := new(atomic.Int64)
	childMu.Lock()
	children = append(children, reqs)
	childMu.Unlock()
	go func() {
		sc := bufio.NewScanner(out)
		isReady := false
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if v, ok := strings.CutPrefix(line, "OPS "); ok {
				var n int64
				fmt.Sscan(v, &n)
				reqs.Store(n)
			} else if line == "READY" && !isReady {
				isReady = true
				ready <- nil
			}
		}
		if !isReady {
			ready <- errors.New("child exited before it was ready")
		}
	}()
	select {
	case err = <-ready:
	case <-ctx.Done():
		err = ctx.Err()
	case <-time.After(90 * time.Second):
		err = errors.New("child not ready after 90 s")
	}
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, err
	}
	return cmd, nil
}

func runS4(ctx context.Context, e *env, cfg *config, p *peer, setting string, ttl time.Duration, samples int) (r s4Row) {
	r.peer, r.setting, r.ttl = p, setting, ttl
	lk, err := p.open(ctx, e, peerOpts{tableTag: "_s4", ttl: ttl, conns: 2})
	if err != nil {
		r.err = err
		return r
	}
	defer lk.close()
	for range samples {
		s := s4Once(ctx, e, cfg, p, lk, ttl)
		r.samples = append(r.samples, s)
		if s.err != nil {
			r.err = s.err
			break
		}
		r.lat = append(r.lat, s.lat)
	}
	r.lat = r.lat.sorted()
	return r
}

func s4Once(ctx context.Context, e *env, cfg *config, p *peer, lk locker, ttl time.Duration) (s s4Sample) {
	name := "s4-" + randHex(6)
	child, err := startChild(ctx, e, "-child", "hold", "-peer", p.id, "-name", name, "-ttl", ttl.String())
	if err != nil {
		s.err = fmt.Errorf("holder child: %w", err)
		return s
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	var killed atomic.Pointer[time.Time]
	type res struct {
		at  time.Time
		u   unlock
		err error
	}
	limit := 3*max(ttl, p.defTTL) + 30*time.Second
	wctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	done := make(chan res, 1)
	go func() {
		u, err := lk.lock(wctx, name, true)
		done <- res{time.Now(), u, err}
	}()
	// Kill the holder 0.5–2.5 s after it acquired, with the waiter blocked.
	s.killAfter = 500*time.Millisecond + mrand.N(2*time.Second)
	select {
	case r := <-done:
		s.early = true
		s.err = fmt.Errorf("waiter acquired while the holder was alive (err %v)", r.err)
		if r.u != nil {
			rctx, rc := releaseCtx()
			_ = r.u(rctx)
			rc()
		}
		return s
	case <-time.After(s.killAfter):
	}
	now := time.Now()
	killed.Store(&now)
	_ = child.Process.Kill()
	_ = child.Wait()
	r := <-done
	if r.err != nil {
		s.err = fmt.Errorf("waiter: %w", r.err)
		return s
	}
	s.lat = r.at.Sub(now)
	rctx, rc := releaseCtx()
	_ = r.u(rctx)
	rc()
	return s
}

// childHold is the child side of S4: acquire name, say READY, hold (the
// library renews) until killed.
func childHold(ctx context.Context, e *env, peerID, name string, ttl time.Duration) error {
	p := peerByID(peerID)
	if p == nil {
		return fmt.Errorf("unknown peer %q", peerID)
	}
	lk, err := p.open(ctx, e, peerOpts{tableTag: "_s4", ttl: ttl, conns: 2})
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if _, err := lk.lock(actx, name, true); err != nil {
		return err
	}
	fmt.Println("READY")
	select {}
}

// ---- S5: waiting cost ----

type s5Row struct {
	peer    *peer
	window  time.Duration
	waiters int
	procs   int
	d       delta
	err     error
}

func runS5(ctx context.Context, e *env, cfg *config, p *peer, waiters, procs int) (r s5Row) {
	r.peer, r.waiters, r.procs = p, waiters, procs
	holder, err := p.open(ctx, e, peerOpts{tableTag: "_s5", conns: 2, ttl: cfg.waitTTL(p)})
	if err != nil {
		r.err = err
		return r
	}
	defer holder.close()
	name := "s5-" + randHex(6)
	u, err := holder.lock(ctx, name, false)
	if err != nil {
		r.err = fmt.Errorf("holder: %w", err)
		return r
	}
	defer func() {
		rctx, rc := releaseCtx()
		_ = u(rctx)
		rc()
	}()
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var got atomic.Int64
	if procs <= 1 {
		lk, err := p.open(ctx, e, peerOpts{tableTag: "_s5", conns: int32(waiters + 4), ttl: cfg.waitTTL(p)})
		if err != nil {
			cancel()
			r.err = err
			return r
		}
		defer lk.close() // after the waiters returned
		startWaiters(wctx, &wg, lk, name, waiters, &got)
	}
	defer func() { cancel(); wg.Wait() }()
	if procs > 1 {
		per := waiters / procs
		var children []*exec.Cmd
		defer func() {
			for _, c := range children {
				_ = c.Process.Kill()
				_ = c.Wait()
			}
		}()
		for range procs {
			c, err := startChild(ctx, e, "-child", "wait", "-peer", p.id, "-name", name, "-waiters", fmt.Sprint(per))
			if err != nil {
				r.err = err
				return r
			}
			children = append(children, c)
		}
	}
	sleepCtx(ctx, cfg.s5Settle)
	a, err := e.snapshot(ctx, p.backend)
	if err != nil {
		r.err = err
		return r
	}
	r.window = cfg.s5Window
	if cfg.s5Long[p.id] {
		r.window = cfg.s5LongWindow
	}
	sleepCtx(ctx, r.window)
	b, err := e.snapshot(ctx, p.backend)
	if err != nil {
		r.err = err
		return r
	}
	r.d = b.sub(a)
	if n := got.Load(); n > 0 {
		r.err = fmt.Errorf("%d waiters acquired a held lease", n)
	}
	return r
}

func startWaiters(ctx context.Context, wg *sync.WaitGroup, lk locker, name string, n int, got *atomic.Int64) {
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u, err := lk.lock(ctx, name, true)
			if err == nil {
				got.Add(1)
				rctx, rc := releaseCtx()
				_ = u(rctx)
				rc()
			}
		}()
	}
}

// childWait is the child side of S5's multi-process case.
func childWait(ctx context.Context, e *env, peerID, name string, waiters int) error {
	p := peerByID(peerID)
	if p == nil {
		return fmt.Errorf("unknown peer %q", peerID)
	}
	lk, err := p.open(ctx, e, peerOpts{tableTag: "_s5", conns: int32(waiters + 4), ttl: (&config{}).waitTTL(p)})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	var got atomic.Int64
	startWaiters(ctx, &wg, lk, name, waiters, &got)
	fmt.Println("READY")
	select {}
}

// ---- S6: one process holding many leases ----

type s6Row struct {
	peer        *peer
	n           int
	interval    time.Duration
	acquireTime time.Duration
	perLease    float64 // client bytes per lease
	d           delta   // at n leases
	dSmall      *delta  // at n/10 leases, when measured
	err         error
}

func heapStack() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc + m.StackInuse
}

func runS6(ctx context.Context, e *env, cfg *config, p *peer) (r s6Row) {
	r.peer, r.n, r.interval = p, cfg.s6N, cfg.s6TTL/3
	if n := cfg.s6NFor[p.id]; n > 0 {
		r.n = n
	}
	lk, err := p.open(ctx, e, peerOpts{tableTag: "_s6", ttl: cfg.s6TTL, conns: 16, oneConn: true})
	if err != nil {
		r.err = err
		return r
	}
	defer lk.close()
	prefix := "s6-" + randHex(4) + "-"
	var mu sync.Mutex
	var held []unlock
	acquireRange := func(from, to int) error {
		var next atomic.Int64
		next.Store(int64(from))
		var wg sync.WaitGroup
		var firstErr atomic.Pointer[error]
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1) - 1)
					if i >= to || firstErr.Load() != nil {
						return
					}
					u, err := lk.lock(ctx, fmt.Sprintf("%s%d", prefix, i), false)
					if err != nil {
						err = fmt.Errorf("lease %d: %w", i, err)
						firstErr.CompareAndSwap(nil, &err)
						return
					}
					mu.Lock()
					held = append(held, u)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if p := firstErr.Load(); p != nil {
			return *p
		}
		return nil
	}
	defer func() {
		// Release everything, 16 at a time.
		ch := make(chan unlock)
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for u := range ch {
					rctx, rc := releaseCtx()
					_ = u(rctx)
					rc()
				}
			}()
		}
		for _, u := range held {
			ch <- u
		}
		close(ch)
		wg.Wait()
	}()
	small := r.n / 10
	t0 := time.Now()
	if err := acquireRange(0, small); err != nil {
		r.err = err
		return r
	}
	r.acquireTime = time.Since(t0)
	m1 := heapStack()
	if cfg.s6Small[p.id] {
		d, err := s6Window(ctx, e, cfg, p)
		if err != nil {
			r.err = err
			return r
		}
		r.dSmall = &d
	}
	t1 := time.Now()
	if err := acquireRange(small, r.n); err != nil {
		r.err = err
		return r
	}
	r.acquireTime += time.Since(t1)
	m2 := heapStack()
	r.perLease = (float64(m2) - float64(m1)) / float64(r.n-small)
	d, err := s6Window(ctx, e, cfg, p)
	if err != nil {
		r.err = err
		return r
	}
	r.d = d
	return r
}

// s6Window measures the server over two renewal intervals, after letting
// the renewals of the acquisition burst spread out.
func s6Window(ctx context.Context, e *env, cfg *config, p *peer) (delta, error) {
	sleepCtx(ctx, cfg.s6TTL/3)
	a, err := e.snapshot(ctx, p.backend)
	if err != nil {
		return delta{}, err
	}
	sleepCtx(ctx, 2*cfg.s6TTL/3)
	b, err := e.snapshot(ctx, p.backend)
	if err != nil {
		return delta{}, err
	}
	return b.sub(a), nil
}
