package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/pglease/pglease"
)

// S7: a hand-off on one name while other clients wait on other names. A
// hand-off should cost the same whatever the rest of the fleet waits for,
// and each waiting client one connection; the rows show how the hand-off's
// latency and the server's connections grow with the number of clients
// blocked on other names, for each way the holder of those names took them.

type s7Row struct {
	peer       *peer
	holding    string // how the holder took the bystanders' names (holdWaited…)
	others     int    // clients blocked on other names meanwhile
	conns      int    // client connections to the bench database after the settle; -1 unknown
	lat        durs
	violations int64
	err        error
}

// The holder topologies of S7 (flag -s7holders): how the one holder client
// took the names its bystanders wait on.
const (
	holdWaited = "waited" // a blocking lock of the free name (every peer)
	holdTried  = "tried"  // pglease: TryAcquire
	holdFF     = "ff"     // pglease: TryAcquire with WithFastFailover
	holdShared = "shared" // pglease: TryAcquire of a shared lease (WithShared); the bystanders wait for an exclusive one
)

// s7Holdings lists the holder topologies in report order.
var s7Holdings = []string{holdWaited, holdTried, holdFF, holdShared}

// parseHoldings parses a comma-separated list of holder topologies.
func parseHoldings(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(s7Holdings, f) {
			return nil, fmt.Errorf("unknown holder topology %q (known: %s)", f, strings.Join(s7Holdings, ","))
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}

// holdingsFor returns the holder topologies S7 runs for peer id out of
// selected: advisory locks know one way to hold (waited); pglease-ff's
// leases are fast-failover already, so its ff is its tried and runs once
// (as tried) when both are selected.
func holdingsFor(id string, selected []string) []string {
	switch {
	case !strings.HasPrefix(id, "pglease"):
		return []string{holdWaited}
	case id == "pglease-ff" && slices.Contains(selected, holdTried):
		return slices.DeleteFunc(slices.Clone(selected), func(h string) bool { return h == holdFF })
	}
	return selected
}

// take has holder take the free name as holding says.
func take(ctx context.Context, holder locker, holding, name string) (unlock, error) {
	if holding == holdWaited {
		return holder.lock(ctx, name, true)
	}
	pl, ok := holder.(*pgleaseLocker)
	if !ok {
		return nil, fmt.Errorf("holder topology %q needs a pglease peer", holding)
	}
	var extra []pglease.Option
	switch holding {
	case holdFF:
		extra = append(extra, pglease.WithFastFailover())
	case holdShared:
		extra = append(extra, pglease.WithShared())
	}
	return pl.lockWith(ctx, name, false, extra...)
}

// runS7 measures S3's hand-off between two clients (a holder and one
// blocked waiter) while others clients, each of its own, wait blocked on a
// name of their own held by one more client, which took those names as
// holding says (with no others, it holds one name nobody waits on).
func runS7(ctx context.Context, e *env, cfg *config, p *peer, holding string, others int) (r s7Row) {
	r.peer, r.holding, r.others = p, holding, others
	stop, conns, err := bystanders(ctx, e, cfg, p, holding, others)
	r.conns = conns
	if err != nil {
		r.err = err
		return r
	}
	defer stop()
	r.lat, r.violations, r.err = measureHandoffs(ctx, e, cfg, p, 1, false)
	return r
}

// bystanders starts n clients each blocked on a name of its own, all
// held by one more client (which took them as holding says, and holds one
// name when n is 0), and returns once they have been waiting for
// cfg.s7Settle, with the bench database's client connections counted then
// (-1 if the count failed); stop ends them.
func bystanders(ctx context.Context, e *env, cfg *config, p *peer, holding string, n int) (stop func(), conns int, err error) {
	conns = -1
	// Advisory locks hold a connection per lock and per blocked waiter;
	// pglease a dedicated one per client and its pool's.
	restore, _, _, err := capEnsureConns(ctx, e, 3*n+100)
	if err != nil {
		return nil, conns, err
	}
	var closers []func()
	stop = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
		restore()
	}
	fail := func(err error) (func(), int, error) {
		stop()
		return nil, conns, err
	}
	holder, err := p.open(ctx, e, peerOpts{tableTag: "_s3", conns: int32(n + 2), ttl: cfg.waitTTL(p)})
	if err != nil {
		return fail(err)
	}
	closers = append(closers, holder.close)
	tag := randHex(6)
	names := make([]string, max(n, 1))
	for i := range names {
		names[i] = fmt.Sprintf("s7-%s-%d", tag, i)
		// With holdWaited, a blocking lock of a free name: pglease's holder
		// then has its dedicated session (and bell) at once, as a client
		// that waited for a lease once does; one that only tried (holdTried,
		// holdFF, holdShared) may open it later, and the waiting clients
		// then listen for notifications until they find its bell.
		u, err := take(ctx, holder, holding, names[i])
		if err != nil {
			return fail(fmt.Errorf("hold %s (%s) for the waiting clients: %w", names[i], holding, err))
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
	if c, cerr := benchConns(ctx, e); cerr == nil {
		conns = c
	} else {
		logf("S7 %s %s others=%d: counting connections: %v", p.id, holding, n, cerr)
	}
	return stop, conns, ctx.Err()
}

// s7Base returns the row of peer id and holder topology holding with no
// other clients waiting, or nil.
func (r *report) s7Base(id, holding string) *s7Row {
	for i := range r.s7 {
		if x := &r.s7[i]; x.peer.id == id && x.holding == holding && x.others == 0 && x.err == nil {
			return x
		}
	}
	return nil
}

// s7PerClient is the row's connections per waiting client over those of
// the row of the same peer and topology with none waiting, or "–".
func (r *report) s7PerClient(x *s7Row) string {
	z := r.s7Base(x.peer.id, x.holding)
	if x.others == 0 || x.conns < 0 || z == nil || z.conns < 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", float64(x.conns-z.conns)/float64(x.others))
}

func (r *report) mdS7(w func(string, ...any)) {
	w("## S7 — hand-off amid clients waiting on other names\n\n")
	w("S3's hand-off between two clients of their own (a holder and one blocked waiter), while *others* more clients, each of its own, wait blocked on a name of their own, all held by one more client (on the same table, waiting %v before the first sample; with no others that client holds one name nobody waits on). "+
		"*Holder took* is how that client took the names: waited = a blocking acquire of the free name, tried = TryAcquire, ff = TryAcquire with WithFastFailover, shared = TryAcquire with WithShared (the others wait for an exclusive lease); pglease FastFailover's leases are all fast-failover, so its ff is its tried. "+
		"A hand-off should cost the same however many clients wait on other names; *p50 ÷ none* is the p50 over that of the same peer and topology with none waiting. "+
		"*Connections* counts the bench database's client backends once the others have waited %v (before the hand-offs; the hand-off pair not included); *per waiting client* is the increase over the row with none waiting, per other client. At most %d samples or %v per row.\n\n",
		r.cfg.s7Settle, r.cfg.s7Settle, r.cfg.s3Samples, r.cfg.s3Cap)
	w("| peer | holder took | others waiting | n | p50 ms | p90 ms | p99 ms | max ms | p50 ÷ none | overlaps | connections | per waiting client |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for i := range r.s7 {
		x := &r.s7[i]
		conns := "–"
		if x.conns >= 0 {
			conns = fmt.Sprint(x.conns)
		}
		if x.err != nil || len(x.lat) == 0 {
			cell := "no hand-off"
			if x.err != nil {
				cell = errCell(x.err)
			}
			w("| %s | %s | %d | 0 | | | | | | %s | %s | %s |\n", x.peer.title, x.holding, x.others, cell, conns, r.s7PerClient(x))
			continue
		}
		rel := "–"
		if z := r.s7Base(x.peer.id, x.holding); z != nil && len(z.lat) > 0 {
			rel = ratio(float64(x.lat.pct(50)), float64(z.lat.pct(50)))
		}
		w("| %s | %s | %d | %d | %s | %s | %s | %s | %s | %d | %s | %s |\n", x.peer.title, x.holding, x.others, len(x.lat), ms(x.lat.pct(50)), ms(x.lat.pct(90)),
			ms(x.lat.pct(99)), ms(x.lat.pct(100)), rel, x.violations, conns, r.s7PerClient(x))
	}
	w("\n")
}

// s7Peers are the peers S7 runs: pglease in both modes, and raw advisory
// locks, whose waiters the server wakes itself (a lock's release wakes its
// own waiters only).
var s7Peers = set("pglease", "pglease-ff", "advisory")
