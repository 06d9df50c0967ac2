package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pglease/pglease"
)

// S7: a hand-off on one name while other clients wait on other names. A
// hand-off should cost the same whatever the rest of the fleet waits for,
// and each waiting client one connection; the rows show how the hand-off's
// latency and the server's connections grow with the number of clients
// blocked on other names, for each way the holder of those names took them.

type s7Row struct {
	peer       *peer
	holding    string        // how the holder took the bystanders' names (holdWaited…)
	others     int           // clients blocked on other names meanwhile
	conns      int           // client connections to the bench database after the settle; -1 unknown
	start      time.Duration // the time the others took to open and start waiting
	retried    int           // the times a waiting client's Open or wait failed and was retried (child processes)
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
	stop, err := bystanders(ctx, e, cfg, p, holding, others, &r)
	if err != nil {
		r.err = err
		return r
	}
	r.lat, r.violations, r.err = measureHandoffs(ctx, e, cfg, p, 1, false)
	// A waiting client that got its name during the hand-offs fails the row
	// too.
	if err := stop(); r.err == nil {
		r.err = err
	}
	return r
}

// s7TableTag is the table tag of S7 (S3's table, pglease_leases_s3 for
// pglease), and s7Opens the clients opened at a time, in each child process
// or in the bench process.
const (
	s7TableTag = "_s3"
	s7Opens    = 16
)

// bystanders starts n clients each blocked on a name of its own, all held
// by one more client (which took them as holding says, and holds one name
// when n is 0), and returns once they have been waiting for cfg.s7Settle,
// with r.start (the time the n clients took to open and start waiting,
// their connections up), r.conns (the bench database's client connections
// then, -1 if the count failed) and r.retried set. A pglease peer's waiting
// clients run in child processes (this binary re-executed, as FLEET's
// waiters are: fleetProcs(n) of them, each opening s7Opens clients at a
// time), any other peer's in this process (s7Opens opened at a time). stop ends them, sets r.retried again
// and reports an error if a waiting client got its name (which the holder
// holds throughout) or, in this process, failed.
func bystanders(ctx context.Context, e *env, cfg *config, p *peer, holding string, n int, r *s7Row) (stop func() error, err error) {
	r.conns = -1
	// The backends of the last row's killed children take a moment to go.
	waitConns(ctx, e, 0, 30*time.Second)
	// Advisory locks hold a connection per lock and per blocked waiter;
	// pglease a dedicated one per client and its pool's.
	restore, _, _, err := capEnsureConns(ctx, e, 3*n+100)
	if err != nil {
		return nil, err
	}
	var closers []func()
	check := func() (int, error) { return 0, nil }
	stop = func() error {
		var err error
		r.retried, err = check()
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
		restore()
		return err
	}
	fail := func(err error) (func() error, error) {
		_ = stop()
		return nil, err
	}
	// The holder migrates the table, once for the row: the waiting clients
	// only open clients on it.
	holder, err := p.open(ctx, e, peerOpts{tableTag: s7TableTag, conns: int32(n + 2), ttl: cfg.waitTTL(p)})
	if err != nil {
		return fail(err)
	}
	closers = append(closers, holder.close)
	// Waiting client i waits on prefix+i (a child derives its names from
	// its first one's number).
	prefix := "s7-" + randHex(6) + "-"
	for i := range max(n, 1) {
		name := prefix + strconv.Itoa(i)
		// With holdWaited, a blocking lock of a free name: pglease's holder
		// then has its dedicated session (and bell) at once, as a client
		// that waited for a lease once does; one that only tried (holdTried,
		// holdFF, holdShared) may open it later, and the waiting clients
		// then listen for notifications until they find its bell.
		u, err := take(ctx, holder, holding, name)
		if err != nil {
			return fail(fmt.Errorf("hold %s (%s) for the waiting clients: %w", name, holding, err))
		}
		closers = append(closers, func() {
			rctx, cancel := releaseCtx()
			defer cancel()
			_ = u(rctx)
		})
	}
	if n > 0 {
		t0 := time.Now()
		if pl, ok := holder.(*pgleaseLocker); ok {
			check, err = childBystanders(ctx, e, pl, "pglease_leases"+s7TableTag, prefix, n, cfg.waitTTL(p), &closers)
		} else {
			check, err = inProcBystanders(ctx, e, cfg, p, prefix, n, &closers)
		}
		r.start = time.Since(t0)
		if err != nil {
			return fail(fmt.Errorf("%d waiting clients: %w", n, err))
		}
	}
	sleepCtx(ctx, cfg.s7Settle)
	if r.retried, err = check(); err != nil {
		return fail(err)
	}
	if c, cerr := benchConns(ctx, e); cerr == nil {
		r.conns = c
	} else {
		logf("S7 %s %s others=%d: counting connections: %v", p.id, holding, n, cerr)
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	return stop, nil
}

// childBystanders starts n pglease waiting clients in child processes
// (roleWaiters, as FLEET's waiters, but with the holder's MaxConns 2 per
// client, its fast failover and ttl), client i blocked in Acquire on
// prefix+i of table, and returns once they all wait; it appends their
// killing to closers, and waits until their connections stop growing (the
// sessions connect after a child's ready). check returns the times a
// waiting client's Open or Acquire failed (each retried a second later, as
// FLEET's are: under load an Open's connect may time out) and an error if
// a waiting client got its name, as the children last said (they report
// every 200 ms).
func childBystanders(ctx context.Context, e *env, holder *pgleaseLocker, table, prefix string, n int, ttl time.Duration, closers *[]func()) (check func() (int, error), err error) {
	specs := fleetSpecs(roleWaiters, n, table, prefix)
	for i := range specs {
		specs[i].MaxConns, specs[i].FF, specs[i].TTL = 2, holder.ff, ttl
	}
	t0 := time.Now()
	procs, err := startCapProcs(ctx, e, specs)
	if err != nil {
		return nil, err
	}
	*closers = append(*closers, func() { stopCapProcs(procs) })
	// A child is ready once its clients have opened and called Acquire;
	// their dedicated sessions may still be connecting (1,000 clients on a
	// 2-core machine: their connections grew for 5 to 8 s more). The settle
	// starts once they have.
	opened := time.Since(t0)
	c, grew := connsSteady(ctx, e, 3*time.Second, 3*time.Minute)
	logf("S7: %d waiting clients in %d processes opened in %v; their connections stopped growing %v later at %d (grew for %v)",
		n, len(procs), opened.Round(time.Millisecond), (time.Since(t0) - opened).Round(time.Millisecond), c, grew.Round(time.Millisecond))
	return func() (int, error) {
		got, retried := leaseCounts(procs)
		if got > 0 {
			return retried, fmt.Errorf("%d waiting clients got their name, which another client holds", got)
		}
		return retried, nil
	}, nil
}

// connsSteady waits until the bench database's client connections have
// not grown for quiet (counted every second), at most limit, and returns
// the last count and how long it grew.
func connsSteady(ctx context.Context, e *env, quiet, limit time.Duration) (n int, grew time.Duration) {
	t0 := time.Now()
	n, last := -1, t0
	for ctx.Err() == nil && time.Since(t0) < limit {
		if c, err := benchConns(ctx, e); err == nil && c > n {
			n, last = c, time.Now()
		} else if time.Since(last) >= quiet {
			break
		}
		sleepCtx(ctx, time.Second)
	}
	return n, last.Sub(t0)
}

// inProcBystanders opens n clients of p in this process, s7Opens at a
// time, and has client i block on prefix+i; it appends the end of their
// waits and their closing to closers. check reports the last waiting
// client that got its name or failed (never retried: 0).
func inProcBystanders(ctx context.Context, e *env, cfg *config, p *peer, prefix string, n int, closers *[]func()) (check func() (int, error), err error) {
	lks := make([]locker, n)
	// Closed after the waits end (closers run in reverse).
	*closers = append(*closers, func() {
		for _, lk := range lks {
			if lk != nil {
				lk.close()
			}
		}
	})
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, s7Opens)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			lk, err := p.open(ctx, e, peerOpts{tableTag: s7TableTag, conns: 2, ttl: cfg.waitTTL(p)})
			mu.Lock()
			defer mu.Unlock()
			lks[i] = lk
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("waiting client %d: %w", i+1, err)
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	wctx, cancel := context.WithCancel(ctx)
	var werr error
	*closers = append(*closers, func() {
		cancel()
		wg.Wait()
	})
	for i, lk := range lks {
		name := prefix + strconv.Itoa(i)
		wg.Go(func() {
			u, err := lk.lock(wctx, name, true)
			if err == nil {
				// The holder never releases while the waiters wait.
				err = fmt.Errorf("a waiting client got %s, which another client holds", name)
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
	return func() (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return 0, werr
	}, nil
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
		"pglease's others run in child processes (the bench binary re-executed, one per 200 clients, at most 10, each opening 16 clients at a time, as FLEET's waiters; MaxConns 2 each; the wait starts once the bench database's connections have stopped growing for 3 s, the waiters' sessions up), the advisory lock's in the bench process (opened 16 at a time); the holder and the hand-off pair run in the bench process. A waiting client that gets its name fails the row, as does one whose Open or wait fails in the bench process; in a child, that is retried a second later (as FLEET's are) and counted below the table. "+
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
	var retried []string
	for _, x := range r.s7 {
		if x.retried > 0 {
			retried = append(retried, fmt.Sprintf("%s, %s, %d others: %d", x.peer.title, x.holding, x.others, x.retried))
		}
	}
	if len(retried) > 0 {
		w("Waiting clients' Opens or waits that failed and were retried: %s.\n\n", strings.Join(retried, "; "))
	}
}

// s7Peers are the peers S7 runs: pglease in both modes, and raw advisory
// locks, whose waiters the server wakes itself (a lock's release wakes its
// own waiters only).
var s7Peers = set("pglease", "pglease-ff", "advisory")
