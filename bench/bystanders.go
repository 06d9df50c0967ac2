package main

import (
	"context"
	"fmt"
	"sync"
)

// S7: a hand-off on one name while other clients wait on other names. A
// hand-off should cost the same whatever the rest of the fleet waits for;
// the rows show how its latency grows with the number of clients blocked
// on other names.

type s7Row struct {
	peer       *peer
	others     int // clients blocked on other names meanwhile
	lat        durs
	violations int64
	err        error
}

// runS7 measures S3's hand-off between two clients (a holder and one
// blocked waiter) while others clients, each of its own, wait blocked on a
// name of their own held by one more client.
func runS7(ctx context.Context, e *env, cfg *config, p *peer, others int) (r s7Row) {
	r.peer, r.others = p, others
	if others > 0 {
		stop, err := bystanders(ctx, e, cfg, p, others)
		if err != nil {
			r.err = err
			return r
		}
		defer stop()
	}
	r.lat, r.violations, r.err = measureHandoffs(ctx, e, cfg, p, 1, false)
	return r
}

// bystanders starts n clients each blocked on a name of its own, all
// held by one more client, and returns once they have been waiting for
// cfg.s7Settle; stop ends them.
func bystanders(ctx context.Context, e *env, cfg *config, p *peer, n int) (stop func(), err error) {
	// Advisory locks hold a connection per lock and per blocked waiter;
	// pglease a dedicated one per client and its pool's.
	restore, _, _, err := capEnsureConns(ctx, e, 3*n+100)
	if err != nil {
		return nil, err
	}
	var closers []func()
	stop = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
		restore()
	}
	fail := func(err error) (func(), error) {
		stop()
		return nil, err
	}
	holder, err := p.open(ctx, e, peerOpts{tableTag: "_s3", conns: int32(n + 2), ttl: cfg.waitTTL(p)})
	if err != nil {
		return fail(err)
	}
	closers = append(closers, holder.close)
	tag := randHex(6)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("s7-%s-%d", tag, i)
		// A blocking lock of a free name: pglease's holder then has its
		// dedicated session (and bell) at once, as a client that waited
		// for a lease once does; one that only tried opens it with its
		// first renewal, a third of the TTL later, and the waiting clients
		// listen for notifications until they find its bell.
		u, err := holder.lock(ctx, names[i], true)
		if err != nil {
			return fail(fmt.Errorf("hold %s for the waiting clients: %w", names[i], err))
		}
		closers = append(closers, func() {
			rctx, cancel := releaseCtx()
			defer cancel()
			_ = u(rctx)
		})
	}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var werr error
	closers = append(closers, func() {
		cancel()
		wg.Wait()
	})
	for i := range n {
		lk, err := p.open(ctx, e, peerOpts{tableTag: "_s3", conns: 2, ttl: cfg.waitTTL(p)})
		if err != nil {
			return fail(fmt.Errorf("waiting client %d of %d: %w", i+1, n, err))
		}
		// Closed after the waits end (closers run in reverse).
		closers = append(closers[:len(closers)-1], lk.close, closers[len(closers)-1])
		wg.Go(func() {
			u, err := lk.lock(wctx, names[i], true)
			if err == nil {
				// The holder never releases while the waiters wait.
				err = fmt.Errorf("a waiting client got %s, which another client holds", names[i])
				rctx, cancel := releaseCtx()
				_ = u(rctx)
				cancel()
			}
			if wctx.Err() == nil {
				mu.Lock()
				werr = err
				mu.Unlock()
			}
		})
	}
	sleepCtx(ctx, cfg.s7Settle)
	mu.Lock()
	err = werr
	mu.Unlock()
	if err != nil {
		return fail(err)
	}
	return stop, ctx.Err()
}

func (r *report) s7Of(id string, others int) *s7Row {
	for i := range r.s7 {
		if x := &r.s7[i]; x.peer.id == id && x.others == others && x.err == nil && len(x.lat) > 0 {
			return x
		}
	}
	return nil
}

func (r *report) mdS7(w func(string, ...any)) {
	w("## S7 — hand-off amid clients waiting on other names\n\n")
	w("S3's hand-off between two clients of their own (a holder and one blocked waiter), while *others* more clients, each of its own, wait blocked on a name of their own, all held by one more client (on the same table, waiting %v before the first sample). A hand-off should cost the same however many clients wait on other names; the last column is the p50 over the same peer's p50 with none waiting. At most %d samples or %v per row.\n\n",
		r.cfg.s7Settle, r.cfg.s3Samples, r.cfg.s3Cap)
	w("| peer | others waiting | n | p50 ms | p90 ms | p99 ms | max ms | p50 ÷ p50 with none | overlaps |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.s7 {
		if x.err != nil || len(x.lat) == 0 {
			cell := "no hand-off"
			if x.err != nil {
				cell = errCell(x.err)
			}
			w("| %s | %d | 0 | | | | | | %s |\n", x.peer.title, x.others, cell)
			continue
		}
		rel := "–"
		if z := r.s7Of(x.peer.id, 0); z != nil {
			rel = ratio(float64(x.lat.pct(50)), float64(z.lat.pct(50)))
		}
		w("| %s | %d | %d | %s | %s | %s | %s | %s | %d |\n", x.peer.title, x.others, len(x.lat), ms(x.lat.pct(50)), ms(x.lat.pct(90)),
			ms(x.lat.pct(99)), ms(x.lat.pct(100)), rel, x.violations)
	}
	w("\n")
}

// s7Peers are the peers S7 runs: pglease in both modes, and raw advisory
// locks, whose waiters the server wakes itself (a lock's release wakes its
// own waiters only).
var s7Peers = set("pglease", "pglease-ff", "advisory")
