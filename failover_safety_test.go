package pglease

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/pgtest"
	"github.com/pglease/pglease/internal/store"
)

// waitUntil polls cond every 10ms until it holds or bound passes.
func waitUntil(bound time.Duration, cond func() bool) bool {
	for end := time.Now().Add(bound); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// adminConn is a superuser connection to the test server, closed at cleanup.
func adminConn(t *testing.T) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(testCtx(t), pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// A session-bound acquisition whose session ends between the commit and the
// lease's registration is given up, never handed out as held while a
// waiter can take the name over.
func TestSessionEndingBeforeRegistrationEndsTheLease(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{Owner: "register-race"})
	other := testClient(t, Config{Table: c.cfg.Table})
	fired := false
	hook := func(name string, epoch uint64) {
		if fired || name != "r" {
			return
		}
		fired = true
		pgtest.TerminateBackends(t, "pglease register-race")
		if !waitUntil(10*time.Second, func() bool { return c.sess.currentEpoch() != epoch }) {
			t.Error("the client did not notice its session ending")
		}
	}
	testHookAcquired.Store(&hook)
	defer testHookAcquired.Store(nil)
	l, err := c.TryAcquire(ctx, "r", WithFastFailover(), WithTTL(time.Minute))
	testHookAcquired.Store(nil)
	if !fired {
		t.Fatal("the hook did not run")
	}
	if err != nil {
		// Giving up is also right, as long as nothing looks held.
		t.Logf("TryAcquire: %v", err)
		return
	}
	defer l.Release(ctx)
	if l.Err() == nil {
		if _, err := other.TryAcquire(ctx, "r", WithFastFailover()); !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("lease %d looks held, yet another client's TryAcquire returned %v", l.Token(), err)
		}
	}
}

// A statement on the dedicated connection that waits for a lock (here a
// fast-failover acquisition of a row another session has locked) ends in
// an error of its own; the session, and with it every session-bound lease
// on it, survives, and renewals are not held up.
func TestBlockedFastFailoverAcquireKeepsSessionAndRenewals(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{StatementTimeout: 1500 * time.Millisecond})
	a, err := c.TryAcquire(ctx, "a", WithFastFailover(), WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	holder := testClient(t, Config{Table: c.cfg.Table})
	b, err := holder.TryAcquire(ctx, "b", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx)
	admin := adminConn(t)
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+c.st.Names.QualifiedTable()+` WHERE "name" = 'b' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	epoch := c.sess.currentEpoch()
	d0 := a.Deadline()
	// Keep asking for the locked row, for longer than a's deadline.
	for end := d0.Add(500 * time.Millisecond); time.Now().Before(end); {
		_, err := c.TryAcquire(ctx, "b", WithFastFailover(), WithTTL(2*time.Second))
		if !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("TryAcquire of a locked, held row: %v, want ErrNotAcquired", err)
		}
	}
	if err := a.Err(); err != nil {
		t.Fatalf("session-bound lease lost while an acquisition waited for a row lock: %v", err)
	}
	if !a.Deadline().After(d0) {
		t.Fatal("no renewal while acquisitions waited for a row lock")
	}
	if e := c.sess.currentEpoch(); e != epoch {
		t.Fatalf("the session was re-opened (epoch %d → %d)", epoch, e)
	}
	if _, err := holder.TryAcquire(ctx, "a", WithFastFailover()); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("another client's TryAcquire of the held name: %v", err)
	}
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
	err = c.sess.do(ctx, 200*time.Millisecond, func(ctx context.Context, q store.Querier, _ *sessState) error {
		err := q.Query(ctx, "SELECT 1", nil, func(store.Row) error { return nil })
		stillHeld = l.Err() == nil // the socket is closed by now
		return err
	})
	if err == nil {
		t.Fatal("a statement through a blackholed connection succeeded")
	}
	if stillHeld {
		t.Fatal("the session-bound lease was still held when its connection was closed")
	}
	if !errors.Is(l.Err(), ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", l.Err())
	}
}

// One guarded transaction holding its lease's row does not stall the
// renewal of the client's other leases.
func TestGuardDoesNotStallOtherRenewals(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	guarded, err := c.TryAcquire(ctx, "g", WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.TryAcquire(ctx, "o", WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(ctx)
	d0 := other.Deadline()
	pool := c.db
	err = pool.InTx(ctx, func(q store.Querier) error {
		if err := guarded.guard(ctx, q); err != nil {
			return err
		}
		if !waitUntil(time.Until(d0), func() bool { return other.Deadline().After(d0) }) {
			t.Error("the other lease was not renewed while one row was guarded")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Err(); err != nil {
		t.Fatalf("the other lease: %v", err)
	}
	_ = guarded.Release(ctx)
}

// A renewal never extends a row kept for a minimum hold after its release,
// nor revives a row that has expired.
func TestLateRenewalDoesNotExtendReleasedOrExpiredRow(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	admin := adminConn(t)
	expiresAt := func(name string) time.Time {
		var at time.Time
		if err := admin.QueryRow(ctx, `SELECT "expires_at" FROM `+c.st.Names.QualifiedTable()+` WHERE "name" = $1`, name).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	renew := func(l *Lease) bool {
		renewed, _, err := c.st.Renew(ctx, c.db, map[string]int64{l.name: l.token}, c.id)
		if err != nil {
			t.Fatal(err)
		}
		return renewed[l.name]
	}

	kept, err := c.TryAcquire(ctx, "kept", WithTTL(10*time.Second), WithMinHold(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := kept.Release(ctx); err != nil {
		t.Fatal(err)
	}
	before := expiresAt("kept")
	if renew(kept) || !expiresAt("kept").Equal(before) {
		t.Fatalf("a renewal extended a row kept for its minimum hold after release (expiry %v → %v)", before, expiresAt("kept"))
	}

	gone, err := c.TryAcquire(ctx, "gone", WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer gone.Release(ctx)
	if _, err := admin.Exec(ctx, `UPDATE `+c.st.Names.QualifiedTable()+` SET "expires_at" = now() - interval '1 second' WHERE "name" = 'gone'`); err != nil {
		t.Fatal(err)
	}
	before = expiresAt("gone")
	if renew(gone) || !expiresAt("gone").Equal(before) {
		t.Fatal("a renewal revived an expired row")
	}
}

// Tokens survive a lost or rewound sequence: Migrate creates a missing
// sequence above the table's largest token and moves one that is behind
// past it; a client that may not migrate refuses to hand out old tokens.
func TestTokenSequenceRepairedBehindTable(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	for _, name := range []string{"a", "b", "kept"} {
		l, err := c.TryAcquire(ctx, name, WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
	}
	var last int64
	admin := adminConn(t)
	seq := c.st.Names.QualifiedSeq()
	for _, tc := range []struct{ name, sql string }{
		{"missing", `DROP SEQUENCE ` + seq},
		{"behind", `SELECT setval('` + strings.ReplaceAll(seq, `'`, `''`) + `', 1)`},
	} {
		// Tokens of deleted rows are gone with them; the table's
		// largest token is what the repair can and must go past.
		if err := admin.QueryRow(ctx, `SELECT max("token") FROM `+c.st.Names.QualifiedTable()).Scan(&last); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Exec(ctx, tc.sql); err != nil {
			t.Fatal(err)
		}
		if tc.name == "behind" {
			strict := testClient(t, Config{Table: c.cfg.Table, DisableAutoMigrate: true})
			if _, err := strict.TryAcquire(ctx, "x"); !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "Client.Migrate") {
				t.Fatalf("%s: a client that may not migrate: %v, want ErrSchema naming Client.Migrate", tc.name, err)
			}
		}
		fresh := testClient(t, Config{Table: c.cfg.Table})
		l, err := fresh.TryAcquire(ctx, "seq-"+tc.name, WithTTL(time.Minute))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if l.Token() <= last {
			t.Fatalf("sequence %s: token %d not above the table's largest %d", tc.name, l.Token(), last)
		}
		defer l.Release(ctx)
	}
}

// Right after a server restart every pooled connection is stale; calls that
// cannot have applied anything are retried on a fresh one instead of
// failing.
func TestCallsRetriedAfterServerRestart(t *testing.T) {
	cl := pgtest.RequireCluster(t)
	ctx := testCtx(t)
	c := testClient(t, Config{MaxConns: 4})
	l, err := c.TryAcquire(ctx, "warm", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
	for _, mode := range []string{"fast", "immediate"} {
		// Fill the pool with idle connections.
		var conns []*Lease
		for i := range 4 {
			l, err := c.TryAcquire(ctx, "fill"+string(rune('a'+i)), WithTTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, l)
		}
		for _, l := range conns {
			_ = l.Release(ctx)
		}
		if err := cl.Restart(ctx, mode); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Get(ctx, "none"); err != nil && !errors.Is(err, ErrNoLease) {
			t.Fatalf("%s: Get: %v", mode, err)
		}
		if _, err := c.List(ctx); err != nil {
			t.Fatalf("%s: List: %v", mode, err)
		}
		l, err := c.TryAcquire(ctx, "after-"+mode, WithTTL(time.Minute))
		if err != nil {
			t.Fatalf("%s: TryAcquire: %v", mode, err)
		}
		_ = l.Release(ctx)
		ran := false
		if err := c.TryRun(ctx, "run-"+mode, func(context.Context) error { ran = true; return nil }); err != nil || !ran {
			t.Fatalf("%s: TryRun: ran %v, %v", mode, ran, err)
		}
	}
}

// A semaphore waits like a single name: a fast-failover slot holder that
// dies hands its slot to a waiter at once, not at its expiry, whichever
// slot it held (the waiter watches every session-bound slot holder).
func TestSlotWaiterGetsFastFailover(t *testing.T) {
	ctx := testCtx(t)
	table := pgtest.Schema(t) + ".leases"
	var holders []*os.Process
	for range 2 {
		cmd, _ := startSlotHolder(t, table, "sem", 2, time.Minute)
		holders = append(holders, cmd.Process)
	}
	// Each holder in turn dies while a new waiter waits; the slot that
	// the first waiter took is held, session-bound, during the second
	// round.
	for i, holder := range holders {
		w := testClient(t, Config{Table: table, PollInterval: time.Minute})
		got := make(chan error, 1)
		var l *Lease
		go func() {
			var err error
			l, err = w.Acquire(ctx, "sem", WithSlots(2), WithFastFailover(), WithTTL(time.Minute))
			got <- err
		}()
		select {
		case err := <-got:
			t.Fatalf("round %d: Acquire returned while both slots were held: %v", i, err)
		case <-time.After(500 * time.Millisecond):
		}
		killed := time.Now()
		_ = holder.Signal(syscall.SIGKILL)
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("round %d: %s taken over %v after SIGKILL of its holder", i, l.Name(), time.Since(killed).Round(time.Millisecond))
			defer l.Release(ctx)
		case <-time.After(20 * time.Second):
			t.Fatalf("round %d: no slot taken over within 20s after its fast-failover holder died (TTL 1m)", i)
		}
	}
}

// A plain waiter cannot take a session-bound lease over when the holder's
// session ends, so it waits for the row's expiry: it neither awaits the
// holder's session nor polls while it waits.
func TestPlainWaiterOnDeadSessionHolderWaitsForExpiry(t *testing.T) {
	ctx := testCtx(t)
	table := pgtest.Schema(t) + ".leases"
	var attempts atomic.Int64
	w := testClient(t, Config{Table: table, Observer: ObserverFunc(func(e Event) {
		if e.Kind == EventContended {
			attempts.Add(1)
		}
	})})
	cmd, _ := startHolder(t, table, "p", 3*time.Second, true)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	l, err := w.Acquire(ctx, "p", WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	// One attempt, the expiry timer's, and a few for jitter; a waiter
	// woken by the free session lock would make hundreds.
	if n := attempts.Load(); n > 5 {
		t.Fatalf("a plain waiter made %d attempts while a dead fast-failover holder's row expired", n)
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
	epoch := c.sess.currentEpoch()
	for _, stmt := range []string{
		"SELECT pg_sleep(2)", // the session's statement_timeout: 57014
		"DO $$BEGIN RAISE EXCEPTION 'test' USING ERRCODE = '40P01'; END$$",
		"DO $$BEGIN RAISE EXCEPTION 'test' USING ERRCODE = '55P03'; END$$",
	} {
		err := c.sess.do(ctx, 5*time.Second, func(ctx context.Context, q store.Querier, _ *sessState) error {
			return q.Query(ctx, stmt, nil, func(store.Row) error { return nil })
		})
		if !store.Retryable(err) {
			t.Fatalf("%s: %v, want a retryable error", stmt, err)
		}
	}
	if e := c.sess.currentEpoch(); e != epoch {
		t.Fatalf("the session was re-opened (epoch %d → %d)", epoch, e)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("session-bound lease ended: %v", err)
	}
}
