package chaos

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/pgcluster"
	"github.com/pglease/pglease/internal/pgtest"
)

// TestSessionTakeoverNeedsSameIncarnation: a session-bound
// takeover (the advisory lock is free, so the holder's session looks gone)
// is allowed only by the server incarnation that granted the lease. A
// promoted standby, or a server after a crash-restart or a crash-recovery
// cycle, holds no session locks at all: a free advisory lock there says
// nothing about the holder, whose lease must fall back to the row's expiry.
// The holder is partitioned (no FIN, no RST: it keeps believing in its
// lease until its local deadline), the server is replaced under it, and a
// waiter that reaches the new server must not acquire before the holder's
// local deadline.
func TestSessionTakeoverNeedsSameIncarnation(t *testing.T) {
	t.Run("promotion", func(t *testing.T) {
		bothModes(t, func(t *testing.T, fast bool) {
			primary, standby, dsn := haPair(t, pgcluster.StandbyOptions{Sync: true})
			incarnation(t, fast, incarnationSetup{
				admin: dsn, waiter: dsn, holder: primary.DSN(""),
				holderTarget: fmt.Sprintf("%s:%d", primary.Host(), primary.Port()),
				fault:        "stop -m immediate + promote",
				do: func(ctx context.Context) error {
					if err := primary.Shutdown(ctx, "immediate"); err != nil {
						return err
					}
					return standby.Promote(ctx)
				},
			})
		})
	})
	cl := pgtest.RequireCluster(t)
	base := pgtest.DSN(t)
	same := incarnationSetup{waiter: base, holder: base, holderTarget: pgtest.HostPort(t, base)}
	t.Run("restart-immediate", func(t *testing.T) {
		s := same
		s.fault = "stop -m immediate + start"
		s.do = func(ctx context.Context) error {
			if err := cl.Shutdown(ctx, "immediate"); err != nil {
				return err
			}
			return cl.Start(ctx)
		}
		incarnation(t, true, s)
	})
	t.Run("backend-crash", func(t *testing.T) {
		s := same
		s.fault = "SIGKILL of one backend (crash recovery of every session)"
		s.do = func(ctx context.Context) error { return crashBackend(ctx, base) }
		incarnation(t, true, s)
	})
}

// incarnationSetup says where the processes of one incarnation scenario
// connect and how the server is replaced.
type incarnationSetup struct {
	admin        string // superuser DSN that follows the current primary (default: the shared cluster, a schema per test)
	waiter       string // the waiter's DSN (reaches the new server)
	holder       string // the holder's DSN (rewritten to its proxy)
	holderTarget string // host:port behind the holder's proxy
	fault        string
	do           func(ctx context.Context) error
}

func incarnation(t *testing.T, fast bool, s incarnationSetup) {
	// A long TTL so that the server is replaced well before the holder's
	// local deadline (TTL − margin after its last renewal), and sections
	// that outlast the scenario so that the holder still holds when cut off.
	r := startRun(t, scenario{holders: 0, fast: fast, ttl: 8 * time.Second, csMin: time.Minute, csMax: time.Minute,
		dsn: s.waiter, admin: s.admin})
	a := r.spawnWith(spawnOpt{fast: fast, dsn: s.holder, proxyTo: s.holderTarget})
	_, tok, _ := r.holderOf("job")
	b := r.spawnWith(spawnOpt{fast: fast})
	// The waiter has seen the lease held and waits: on the holder's
	// session lock (fast failover), or for the row's expiry.
	if r.waitEvent(func(e Event) bool { return e.K == KindWaiting && e.Pid == b.pid() }, patience) == nil {
		t.Fatalf("the waiter never found the lease held\n%s", r.stderrTails())
	}
	if fast {
		r.waitLockWait(b.owner)
	}

	start := Now()
	a.proxy.Partition(true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	err := s.do(ctx)
	cancel()
	if err != nil {
		t.Fatalf("%s: %v", s.fault, err)
	}
	r.addFault("incarnation", start, 0)
	replaced := Now()
	if !r.waitAcquired("job", tok, patience) {
		t.Errorf("the waiter never acquired after %s; the server's sessions:\n%s", s.fault, r.activity())
	}
	// The holder's lease ends at its local deadline at the latest.
	done := r.waitEvent(func(e Event) bool { return e.K == KindDone && e.Pid == a.pid() && e.Tok == tok }, patience)
	// The waiter records its acquisition after the row shows it (a
	// clean-clone CI run read the events in between and found none).
	acq := r.waitEvent(func(e Event) bool { return e.K == KindAcquired && e.Pid == b.pid() && e.Tok > tok }, patience)
	ms := func(t int64) time.Duration { return time.Duration(t - start).Round(time.Millisecond) }
	switch {
	case done == nil:
		t.Errorf("the partitioned holder recorded no end of its lease (token %d)", tok)
	case acq == nil:
		t.Errorf("the waiter recorded no acquisition")
	default:
		t.Logf("%s, %s leases, times from the partition: server replaced +%v, holder's local deadline +%v (its Done +%v: %s), waiter acquired token %d at +%v",
			s.fault, modeName(fast), ms(replaced), ms(done.Dl), ms(done.T), done.Msg, acq.Tok, ms(acq.T))
		if replaced >= done.Dl {
			t.Errorf("the server was replaced only after the holder's local deadline: the scenario cannot tell a session-bound takeover from expiry")
		}
		if acq.T < done.Dl {
			t.Errorf("the waiter acquired %v before the partitioned holder's local deadline (session-bound takeover on a new server incarnation)",
				time.Duration(done.Dl-acq.T).Round(time.Millisecond))
		}
	}
	a.proxy.Partition(false)
	r.finish(Options{})
}

// waitLockWait waits until a session of the holder owner waits on an
// advisory lock: a fast-failover waiter blocked on the holder's session.
func (r *run) waitLockWait(owner string) {
	r.t.Helper()
	if !pgtest.Eventually(patience, func() bool {
		var n int
		err := r.scan(`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event = 'advisory'`, []any{"pglease " + owner}, &n)
		return err == nil && n > 0
	}) {
		r.t.Fatalf("no session of %s waited on an advisory lock within %v; the server's sessions:\n%s\n%s", owner, patience, r.activity(), r.stderrTails())
	}
}

// crashBackend SIGKILLs one backend of the server at dsn: the postmaster
// then ends every session and reinitialises shared memory (all advisory
// locks are gone) without restarting. It waits until the server accepts
// connections again.
func crashBackend(ctx context.Context, dsn string) error {
	// A session that the crash cycle ends like every other: its end says
	// that the cycle has begun.
	sentinel, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer sentinel.Close(context.Background())
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	var pid int
	err = conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid)
	if err != nil {
		conn.Close(ctx)
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		conn.Close(ctx)
		return fmt.Errorf("kill backend %d: %w", pid, err)
	}
	conn.Close(ctx)
	if !pgtest.Eventually(patience, func() bool { return sentinel.Ping(ctx) != nil }) {
		return fmt.Errorf("the server did not end its sessions within %v of the crash of backend %d", patience, pid)
	}
	var last error
	if !pgtest.Eventually(patience, func() bool {
		c, err := pgx.Connect(ctx, dsn)
		if err == nil {
			err = c.Ping(ctx)
			c.Close(ctx)
		}
		last = err
		return err == nil
	}) {
		return fmt.Errorf("server did not come back after the backend crash: %w", last)
	}
	return nil
}
