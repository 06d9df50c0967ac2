package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
)

// ---- many clients ----

func capClients(ctx context.Context, e *env, cc capConfig, n int) (r capClientRow) {
	r.clients, r.leases, r.ttl = n, cc.clientLeases, cc.clientTTL
	r.procs = min(cc.clientProcs, n)
	const table = "pglease_leases_capc"
	// The measuring process's own client: it creates the table and later
	// runs the try+release cycles that every other client hears about.
	own, err := pglease.Open(ctx, e.dsn, pglease.Config{Table: table, TTL: cc.clientTTL, MaxConns: 2})
	if err != nil {
		r.err = err
		return r
	}
	defer own.Close()
	if err := admin.Migrate(ctx, own); err != nil {
		r.err = err
		return r
	}
	if err := capCheckpoint(ctx, e); err != nil {
		r.err = err
		return r
	}
	if r.base, err = capSnapshot(ctx, e); err != nil {
		r.err = err
		return r
	}
	prefix := "capc-" + randHex(4) + "-"
	var specs []capSpec
	for i := range r.procs {
		k := n / r.procs
		if i < n%r.procs {
			k++
		}
		specs = append(specs, capSpec{Role: "clients", Table: table, Prefix: fmt.Sprintf("%s%d-", prefix, i), Clients: k, Leases: cc.clientLeases, TTL: cc.clientTTL})
	}
	t0 := time.Now()
	procs, err := startCapProcs(ctx, e, specs)
	if err != nil {
		r.err = err
		return r
	}
	r.start = time.Since(t0)
	defer func() {
		stopCapProcs(procs)
		// The measuring process's own client may have connected its
		// dedicated connection meanwhile.
		waitConns(ctx, e, r.base.c.conns+1, 30*time.Second)
	}()
	interval := cc.clientTTL / 3
	// Every client renews once (and connects its dedicated connection).
	sleepCtx(ctx, interval+min(interval/2, 2*time.Second))
	a, err := capSnapshot(ctx, e)
	if err != nil {
		r.err = err
		return r
	}
	sleepCtx(ctx, time.Duration(cc.clientIntervals)*interval)
	b, err := capSnapshot(ctx, e)
	if err != nil {
		r.err = err
		return r
	}
	r.d = b.sub(a)
	_, r.lost = leaseCounts(procs)

	// Try+release cycles on distinct names from one goroutine: every
	// release notifies every client listening on the table.
	if a, err = capSnapshot(ctx, e); err != nil {
		r.err = err
		return r
	}
	end := time.Now().Add(cc.churn)
	var tries, rels durs
	for i := 0; time.Now().Before(end); i++ {
		t0 := time.Now()
		l, err := own.TryAcquire(ctx, fmt.Sprintf("%schurn-%d", prefix, i))
		t1 := time.Now()
		if err == nil {
			rctx, cancel := releaseCtx()
			err = l.Release(rctx)
			cancel()
		}
		if err != nil {
			r.err = fmt.Errorf("try+release: %w", err)
			return r
		}
		tries, rels = append(tries, t1.Sub(t0)), append(rels, time.Since(t1))
		r.cycles++
	}
	r.try, r.release = tries.sorted().pct(50), rels.sorted().pct(50)
	if b, err = capSnapshot(ctx, e); err != nil {
		r.err = err
		return r
	}
	r.churn = b.sub(a)
	return r
}

// ---- waiters ----

func capWaiters(ctx context.Context, e *env, cc capConfig, w capWaitCase) (r capWaitRow) {
	r.capWaitCase = w
	const table = "pglease_leases_capw"
	holder, ttl, err := capHolder(ctx, e, table)
	if err != nil {
		r.err = err
		return r
	}
	defer holder.Close()
	r.holderTTL = ttl
	var opts []pglease.Option
	if w.ff {
		opts = append(opts, pglease.WithFastFailover())
	}
	if err := capCheckpoint(ctx, e); err != nil {
		r.err = err
		return r
	}
	prefix := "capw-" + randHex(4) + "-"
	var first *pglease.Lease
	for i := range w.names {
		l, err := holder.TryAcquire(ctx, prefix+strconv.Itoa(i), opts...)
		if err != nil {
			r.err = fmt.Errorf("holder: %w", err)
			return r
		}
		if i == 0 {
			first = l
		}
	}
	// A manual renewal opens the holder's dedicated connection now (LISTEN
	// and its settings are three statements), not in the window.
	if err := first.Renew(ctx); err != nil {
		r.err = fmt.Errorf("holder renew: %w", err)
		return r
	}
	if r.base, err = capSnapshot(ctx, e); err != nil {
		r.err = err
		return r
	}
	var specs []capSpec
	for i := range w.procs {
		k := w.waiters / w.procs
		if i < w.waiters%w.procs {
			k++
		}
		specs = append(specs, capSpec{Role: "waiters", Table: table, Prefix: prefix, Waiters: k, Names: w.names, FF: w.ff, Hold: cc.chainHold})
	}
	procs, err := startCapProcs(ctx, e, specs)
	if err != nil {
		r.err = err
		return r
	}
	defer func() {
		stopCapProcs(procs)
		// The measuring process's own client may have connected its
		// dedicated connection meanwhile.
		waitConns(ctx, e, r.base.c.conns+1, 30*time.Second)
	}()
	sleepCtx(ctx, cc.waitSettle)
	a, err := capSnapshot(ctx, e)
	if err != nil {
		r.err = err
		return r
	}
	sleepCtx(ctx, cc.waitWindow)
	b, err := capSnapshot(ctx, e)
	if err != nil {
		r.err = err
		return r
	}
	r.d = b.sub(a)
	for _, p := range procs {
		p.mu.Lock()
		n := len(p.events)
		p.mu.Unlock()
		if n > 0 {
			r.err = errors.New("a waiter acquired a held lease")
			return r
		}
	}

	// The hand-off chain on the first name.
	if a, err = capSnapshot(ctx, e); err != nil {
		r.err = err
		return r
	}
	t0 := time.Now().UnixNano()
	rctx, cancel := releaseCtx()
	err = first.Release(rctx)
	cancel()
	if err != nil {
		r.err = fmt.Errorf("holder release: %w", err)
		return r
	}
	sleepCtx(ctx, cc.chain)
	if b, err = capSnapshot(ctx, e); err != nil {
		r.err = err
		return r
	}
	r.chain = b.sub(a)
	var events []capEvent
	for _, p := range procs {
		p.mu.Lock()
		events = append(events, p.events...)
		p.mu.Unlock()
	}
	r.lat, r.overlaps = handoffs(events, prefix+"0", t0, b.c.at.UnixNano())
	if len(r.lat) == 0 {
		r.err = errors.New("no hand-off in the chain")
	}
	return r
}

// handoffs reads the chain of one name from its events: the first holder
// released at t0; every acquisition up to end is a hand-off whose latency
// runs from the previous release. An acquisition while the name was still
// held (no release since the previous acquisition) is an overlap.
func handoffs(events []capEvent, name string, t0, end int64) (lat durs, overlaps int) {
	var evs []capEvent
	for _, ev := range events {
		if ev.name == name && ev.at >= t0 && ev.at <= end {
			evs = append(evs, ev)
		}
	}
	// A release is stamped before its acquisition's successor can exist;
	// on equal stamps the release comes first.
	slices.SortStableFunc(evs, func(a, b capEvent) int {
		if a.at != b.at {
			if a.at < b.at {
				return -1
			}
			return 1
		}
		if a.got == b.got {
			return 0
		}
		if !a.got {
			return -1
		}
		return 1
	})
	lastRel, held := t0, false
	for _, ev := range evs {
		if !ev.got {
			lastRel, held = ev.at, false
			continue
		}
		if held {
			overlaps++
		} else {
			lat = append(lat, time.Duration(ev.at-lastRel))
		}
		held = true
	}
	return lat.sorted(), overlaps
}
