package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
)

// ---- one client holding many leases ----

func capLeases(ctx context.Context, e *env, cc capConfig, n int, ff bool) (r capLeaseRow) {
	r.ff, r.n, r.ttl = ff, n, cc.leaseTTL
	if t, ok := cc.leaseTTLFor[n]; ok {
		r.ttl = t
	}
	r.interval = r.ttl / 3
	// A table per row, so that its size is this row's leases only.
	table := fmt.Sprintf("pglease_leases_capl_%d", n)
	if ff {
		table += "_ff"
	}
	c, err := pglease.Open(ctx, e.dsn, pglease.Config{Table: table, TTL: r.ttl, MaxConns: int32(cc.acquirers)})
	if err != nil {
		r.err = err
		return r
	}
	defer func() {
		t0 := time.Now()
		_ = c.Close()
		logf("CAP leases n=%d: Close released them in %v", n, time.Since(t0).Round(time.Millisecond))
	}()
	if err := admin.Migrate(ctx, c); err != nil {
		r.err = err
		return r
	}
	var opts []pglease.Option
	if ff {
		opts = append(opts, pglease.WithFastFailover())
	}
	if err := capCheckpoint(ctx, e); err != nil {
		r.err = err
		return r
	}
	if err := capResetStats(ctx, e); err != nil {
		r.err = err
		return r
	}
	prefix := "capl-" + randHex(4) + "-"
	held := make([]*pglease.Lease, n) // allocated before the first heap reading
	t0 := time.Now()
	// The first lease alone starts what a client starts once (the renewal
	// loop, its dedicated connection), before the heap is read.
	l, err := c.TryAcquire(ctx, prefix+"0", opts...)
	if err != nil {
		r.err = err
		return r
	}
	held[0] = l
	if err := l.Renew(ctx); err != nil {
		r.err = err
		return r
	}
	m0 := heapStack()
	var next atomic.Int64
	next.Store(1)
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	for range cc.acquirers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || firstErr.Load() != nil {
					return
				}
				l, err := c.TryAcquire(ctx, prefix+strconv.Itoa(i), opts...)
				if err != nil {
					err = fmt.Errorf("lease %d: %w", i, err)
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				held[i] = l
			}
		}()
	}
	wg.Wait()
	r.acquire = time.Since(t0)
	if p := firstErr.Load(); p != nil {
		r.err = *p
		return r
	}
	r.perLease = (float64(heapStack()) - float64(m0)) / float64(n-1)
	if conn, err := pgx.Connect(ctx, e.dsn); err == nil {
		_ = conn.QueryRow(ctx, "SELECT pg_total_relation_size($1)", table).Scan(&r.tableBytes)
		conn.Close(ctx)
	}
	// The renewals of the burst line up after one round; measure after two.
	sleepCtx(ctx, 2*r.interval)
	a, err := capSnapshot(ctx, e)
	if err != nil {
		r.err = err
		return r
	}
	sleepCtx(ctx, max(3, cc.leaseWindow/r.interval)*r.interval)
	b, err := capSnapshot(ctx, e)
	if err != nil {
		r.err = err
		return r
	}
	r.d = b.sub(a)
	for _, l := range held {
		if l.Context().Err() != nil {
			r.lost++
		}
	}
	r.renew, r.err = capRenewStats(ctx, e)
	return r
}

// ---- child processes ----

// capSpec is one child's part, passed in $BENCH_CAP.
type capSpec struct {
	Role     string        `json:"role"` // "clients", "waiters", roleElectors or roleWaiters (FLEET, S7), rolePgbWaiters (CAP)
	Table    string        `json:"table"`
	Prefix   string        `json:"prefix"`
	Clients  int           `json:"clients,omitempty"`
	Leases   int           `json:"leases,omitempty"`
	TTL      time.Duration `json:"ttl,omitempty"`
	Waiters  int           `json:"waiters,omitempty"`
	Names    int           `json:"names,omitempty"`
	FF       bool          `json:"ff,omitempty"`
	Hold     time.Duration `json:"hold,omitempty"`
	First    int           `json:"first,omitempty"`     // FLEET and S7 waiters: the first name's number
	MaxConns int32         `json:"max_conns,omitempty"` // FLEET and S7 clients' pool size; 0: the default
	DSN      string        `json:"dsn,omitempty"`       // pgbwaiters: the DSN (through PgBouncer) when not the parent's
}

// capEvent is a waiter's acquisition (got) or the moment just before its
// release, as a child reported it (Unix nanoseconds: the processes share
// one host's clock).
type capEvent struct {
	got  bool
	name string
	at   int64
}

type capProc struct {
	cmd    *exec.Cmd
	ready  chan error
	mu     sync.Mutex
	events []capEvent
	held   int // leases its clients hold, from its last "HELD n m" line
	lost   int // leases its clients lost
}

// leaseCounts sums what the children last reported: leases held and lost.
func leaseCounts(procs []*capProc) (held, lost int) {
	for _, p := range procs {
		p.mu.Lock()
		held += p.held
		lost += p.lost
		p.mu.Unlock()
	}
	return held, lost
}

// startCapProcs starts one child per spec and waits until all are ready.
func startCapProcs(ctx context.Context, e *env, specs []capSpec) ([]*capProc, error) {
	var procs []*capProc
	var firstErr error
	for _, s := range specs {
		p, err := startCapProc(e, s)
		if err != nil {
			firstErr = err
			break
		}
		procs = append(procs, p)
	}
	limit := time.After(5 * time.Minute)
	for _, p := range procs {
		if firstErr != nil {
			break
		}
		select {
		case err := <-p.ready:
			firstErr = err
		case <-ctx.Done():
			firstErr = ctx.Err()
		case <-limit:
			firstErr = errors.New("children not ready after 5 minutes")
		}
	}
	if firstErr != nil {
		stopCapProcs(procs)
		return nil, firstErr
	}
	return procs, nil
}

func startCapProc(e *env, s capSpec) (*capProc, error) {
	spec, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	cmd := childCmd(e, "-child", "cap")
	cmd.Env = append(cmd.Env, "BENCH_CAP="+string(spec))
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &capProc{cmd: cmd, ready: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		isReady := false
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 1 && f[0] == "READY" && !isReady:
				isReady = true
				p.ready <- nil
			case len(f) == 3 && (f[0] == "GOT" || f[0] == "REL"):
				at, _ := strconv.ParseInt(f[2], 10, 64)
				p.mu.Lock()
				p.events = append(p.events, capEvent{got: f[0] == "GOT", name: f[1], at: at})
				p.mu.Unlock()
			case len(f) == 3 && f[0] == "HELD":
				held, _ := strconv.Atoi(f[1])
				lost, _ := strconv.Atoi(f[2])
				p.mu.Lock()
				p.held, p.lost = held, lost
				p.mu.Unlock()
			}
		}
		if !isReady {
			p.ready <- errors.New("child exited before it was ready")
		}
	}()
	return p, nil
}

func stopCapProcs(procs []*capProc) {
	for _, p := range procs {
		_ = p.cmd.Process.Kill()
	}
	for _, p := range procs {
		_ = p.cmd.Wait()
	}
}

// capChild is the child side: it runs its part of $BENCH_CAP until
// killed.
func capChild(ctx context.Context, e *env) error {
	var s capSpec
	if err := json.Unmarshal([]byte(os.Getenv("BENCH_CAP")), &s); err != nil {
		return fmt.Errorf("BENCH_CAP: %w", err)
	}
	switch s.Role {
	case "clients":
		return capChildClients(ctx, e, s)
	case "waiters":
		return capChildWaiters(ctx, e, s)
	case rolePgbWaiters:
		return capChildPgbWaiters(ctx, e, s)
	case roleElectors, roleWaiters:
		return fleetChild(ctx, e, s)
	}
	return fmt.Errorf("unknown CAP role %q", s.Role)
}

// capChildClients opens s.Clients clients (MaxConns 1) that hold s.Leases
// leases each, and reports every 200 ms how many leases are still held
// and how many were lost.
func capChildClients(ctx context.Context, e *env, s capSpec) error {
	clients := make([]*pglease.Client, s.Clients)
	leases := make([]*pglease.Lease, s.Clients*s.Leases)
	err := openConcurrently(len(clients), func(i int) error {
		c, err := pglease.Open(ctx, e.dsn, pglease.Config{Table: s.Table, TTL: s.TTL, MaxConns: 1})
		if err != nil {
			return err
		}
		clients[i] = c
		for j := range s.Leases {
			l, err := c.TryAcquire(ctx, fmt.Sprintf("%s%d-%d", s.Prefix, i, j))
			if err != nil {
				return err
			}
			leases[i*s.Leases+j] = l
		}
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Println("READY")
	for {
		held, lost := 0, 0
		for _, l := range leases {
			if l.Context().Err() == nil {
				held++
			} else {
				lost++
			}
		}
		fmt.Printf("HELD %d %d\n", held, lost)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// capChildWaiters starts s.Waiters goroutines on one client, goroutine i
// blocked on name i mod s.Names. Whoever acquires reports it, holds s.Hold,
// reports, releases and waits again.
func capChildWaiters(ctx context.Context, e *env, s capSpec) error {
	c, err := pglease.Open(ctx, e.dsn, pglease.Config{Table: s.Table})
	if err != nil {
		return err
	}
	var opts []pglease.Option
	if s.FF {
		opts = append(opts, pglease.WithFastFailover())
	}
	var out sync.Mutex
	say := func(what, name string) {
		out.Lock()
		fmt.Printf("%s %s %d\n", what, name, time.Now().UnixNano())
		out.Unlock()
	}
	for i := range s.Waiters {
		name := s.Prefix + strconv.Itoa(i%s.Names)
		go func() {
			for ctx.Err() == nil {
				l, err := c.Acquire(ctx, name, opts...)
				if err != nil {
					if ctx.Err() == nil {
						fmt.Fprintf(os.Stderr, "bench child cap: waiter on %s: %v\n", name, err)
						sleepCtx(ctx, 100*time.Millisecond)
					}
					continue
				}
				say("GOT", name)
				sleepCtx(ctx, s.Hold)
				say("REL", name)
				rctx, cancel := releaseCtx()
				_ = l.Release(rctx)
				cancel()
			}
		}()
	}
	fmt.Println("READY")
	<-ctx.Done()
	return ctx.Err()
}

// capHolder opens the client of the measuring process that holds the names
// of table, and returns it with the default TTL its leases get.
func capHolder(ctx context.Context, e *env, table string) (*pglease.Client, time.Duration, error) {
	holder, err := pglease.Open(ctx, e.dsn, pglease.Config{Table: table})
	if err != nil {
		return nil, 0, err
	}
	sched, _ := pglease.Config{}.Plan("bench")
	return holder, sched.TTL, nil
}

// openConcurrently runs start(i) for each i below n, at most 16 at a time
// (so that a thousand clients connecting do not queue at the server's
// accept), and returns the first error.
func openConcurrently(n int, start func(i int) error) error {
	var firstErr atomic.Pointer[error]
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := start(i); err != nil {
				firstErr.CompareAndSwap(nil, &err)
			}
		})
	}
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		return *p
	}
	return nil
}
