package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/internal/pgtest"
)

// Every fault below runs twice, as subtests "plain" and "fast-failover":
// the holders' leases are plain, or session-bound (FastFailover). Both
// modes must pass the same history check; only the documented window
// (a fast-failover session ended by the server itself) may overlap.

// modeScenario is sc in the given lease mode. Fast-failover scenarios that
// measure a takeover in about a second use a longer TTL, so that the
// takeover cannot be confused with the expiry of the row.
func modeScenario(sc scenario, fast, slowTTL bool) scenario {
	sc.fast = fast
	if fast && slowTTL {
		sc.ttl, sc.csMin, sc.csMax = 5*time.Second, time.Second, 2*time.Second
	}
	return sc
}

// TestHolderSIGKILL kills the current holder of a name; a successor must
// take over (no overlap, tokens increasing) — after the TTL with plain
// leases; with fast failover before the killed holder's lease could have
// expired (its session ends with the process and a waiter blocked on the
// advisory lock gets it) — and the killed holders are replaced.
func TestHolderSIGKILL(t *testing.T) {
	bothModes(t, func(t *testing.T, fast bool) {
		r := startRun(t, modeScenario(scenario{holders: 3, names: []string{"a", "b"}}, fast, true))
		r.waitBeliefs(5)
		for i := range 2 {
			name := r.sc.names[i%2]
			p, tok, expires := r.holderOf(name)
			killed := Now()
			r.kill(p)
			r.spawn()
			succ := r.successor(name, tok, r.liveness())
			switch {
			case succ == nil:
				t.Errorf("no takeover of %q within %v (TTL + 5s) after SIGKILL of its holder; the server's sessions:\n%s", name, r.liveness(), r.activity())
			case fast && succ.T >= expires.UnixNano():
				// expires is the row's expiry before the kill; a renewal
				// could only have moved it later.
				t.Errorf("fast-failover takeover of %q at %s, not before the killed holder's lease expired at %s: it waited for the TTL",
					name, time.Unix(0, succ.T).Format(time.StampMicro), expires.Format(time.StampMicro))
			default:
				t.Logf("%s takeover %v after SIGKILL", modeName(fast), time.Duration(succ.T-killed).Round(time.Millisecond))
			}
			r.waitProgress(Now())
		}
		r.finish(Options{})
	})
}

// TestHolderSIGSTOP pauses the holder for longer than the TTL. Overlap in
// time is possible by physics; what must hold is that the resumed holder's
// lease has already ended when it resumes, and that the fence rejects its
// stale write once the successor wrote. A paused fast-failover holder's
// session stays open and keeps its advisory lock: the row's expiry still
// lets a successor take over.
func TestHolderSIGSTOP(t *testing.T) {
	bothModes(t, func(t *testing.T, fast bool) {
		r := startRun(t, modeScenario(scenario{holders: 3}, fast, false))
		r.waitBeliefs(5)
		for range 2 {
			p, tok, _ := r.holderOf("job")
			start := Now()
			_ = p.cmd.Process.Signal(syscall.SIGSTOP)
			// The successor writes with a newer token; bounded in case the
			// holder was stopped inside a guarded transaction (its row lock
			// then blocks the takeover until it resumes, which is safe).
			took := r.waitWrite("job", tok, 2*r.sc.ttl+3*time.Second)
			// The fault itself: a pause longer than the TTL.
			time.Sleep(time.Until(time.Unix(0, start).Add(3 * r.sc.ttl / 2)))
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			r.addFault("sigstop", start, p.pid())
			healed := Now()
			t.Logf("paused pid %d (token %d) for %v; successor wrote: %v", p.pid(), tok, time.Duration(healed-start).Round(time.Millisecond), took)
			// The resumed holder leaves its section (after its stale write,
			// if the pause caught it inside one) ...
			if r.waitEvent(func(e Event) bool { return e.K == KindReleased && e.Pid == p.pid() && e.Tok == tok }, patience) == nil {
				t.Errorf("the resumed pid %d never left its section of token %d\n%s", p.pid(), tok, r.stderrTails())
			}
			// ... and the holders work again.
			r.waitProgress(healed)
		}
		rep := r.finish(Options{})
		if rep.Resumes == 0 {
			t.Errorf("no holder noticed a pause; the scenario did not exercise a stale holder")
		}
		if rep.StaleRejected == 0 {
			t.Errorf("no stale write after a pause was rejected by the fence (attempted %d)", rep.StaleRejected+rep.StaleAccepted)
		}
	})
}

// TestPartition cuts the holder's network (connections stay open, nothing
// is forwarded, no FIN or RST reaches either side) for 2×TTL.
func TestPartition(t *testing.T) {
	bothModes(t, func(t *testing.T, fast bool) {
		r := startRun(t, modeScenario(scenario{holders: 3, proxy: true}, fast, false))
		r.waitBeliefs(5)
		for range 2 {
			p, tok, _ := r.holderOf("job")
			start := Now()
			p.proxy.Partition(true)
			// Progress is a successor's acquisition. Its first write may take
			// longer: the proxy drops what it does not forward, so a process
			// that was partitioned in an earlier round may still hold a wedged
			// application connection until its 5 s write timeout (the history
			// check covers writes after the fault heals).
			if !r.waitAcquired("job", tok, 2*r.sc.ttl+3*time.Second) {
				t.Errorf("no successor acquired while pid %d (token %d) was partitioned; the server's sessions:\n%s", p.pid(), tok, r.activity())
			}
			// The fault itself: a partition of twice the TTL.
			time.Sleep(time.Until(time.Unix(0, start).Add(2 * r.sc.ttl)))
			p.proxy.Partition(false)
			r.addFault("partition", start, p.pid())
			r.waitProgress(Now())
		}
		r.finish(Options{})
	})
}

// TestConnectionReset resets (RST) every connection of the holder at its
// proxy: in-flight statements fail, the client reconnects. A fast-failover
// holder's session ends with its connection, so it must cancel its leases
// at once; the server frees its advisory lock and a waiter takes over.
func TestConnectionReset(t *testing.T) {
	bothModes(t, func(t *testing.T, fast bool) {
		r := startRun(t, modeScenario(scenario{holders: 3, proxy: true}, fast, false))
		r.waitBeliefs(5)
		for range 3 {
			p, _, _ := r.holderOf("job")
			start := Now()
			p.proxy.ResetAll()
			r.addFault("reset", start, p.pid())
			r.waitProgress(Now())
		}
		r.finish(Options{})
	})
}

// TestTerminateBackend kills every server backend of the holder with
// pg_terminate_backend. Plain leases survive it when the dedicated
// connection reconnects before the deadline; either way there is no
// overlap. A session-bound lease ends the moment its session is
// terminated and a waiter takes over at once: this is the documented
// window (doc.go, "Fast failover"), in which the holder may still be
// between a check and its next statement. Overlaps of the terminated
// lease with its successor, until the old lease's Done fires, are counted
// and the window is measured; the fence must still reject stale writes.
func TestTerminateBackend(t *testing.T) {
	bothModes(t, func(t *testing.T, fast bool) {
		r := startRun(t, modeScenario(scenario{holders: 3}, fast, true))
		r.waitBeliefs(5)
		for range 3 {
			p, tok, expires := r.holderOf("job")
			start := Now()
			n := pgtest.TerminateBackends(t, "pglease "+p.owner)
			r.addFault("terminate", start, p.pid())
			if fast {
				// expires is the row's expiry before the fault; a renewal
				// could only have moved it later.
				switch succ := r.successor("job", tok, r.liveness()); {
				case succ == nil:
					t.Errorf("no takeover within %v (TTL + 5s) after the session-bound holder's backends (%d) were terminated", r.liveness(), n)
				case succ.T >= expires.UnixNano():
					t.Errorf("takeover at %s, not before the terminated holder's lease expired at %s: it waited for the TTL",
						time.Unix(0, succ.T).Format(time.StampMicro), expires.Format(time.StampMicro))
				default:
					t.Logf("takeover %v after the termination of %d backends", time.Duration(succ.T-start).Round(time.Millisecond), n)
				}
			}
			r.waitProgress(Now())
		}
		rep := r.finish(Options{})
		if fast {
			t.Logf("overlaps inside the documented fast-failover window: %d; the terminated lease ended %s after its successor acquired",
				rep.AllowedOverl, windowStats(rep.Windows))
		}
	})
}

// TestServerRestart restarts the server (fast, then immediate: a crash
// and WAL recovery) while leases are held.
func TestServerRestart(t *testing.T) {
	cl := pgtest.RequireCluster(t)
	bothModes(t, func(t *testing.T, fast bool) {
		r := startRun(t, modeScenario(scenario{holders: 3, names: []string{"a", "b"}}, fast, false))
		r.waitBeliefs(5)
		for _, mode := range []string{"fast", "immediate"} {
			start := Now()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			err := cl.Restart(ctx, mode)
			cancel()
			if err != nil {
				t.Fatalf("restart %s: %v", mode, err)
			}
			r.addFault("restart-"+mode, start, 0)
			r.waitProgress(Now())
		}
		r.finish(Options{})
	})
}

// TestStatementTimeouts runs holders whose sessions have a server-side
// statement_timeout of 200ms while another session locks every lease row
// for 1.5×TTL: renewals, acquisitions and guarded writes are cancelled by
// the server (SQLSTATE 57014) until the lock goes. Leases must be given
// up at their deadlines, never overlap, and come back afterwards.
func TestStatementTimeouts(t *testing.T) {
	base := pgtest.DSN(t)
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	r := startRun(t, scenario{holders: 3, names: []string{"a", "b"}, csMin: 1500 * time.Millisecond, csMax: 3 * time.Second,
		dsn: base + sep + "options=-c%20statement_timeout%3D200"})
	r.waitBeliefs(5)
	conn := r.conn()
	for range 2 {
		ctx := ctxT(t, time.Minute)
		start := Now()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `SELECT * FROM `+pgx.Identifier{r.schema, "leases"}.Sanitize()+` FOR UPDATE`); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * r.sc.ttl / 2) // the fault itself: the rows stay locked for longer than the TTL
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		r.addFault("row-lock+statement_timeout", start, 0)
		r.waitProgress(Now())
	}
	r.finish(Options{})
}

// TestSlowNetwork delays every packet of the holder by up to 1.5s, beyond
// the safety margin: slow but successful renewals must never extend trust
// past the deadline measured from their send time.
func TestSlowNetwork(t *testing.T) {
	bothModes(t, func(t *testing.T, fast bool) {
		r := startRun(t, modeScenario(scenario{holders: 3, proxy: true}, fast, false))
		r.waitBeliefs(5)
		for _, d := range []time.Duration{300 * time.Millisecond, 1500 * time.Millisecond} {
			p, _, _ := r.holderOf("job")
			start := Now()
			p.proxy.SetDelay(d)
			time.Sleep(3 * r.sc.ttl / 2) // the fault itself: a slow network for longer than the TTL
			p.proxy.SetDelay(0)
			r.addFault(fmt.Sprintf("delay-%v", d), start, p.pid())
			r.waitProgress(Now())
		}
		r.finish(Options{})
	})
}

// TestSaturatedPool: the application takes every connection of the pool it
// shares with pglease for 3×TTL. Renewal runs on pglease's dedicated
// connection, so the lease must stay held and nobody else may take it.
func TestSaturatedPool(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	table := pgtest.Schema(t) + ".leases"
	c, err := pglease.NewFromPool(pool, pglease.Config{Table: table, TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	other, err := pglease.Open(ctx, pgtest.DSN(t), pglease.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	l, err := c.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	var conns []*pgxpool.Conn
	for range cfg.MaxConns {
		pc, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, pc)
	}
	// The fault lasts 3×TTL; the lease is checked every 200ms throughout.
	until := time.Now().Add(3 * l.TTL())
	for time.Now().Before(until) {
		if l.Context().Err() != nil {
			t.Fatalf("lease lost while the pool was saturated: %v", context.Cause(l.Context()))
		}
		if _, err := other.TryAcquire(ctx, "job"); !errors.Is(err, pglease.ErrNotAcquired) {
			t.Fatalf("another client's TryAcquire while held: %v, want ErrNotAcquired", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, pc := range conns {
		pc.Release()
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return l.Guard(ctx, tx) }); err != nil {
		t.Fatalf("Guard after the pool was freed: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
