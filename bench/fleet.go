package main

// FLEET: the server connections a fleet of clients costs, per client, for
// pglease only (issue 43: a fleet should cost one connection per client).
// It is not in the default scenario list; run it with
//
//	go run . -scenarios FLEET [-quick] [-fleet 10,100,1000]
//
// For each fleet size N it measures two fleets, each client a
// pglease.Client of its own opened with the default Config (but the
// table), in child processes (this binary re-executed with -child cap, as
// CAP's clients are):
//
//   - electors: N clients each running an Elector on one name; once exactly
//     one leads and the others have campaigned for the settle time;
//   - waiters: one holder client (in this process) takes N names with
//     TryAcquire, then N clients each block in Acquire on one of them.
//
// It then counts the bench database's client connections (until two
// counts a second apart agree) and reports them per client, and whether
// the fleet fits max_connections = 1.1 × N (connections ≤ 1.1 N + 10).

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
)

// fleetTable is the lease table of the FLEET scenario.
const fleetTable = "pglease_leases_fleet"

// The roles of a fleet's child processes (capSpec.Role).
const (
	roleElectors = "fleet-electors"
	roleWaiters  = "fleet-waiters"
)

// fleetRow is one fleet's measurement.
type fleetRow struct {
	role    string // "electors" or "waiters"
	clients int    // N: electors, or blocked waiters (besides the holder)
	procs   int    // child processes the clients ran in
	start   time.Duration
	holder  int  // waiters: the holder client's connections, counted before the waiters started
	conns   int  // the bench database's client connections after the settle
	settled bool // two counts a second apart agreed
	retried int  // the times an Open, an Elector's Run or a waiter's Acquire returned an error, and was retried
	err     error
}

// perClient is the fleet's connections per client, the holder's left out.
func (r fleetRow) perClient() float64 {
	return float64(r.conns-r.holder) / float64(max(r.clients, 1))
}

// fits reports whether the fleet's connections, the holder's included,
// fit max_connections = 1.1 × N with 10 to spare for the rest.
func (r fleetRow) fits() bool { return float64(r.conns) <= 1.1*float64(r.clients)+10 }

// parseInts parses a comma-separated list of non-negative integers.
func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q: want a comma-separated list of counts, e.g. 10,100,1000", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// fleetProcs is the number of child processes for n clients: one per 200,
// at most 10.
func fleetProcs(n int) int { return min(10, max(1, (n+199)/200)) }

// fleetSpecs splits n clients of role on table among fleetProcs(n)
// children; a waiters child's clients wait on names prefix+First… in turn.
func fleetSpecs(role string, n int, table, prefix string) []capSpec {
	procs := fleetProcs(n)
	var specs []capSpec
	first := 0
	for i := range procs {
		k := n / procs
		if i < n%procs {
			k++
		}
		specs = append(specs, capSpec{Role: role, Table: table, Prefix: prefix, Clients: k, First: first})
		first += k
	}
	return specs
}

// benchConns counts the client backends connected to the bench database,
// not the one that counts.
func benchConns(ctx context.Context, e *env) (int, error) {
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n int
	err = conn.QueryRow(ctx, `
SELECT count(*)::int FROM pg_stat_activity
 WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()`).Scan(&n)
	return n, err
}

// settledConns waits settle, then counts the bench database's connections
// every second until two counts agree (at most a minute).
func settledConns(ctx context.Context, e *env, settle time.Duration) (n int, settled bool, err error) {
	sleepCtx(ctx, settle)
	if n, err = benchConns(ctx, e); err != nil {
		return n, false, err
	}
	for range 60 {
		sleepCtx(ctx, time.Second)
		m, err := benchConns(ctx, e)
		if err != nil || m == n {
			return m, err == nil, err
		}
		n = m
	}
	return n, false, ctx.Err()
}

// runFleet measures the electors and the waiters of every fleet size of
// cfg.fleetNs; it raises max_connections to 3 N + 100 for the largest
// (what the library needed before issue 43) and puts it back after.
func runFleet(ctx context.Context, e *env, cfg *config) (rows []fleetRow, maxConns int) {
	need := 0
	for _, n := range cfg.fleetNs {
		need = max(need, 3*n+100)
	}
	restore, maxConns, _, err := capEnsureConns(ctx, e, need)
	defer restore()
	if err == nil {
		err = fleetMigrate(ctx, e)
	}
	if err != nil {
		return []fleetRow{{role: "setup", err: err}}, maxConns
	}
	for _, n := range cfg.fleetNs {
		for _, role := range []string{"electors", "waiters"} {
			r := fleetRun(ctx, e, cfg, role, n)
			logf("FLEET %-8s n=%d procs=%d start=%v conns=%d holder=%d per-client=%.2f settled=%v fits-1.1N=%v retried=%d err=%v", role, n, r.procs,
				r.start.Round(time.Millisecond), r.conns, r.holder, r.perClient(), r.settled, r.fits(), r.retried, r.err)
			rows = append(rows, r)
		}
	}
	return rows, maxConns
}

// fleetMigrate creates the fleet's table, so that the clients do not race
// to.
func fleetMigrate(ctx context.Context, e *env) error {
	c, err := pglease.Open(ctx, e.dsn, pglease.Config{Table: fleetTable})
	if err != nil {
		return err
	}
	defer c.Close()
	return admin.Migrate(ctx, c)
}

// fleetRun measures one fleet of n clients in role "electors" or
// "waiters".
func fleetRun(ctx context.Context, e *env, cfg *config, role string, n int) (r fleetRow) {
	r.role, r.clients, r.procs = role, n, fleetProcs(n)
	// The backends of the last row's killed children take a moment to go.
	waitConns(ctx, e, 0, 30*time.Second)
	prefix := "fleet-" + randHex(4) + "-"
	childRole := roleElectors
	if role == "waiters" {
		childRole = roleWaiters
		holder, err := pglease.Open(ctx, e.dsn, pglease.Config{Table: fleetTable})
		if err != nil {
			r.err = err
			return r
		}
		defer holder.Close() // after the children are gone (defers run in reverse)
		for i := range n {
			l, err := holder.TryAcquire(ctx, prefix+strconv.Itoa(i))
			if err != nil {
				r.err = fmt.Errorf("holder: %w", err)
				return r
			}
			// A renewal starts what a client starts once (its renewal loop
			// and dedicated session), so that the holder's count is final.
			if i == 0 {
				if err := l.Renew(ctx); err != nil {
					r.err = fmt.Errorf("holder: %w", err)
					return r
				}
			}
		}
		if r.holder, err = benchConns(ctx, e); err != nil {
			r.err = err
			return r
		}
	}
	t0 := time.Now()
	procs, err := startCapProcs(ctx, e, fleetSpecs(childRole, n, fleetTable, prefix))
	r.start = time.Since(t0)
	if err != nil {
		r.err = err
		return r
	}
	defer func() {
		stopCapProcs(procs)
	}()
	// The children report "HELD x retried": x is the electors leading, or
	// the waiters that got a name (which the holder holds: none should).
	if role == "electors" {
		deadline := time.Now().Add(time.Minute)
		for held, _ := leaseCounts(procs); held != 1; held, _ = leaseCounts(procs) {
			if time.Now().After(deadline) || ctx.Err() != nil {
				r.err = fmt.Errorf("%d electors lead after a minute, want 1", held)
				return r
			}
			sleepCtx(ctx, 100*time.Millisecond)
		}
	}
	r.conns, r.settled, r.err = settledConns(ctx, e, cfg.fleetSettle)
	held, retried := leaseCounts(procs)
	r.retried = retried
	switch {
	case r.err != nil:
	case role == "electors" && held != 1:
		r.err = fmt.Errorf("%d electors lead at the count, want 1", held)
	case role == "waiters" && held != 0:
		r.err = fmt.Errorf("%d waiters got a name the holder holds", held)
	}
	return r
}

// fleetChild is the child side of a fleet (and of S7's waiting clients):
// it opens s.Clients clients (16 at a time; MaxConns s.MaxConns when set),
// each of which runs an Elector on s.Prefix (electors) or blocks in
// Acquire on its name (waiters; with WithFastFailover if s.FF, WithTTL if
// s.TTL), then reports every 200 ms
// "HELD x failed": the electors leading or the waiters that got their
// name, and the times an Open, an Elector's Run or a waiter's Acquire
// returned an error. Those are retried a second later, as an application would (an
// Elector with a new one), so that the fleet stays whole; the first few
// errors are logged.
func fleetChild(ctx context.Context, e *env, s capSpec) error {
	electors := make([]atomic.Pointer[pglease.Elector], s.Clients)
	var got, failed atomic.Int64
	retry := func(what string, err error) bool {
		if ctx.Err() != nil {
			return false
		}
		if failed.Add(1) <= 5 {
			fmt.Fprintf(os.Stderr, "bench child %s: %s: %v (retried)\n", s.Role, what, err)
		}
		sleepCtx(ctx, time.Second)
		return ctx.Err() == nil
	}
	lead := func(ctx context.Context) error {
		<-ctx.Done()
		return nil
	}
	ccfg := pglease.Config{Table: s.Table, MaxConns: s.MaxConns}
	var opts []pglease.Option
	if s.FF {
		opts = append(opts, pglease.WithFastFailover())
	}
	if s.TTL > 0 {
		opts = append(opts, pglease.WithTTL(s.TTL))
	}
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range s.Clients {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, err := pglease.Open(ctx, e.dsn, ccfg)
			for err != nil {
				if !retry("open", err) {
					return
				}
				c, err = pglease.Open(ctx, e.dsn, ccfg)
			}
			if s.Role == roleWaiters {
				name := s.Prefix + strconv.Itoa(s.First+i)
				go func() {
					for {
						l, err := c.Acquire(ctx, name, opts...)
						if err == nil {
							got.Add(1)
							_ = l.Release(context.Background())
							return
						}
						if !retry("acquire "+name, err) {
							return
						}
					}
				}()
				return
			}
			go func() {
				for {
					el, err := c.NewElector(s.Prefix, lead, pglease.ElectorConfig{})
					if err == nil {
						electors[i].Store(el)
						err = el.Run(ctx)
					}
					if !retry("elector", err) {
						return
					}
				}
			}()
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	fmt.Println("READY")
	for {
		held := got.Load()
		for i := range electors {
			if el := electors[i].Load(); el != nil && el.IsLeader() {
				held++
			}
		}
		fmt.Printf("HELD %d %d\n", held, failed.Load())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// mdFleet writes the FLEET section.
func (r *report) mdFleet(w func(string, ...any)) {
	w("## FLEET — connections per client\n\n")
	w("The server connections a fleet of N clients costs, each client a `pglease.Client` of its own (default Config but the table), run in child processes (one per 200 clients, at most 10). "+
		"*Electors*: every client runs an Elector on one name; counted once exactly one leads and the others have campaigned for %v. "+
		"*Waiters*: one holder client takes N names with TryAcquire (and renews one, so that its session is up), then N clients each block in Acquire on one of them; counted after %v, the holder's connections (counted before the waiters started) left out of *per client*. "+
		"*Connections* counts the bench database's client backends, every second after the settle until two counts agree (*settled*). "+
		"*Retried* counts the times a client's Open, an Elector's Run or a waiter's Acquire returned an error before the count (each retried a second later, an Elector with a new one, so that the fleet stays whole; the child logs the first few). *Fits 1.1 N* says whether the whole fleet, holder included, fits max_connections = 1.1 × N (connections ≤ 1.1 N + 10). max_connections was %d during the run.\n\n",
		r.cfg.fleetSettle, r.cfg.fleetSettle, r.fleetMaxConns)
	w("| N | fleet | processes | start s | connections | holder's | per client | settled | retried | fits 1.1 N |\n|---:|---|---:|---:|---:|---:|---:|---|---:|---|\n")
	for _, x := range r.fleet {
		if x.err != nil {
			w("| %d | %s | %d | | | | | | | %s |\n", x.clients, x.role, x.procs, errCell(x.err))
			continue
		}
		holder := "–"
		if x.role == "waiters" {
			holder = fmt.Sprint(x.holder)
		}
		w("| %d | %s | %d | %.1f | %d | %s | %.2f | %s | %d | %s |\n", x.clients, x.role, x.procs, x.start.Seconds(), x.conns, holder, x.perClient(), yesNo(x.settled), x.retried, yesNo(x.fits()))
	}
	w("\n")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
