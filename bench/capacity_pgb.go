package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease"
)

// ---- waiters behind PgBouncer (transaction pooling) ----
//
// W waiting clients, each a pglease.Client of its own, opened through
// PgBouncer in transaction pooling mode (or, for comparison, directly),
// block in Acquire on one name that a client of the measuring process,
// connected directly, holds. A client behind such a proxy finds its
// dedicated session proxied (connect.go): it cannot LISTEN or watch a bell,
// so its wait learns of a release only at its next look (PollInterval, or
// the holder's expiry when that comes first).

type capPgbCase struct {
	waiters, procs int
	bouncer        bool // through PgBouncer; else directly
}

type capPgbRow struct {
	capPgbCase
	poolSize  int // PgBouncer's default_pool_size
	base      capSnap
	d         capDelta // waiting
	pgb       pgbPools // PgBouncer's pools at the end of the waiting window
	pgbCPU    time.Duration
	wake      durs // per round, from the holder's release to the first acquisition; sorted
	holderTTL time.Duration
	err       error
}

// conns is the server connections the waiters added: the bench
// database's backends at the end of the waiting window, less those before
// the waiters started (the holder's, and the measuring process's).
func (r capPgbRow) conns() int { return r.d.conns - r.base.c.conns }

// expectedRate is the waiting statements/s if every client tried once per
// PollInterval, plus the holder's renewals.
func (r capPgbRow) expectedRate() float64 {
	return float64(r.waiters)/pgleasePoll.Seconds() + 3/r.holderTTL.Seconds()
}

// via names how a row's waiters connect.
func (c capPgbCase) via() string {
	if c.bouncer {
		return "PgBouncer"
	}
	return "direct"
}

const capPgbPool = 20 // PgBouncer's default_pool_size for the rows

// capPgbControl is the file through which the measuring process tells the
// children of prefix which round it is in (the processes share a host).
func capPgbControl(prefix string) string {
	return filepath.Join(os.TempDir(), "pglease-bench-"+prefix+"round")
}

func capPgbWaiters(ctx context.Context, e *env, cc capConfig, w capPgbCase) (r capPgbRow) {
	r.capPgbCase = w
	const table = "pglease_leases_capb"
	holder, ttl, err := capHolder(ctx, e, table)
	if err != nil {
		r.err = err
		return r
	}
	defer holder.Close()
	r.holderTTL = ttl
	dsn := e.dsn
	var b *pgBouncer
	if w.bouncer {
		r.poolSize = capPgbPool
		if b, err = startPgBouncer(ctx, e.dsn, capPgbPool); err != nil {
			r.err = err
			return r
		}
		dsn = b.dsn("bench")
	}
	prefix := "capb-" + randHex(4) + "-"
	ctl := capPgbControl(prefix)
	setRound := func(k int) error { return os.WriteFile(ctl, []byte(strconv.Itoa(k)), 0o644) }
	var procs []*capProc
	defer func() {
		stopCapProcs(procs)
		// PgBouncer keeps its server connections: stop it first.
		b.stop()
		os.Remove(ctl)
		waitConns(ctx, e, r.base.c.conns+1, 30*time.Second)
	}()
	if err := capCheckpoint(ctx, e); err != nil {
		r.err = err
		return r
	}
	// The holder holds a name per round, waiters wait on round 0's first.
	held := make([]*pglease.Lease, cc.pgbRounds)
	for k := range held {
		if held[k], err = holder.TryAcquire(ctx, prefix+strconv.Itoa(k)); err != nil {
			r.err = fmt.Errorf("holder: %w", err)
			return r
		}
	}
	// Open the holder's dedicated connection now, not in the window.
	if err := held[0].Renew(ctx); err != nil {
		r.err = fmt.Errorf("holder renew: %w", err)
		return r
	}
	if err := setRound(0); err != nil {
		r.err = err
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
		specs = append(specs, capSpec{Role: rolePgbWaiters, Table: table, Prefix: prefix, Clients: k, Names: cc.pgbRounds, DSN: dsn})
	}
	if procs, err = startCapProcs(ctx, e, specs); err != nil {
		r.err = err
		return r
	}
	sleepCtx(ctx, cc.pgbSettle)
	// Emptied so that the window's statements can be listed by kind.
	if err := capResetStats(ctx, e); err != nil {
		r.err = err
		return r
	}
	a, err := capSnapshot(ctx, e)
	if err != nil {
		r.err = err
		return r
	}
	cpu0 := cmdCPU(b.command())
	sleepCtx(ctx, cc.pgbWindow)
	bs, err := capSnapshot(ctx, e)
	if err != nil {
		r.err = err
		return r
	}
	r.pgbCPU = cmdCPU(b.command()) - cpu0
	r.d = bs.sub(a)
	capLogStatements(ctx, e, fmt.Sprintf("CAP pgbouncer waiters=%d via=%s", w.waiters, w.via()))
	if b != nil {
		if r.pgb, err = b.pools(ctx, "bench"); err != nil {
			r.err = fmt.Errorf("SHOW POOLS: %w", err)
			return r
		}
	}
	if len(capEvents(procs)) > 0 {
		r.err = errors.New("a waiter acquired a held lease")
		return r
	}

	// The rounds: the holder releases round k's name; the first waiter to
	// acquire it holds it until the round ends; every client then waits on
	// the next round's name, which the holder releases after a random
	// pause (PollInterval + 1 s to twice that), so that its release falls
	// at a random moment of the waiters' polls. The pause is at least
	// PollInterval + 1 s: all clients then made their first attempts on
	// the name (through PgBouncer, 100 of them took seconds), so that no
	// late first attempt finds the name just released.
	limit := 3*pgleasePoll + 5*time.Second
	for k := range held {
		if k > 0 {
			sleepCtx(ctx, pgleasePoll+time.Second+rand.N(pgleasePoll))
		}
		name := prefix + strconv.Itoa(k)
		t0 := time.Now().UnixNano()
		rctx, cancel := releaseCtx()
		err := held[k].Release(rctx)
		cancel()
		if err != nil {
			r.err = fmt.Errorf("holder release: %w", err)
			return r
		}
		var got time.Duration
		for end := time.Now().Add(limit); got == 0 && time.Now().Before(end) && ctx.Err() == nil; {
			sleepCtx(ctx, 5*time.Millisecond)
			got = firstHandoff(capEvents(procs), name, t0)
		}
		if got == 0 {
			r.err = fmt.Errorf("round %d: no waiter acquired within %v", k, limit)
			break
		}
		r.wake = append(r.wake, got)
		if err := setRound(k + 1); err != nil {
			r.err = err
			break
		}
	}
	r.wake = r.wake.sorted()
	return r
}

// mean is the mean of d, 0 when empty.
func (d durs) mean() time.Duration {
	if len(d) == 0 {
		return 0
	}
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(len(d))
}

// capLogStatements logs the statements pg_stat_statements counted since
// its reset, most called first: what the waiters' looks consist of.
func capLogStatements(ctx context.Context, e *env, what string) {
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `
SELECT calls, left(regexp_replace(query, '\s+', ' ', 'g'), 90) FROM pg_stat_statements s
 WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = 'bench') AND s.query NOT LIKE '%pg_stat_statements%'
 ORDER BY calls DESC LIMIT 6`)
	if err != nil {
		return
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var calls int64
		var q string
		if rows.Scan(&calls, &q) == nil {
			parts = append(parts, fmt.Sprintf("%d× %s", calls, q))
		}
	}
	logf("%s: statements of the waiting window: %s", what, strings.Join(parts, " | "))
}

// capEvents collects the children's events.
func capEvents(procs []*capProc) []capEvent {
	var events []capEvent
	for _, p := range procs {
		p.mu.Lock()
		events = append(events, p.events...)
		p.mu.Unlock()
	}
	return events
}

// firstHandoff is the time from t0 (the holder's release) to the first
// acquisition of name after it, or 0 when there is none.
func firstHandoff(events []capEvent, name string, t0 int64) time.Duration {
	var at int64
	for _, ev := range events {
		if ev.got && ev.name == name && ev.at >= t0 && (at == 0 || ev.at < at) {
			at = ev.at
		}
	}
	if at == 0 {
		return 0
	}
	return max(time.Duration(at-t0), 1)
}

func (b *pgBouncer) command() *exec.Cmd {
	if b == nil {
		return nil
	}
	return b.cmd
}

// rolePgbWaiters is the child role of capPgbWaiters.
const rolePgbWaiters = "pgbwaiters"

// capChildPgbWaiters opens s.Clients clients on s.DSN (the parent's DSN
// when empty), each with one goroutine that waits on round k's name
// (s.Prefix + k) while the control file says k, for s.Names rounds. The
// winner of a round reports it and holds the name until the round ends;
// every other wait is cancelled then.
func capChildPgbWaiters(ctx context.Context, e *env, s capSpec) error {
	dsn := e.dsn
	if s.DSN != "" {
		dsn = s.DSN
	}
	clients := make([]*pglease.Client, s.Clients)
	err := openConcurrently(len(clients), func(i int) (err error) {
		clients[i], err = pglease.Open(ctx, dsn, pglease.Config{Table: s.Table})
		return err
	})
	if err != nil {
		return err
	}
	// ended[k] closes when the control file shows a round past k.
	ended := make([]chan struct{}, s.Names)
	for k := range ended {
		ended[k] = make(chan struct{})
	}
	go func() {
		ctl, closed := capPgbControl(s.Prefix), 0
		for closed < s.Names && ctx.Err() == nil {
			b, _ := os.ReadFile(ctl)
			k, err := strconv.Atoi(strings.TrimSpace(string(b)))
			for ; err == nil && closed < min(k, s.Names); closed++ {
				close(ended[closed])
			}
			sleepCtx(ctx, 5*time.Millisecond)
		}
	}()
	var out sync.Mutex
	say := func(what, name string) {
		out.Lock()
		fmt.Printf("%s %s %d\n", what, name, time.Now().UnixNano())
		out.Unlock()
	}
	for _, c := range clients {
		go func() {
			for k := 0; k < s.Names && ctx.Err() == nil; {
				name := s.Prefix + strconv.Itoa(k)
				wctx, cancel := context.WithCancel(ctx)
				go func() {
					select {
					case <-ended[k]:
						cancel()
					case <-wctx.Done():
					}
				}()
				l, err := c.Acquire(wctx, name)
				if err == nil {
					say("GOT", name)
					select {
					case <-ended[k]:
					case <-ctx.Done():
					}
					say("REL", name)
					rctx, rcancel := releaseCtx()
					_ = l.Release(rctx)
					rcancel()
				}
				cancel()
				select {
				case <-ended[k]:
					k++
					continue
				default:
				}
				if err != nil && ctx.Err() == nil {
					fmt.Fprintf(os.Stderr, "bench child cap: pgb waiter on %s: %v\n", name, err)
					sleepCtx(ctx, 100*time.Millisecond)
				}
			}
		}()
	}
	fmt.Println("READY")
	<-ctx.Done()
	return ctx.Err()
}
