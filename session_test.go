package pglease

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
	"github.com/pglease/pglease/internal/store"
)

// The dedicated connection keeps renewals going when the application
// saturates the pool it shares with pglease.
func TestRenewalSurvivesSaturatedSharedPool(t *testing.T) {
	ctx := testCtx(t)
	pool := pgtest.Pool(t)
	log := newEventLog()
	c, err := NewFromPool(pool, Config{Table: pgtest.Schema(t) + ".leases", Observer: log})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.TryAcquire(ctx, "busy-app", WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Take every connection of the shared pool until renewals have kept
	// the lease past the deadline it had then.
	var conns []interface{ Release() }
	for i := int32(0); i < pool.Config().MaxConns; i++ {
		pc, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, pc)
	}
	awaitKeptPast(t, log, l, l.Deadline())
	for _, pc := range conns {
		pc.Release()
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Killing the client's connections with pg_terminate_backend, again and
// again: the dedicated connection reconnects and renewals continue.
func TestRenewalsContinueAfterBackendsAreTerminated(t *testing.T) {
	ctx := testCtx(t)
	log := newEventLog()
	c := testClient(t, Config{Owner: "terminate-me", Observer: log})
	l, err := c.TryAcquire(ctx, "t", WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		log.await(t, "a renewal", is(EventRenewed, "t")) // the session is up
		before := c.conn.sess.Load().currentEpoch()
		if n := pgtest.TerminateBackends(t, "pglease terminate-me%"); n == 0 {
			t.Fatal("no backend of the client to terminate")
		}
		pgtest.WaitFor(t, patience, "the dedicated connection to reconnect", func() bool {
			e := c.conn.sess.Load().currentEpoch()
			return e != 0 && e != before
		})
		log.skip()
		log.await(t, "a renewal on the new connection", is(EventRenewed, "t"))
	}
	if err := causeOf(l.Context()); err != nil {
		t.Fatalf("plain lease lost after backend kills: %v", err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	_ = l.Release(ctx)
}

// When a statement outlives its bound on the dedicated connection and pgx
// closes it, the session-bound leases on it are ended before the socket
// is closed: they never look held while the server frees their locks.
func TestOverdueSessionStatementEndsSessionBoundLeasesFirst(t *testing.T) {
	ctx := testCtx(t)
	c, proxy := proxiedClient(t, Config{})
	l, err := c.TryAcquire(ctx, "o", WithFastFailover(), WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole(true)
	defer proxy.Blackhole(false)
	var stillHeld bool
	err = c.conn.sess.Load().do(ctx, 200*time.Millisecond, func(ctx context.Context, q store.Querier, _ *sessState) error {
		err := q.Query(ctx, "SELECT 1", nil, func(store.Row) error { return nil })
		stillHeld = causeOf(l.Context()) == nil // the socket is closed by now
		return err
	})
	if err == nil {
		t.Fatal("a statement through a blackholed connection succeeded")
	}
	if stillHeld {
		t.Fatal("the session-bound lease was still held when its connection was closed")
	}
	if !errors.Is(causeOf(l.Context()), ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", causeOf(l.Context()))
	}
}

// Errors on the dedicated connection that leave the session intact
// (cancelled statements, deadlocks, lock timeouts) never make the client
// close it under a held session-bound lease.
func TestRetryableErrorsKeepTheSession(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{StatementTimeout: 300 * time.Millisecond})
	l, err := c.TryAcquire(ctx, "k", WithFastFailover(), WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	epoch := c.conn.sess.Load().currentEpoch()
	for _, stmt := range []string{
		"SELECT pg_sleep(2)", // the session's statement_timeout: 57014
		"DO $$BEGIN RAISE EXCEPTION 'test' USING ERRCODE = '40P01'; END$$",
		"DO $$BEGIN RAISE EXCEPTION 'test' USING ERRCODE = '55P03'; END$$",
	} {
		err := c.conn.sess.Load().do(ctx, 5*time.Second, func(ctx context.Context, q store.Querier, _ *sessState) error {
			return q.Query(ctx, stmt, nil, func(store.Row) error { return nil })
		})
		if !store.Retryable(err) {
			t.Fatalf("%s: %v, want a retryable error", stmt, err)
		}
	}
	if e := c.conn.sess.Load().currentEpoch(); e != epoch {
		t.Fatalf("the session was re-opened (epoch %d → %d)", epoch, e)
	}
	if err := causeOf(l.Context()); err != nil {
		t.Fatalf("session-bound lease ended: %v", err)
	}
}

// Every connection of the session gets a new epoch, so that leases bound
// to a lost connection never match a later one.
func TestSessionEpochsAreNeverReused(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{Owner: "epoch-victim"})
	l, err := c.TryAcquire(ctx, "e", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	seen := map[uint64]bool{}
	for i := 0; i < 3; i++ {
		if err := l.Renew(ctx); err != nil { // (re)connects the session
			t.Fatal(err)
		}
		before := c.conn.sess.Load().currentEpoch()
		seen[before] = true
		pgtest.TerminateBackends(t, "pglease epoch-victim")
		var e uint64
		pgtest.WaitFor(t, patience, fmt.Sprintf("a new connection after terminating epoch %d", before), func() bool {
			e = c.conn.sess.Load().currentEpoch()
			return e != 0 && e != before
		})
		if seen[e] {
			t.Fatalf("epoch %d reused", e)
		}
	}
}
