package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pglease/pglease/internal/pgtest"
)

// sessionArgs are the arguments of a session-bound acquisition of name.
func sessionArgs(name string, lockTimeout time.Duration) AcquireArgs {
	return AcquireArgs{Name: name, Owner: "batch", TTL: time.Minute, Session: true, Client: "c1", LockTimeout: lockTimeout}
}

// advisoryLocks counts the session advisory locks (bigint keys) that the
// backend pid holds.
func advisoryLocks(t *testing.T, pid uint32) int {
	t.Helper()
	return pgtest.Value[int](t, `SELECT count(*)::int FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND granted AND pid = $1`, int(pid))
}

// batchConn is a connection that holds its session lock, as the client's
// dedicated session does before it acquires anything session-bound.
func batchConn(t *testing.T, s *Store) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(testCtx(t), pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	if err := s.SessionLock(testCtx(t), Pgx(conn)); err != nil {
		t.Fatal(err)
	}
	return conn
}

// A batch commits as one transaction (every row gets the same now()) and
// reports each acquisition as Acquire would: acquired and session-bound,
// or not acquired with the session-bound holder. Binding a lease to its
// session takes no lock of its own: the session's one lock covers all.
func TestAcquireBatchIsOneTransaction(t *testing.T) {
	ctx := testCtx(t)
	s, db := migrated(t)
	other := batchConn(t, s)
	if r, err := s.Acquire(ctx, Pgx(other), sessionArgs("held", 0)); err != nil || !r.SessionBound {
		t.Fatalf("the other session's acquisition: %+v, %v", r, err)
	}
	conn := batchConn(t, s)
	names := []string{"a", "b", "held", "c"}
	as := make([]AcquireArgs, len(names))
	for i, n := range names {
		as[i] = sessionArgs(n, 50*time.Millisecond)
	}
	rs, err := s.AcquireBatch(ctx, conn, as, 100*time.Millisecond)
	if err != nil {
		t.Fatalf("AcquireBatch: %v", err)
	}
	for i, r := range rs {
		if names[i] == "held" {
			if r.Acquired || !r.HolderInSession || !r.HolderWatchable || r.HolderSession != int32(other.PgConn().PID()) {
				t.Errorf("held: %+v, want not acquired, the other session's live holder", r)
			}
			continue
		}
		if !r.Acquired || !r.SessionBound || r.Token == 0 {
			t.Errorf("%s: %+v, want acquired and session-bound", names[i], r)
		}
	}
	var stamps, pids int
	var pid uint32
	err = db.Query(ctx, `SELECT count(DISTINCT "acquired_at")::int, count(DISTINCT "session_pid")::int, max("session_pid") FROM `+s.Names.QualifiedTable()+` WHERE "name" IN ('a', 'b', 'c')`, nil,
		func(r Row) error { return r.Scan(&stamps, &pids, &pid) })
	if err != nil {
		t.Fatal(err)
	}
	if stamps != 1 || pids != 1 || pid != conn.PgConn().PID() {
		t.Fatalf("%d acquisition times and %d sessions (%d), want 1 and 1 (%d): one transaction", stamps, pids, pid, conn.PgConn().PID())
	}
	if n := advisoryLocks(t, conn.PgConn().PID()); n != 1 {
		t.Fatalf("the batch's session holds %d advisory locks, want 1 (its session lock)", n)
	}
}

// expiredRow writes the row of name, expired at once: an attempt takes it
// over, and so must lock it (a live row it only reads).
func expiredRow(t *testing.T, s *Store, db DB, name string) {
	t.Helper()
	if r, err := s.Acquire(testCtx(t), db, AcquireArgs{Name: name, Owner: "x", TTL: time.Millisecond, Client: "c2"}); err != nil || !r.Acquired {
		t.Fatalf("plain acquisition: %+v, %v", r, err)
	}
	time.Sleep(5 * time.Millisecond)
}

// A statement that fails (a lock timeout on a locked row it would take
// over) aborts the whole batch: nothing committed, nothing left behind,
// and the connection is usable.
func TestFailedAcquireBatchLeavesNothing(t *testing.T) {
	ctx := testCtx(t)
	s, db := migrated(t)
	expiredRow(t, s, db, "busy")
	pgtest.LeaseTable(t, pgtest.DSN(t), s.Names.Schema+"."+s.Names.Table).LockRow("busy")
	conn := batchConn(t, s)
	names := []string{"a", "b", "busy", "c"}
	as := make([]AcquireArgs, len(names))
	for i, n := range names {
		as[i] = sessionArgs(n, 50*time.Millisecond)
	}
	rs, err := s.AcquireBatch(ctx, conn, as, time.Second)
	if Classify(err) != KindLockTimeout {
		t.Fatalf("AcquireBatch: %v, want a lock timeout", err)
	}
	if rs != nil {
		t.Errorf("results of a failed batch: %+v", rs)
	}
	var n int
	if err := db.Query(ctx, `SELECT count(*)::int FROM `+s.Names.QualifiedTable()+` WHERE "name" <> 'busy'`, nil, func(r Row) error { return r.Scan(&n) }); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d rows of a failed batch committed", n)
	}
	if got := advisoryLocks(t, conn.PgConn().PID()); got != 1 {
		t.Fatalf("%d advisory locks after the failed batch, want 1 (the session lock)", got)
	}
	// The connection is usable: the batch without the busy name commits.
	if _, err := s.AcquireBatch(ctx, conn, []AcquireArgs{as[0], as[1], as[3]}, time.Second); err != nil {
		t.Fatalf("the next batch: %v", err)
	}
}

// A session-bound row is taken over at once, by any attempt, when the
// session that wrote it no longer holds its session lock, and never while
// it does; the session itself never takes over its own row.
func TestASessionBoundRowIsTakenOverOnceItsSessionEnds(t *testing.T) {
	ctx := testCtx(t)
	s, db := migrated(t)
	holder := batchConn(t, s)
	held, err := s.Acquire(ctx, Pgx(holder), sessionArgs("x", 0))
	if err != nil || !held.Acquired || !held.SessionBound {
		t.Fatalf("the holder's acquisition: %+v, %v", held, err)
	}
	plain := AcquireArgs{Name: "x", Owner: "plain", TTL: time.Minute, Client: "c2"}
	again := sessionArgs("x", 0)
	again.Client = "c3"
	for _, try := range []struct {
		q Querier
		a AcquireArgs
	}{{db, plain}, {Pgx(batchConn(t, s)), again}, {Pgx(holder), again}} {
		r, err := s.Acquire(ctx, try.q, try.a)
		if err != nil || r.Acquired || !r.HolderInSession {
			t.Fatalf("an attempt while the holder's session lives: %+v, %v", r, err)
		}
	}
	if err := holder.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The server frees the session's locks once its backend has exited;
	// the row is taken over then, by a plain attempt on the pool.
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := s.Acquire(ctx, db, plain)
		if err != nil {
			t.Fatal(err)
		}
		if r.Acquired {
			if r.OtherToken != held.Token || r.SessionBound {
				t.Fatalf("took over %+v, want the holder's token %d, not session-bound", r, held.Token)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the row of an ended session is still not taken over: %+v", r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Each statement of a batch is bounded on the server by perStatement: a
// statement that would wait for a row lock without a lock timeout of its
// own ends the batch with the server's statement timeout, long before the
// session's.
func TestAcquireBatchStatementBound(t *testing.T) {
	ctx := testCtx(t)
	s, db := migrated(t)
	expiredRow(t, s, db, "busy")
	pgtest.LeaseTable(t, pgtest.DSN(t), s.Names.Schema+"."+s.Names.Table).LockRow("busy")
	conn := batchConn(t, s)
	if _, err := conn.Exec(ctx, "SET statement_timeout = '60s'"); err != nil {
		t.Fatal(err)
	}
	_, err := s.AcquireBatch(ctx, conn, []AcquireArgs{sessionArgs("a", 0), sessionArgs("busy", 0)}, 100*time.Millisecond)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "57014" {
		t.Fatalf("AcquireBatch: %v, want the statement timeout (57014)", err)
	}
	var setting string
	if err := conn.QueryRow(ctx, "SHOW statement_timeout").Scan(&setting); err != nil || setting != "1min" {
		t.Fatalf("statement_timeout after the batch: %q, %v; want the session's own", setting, err)
	}
}

// An attempt that acquires nothing lets its own transaction commit without
// waiting for the WAL flush, but never a batch's: a batch that acquired
// something must commit durably even when another of its statements found
// its name held.
func TestOnlyALoneFailedAttemptCommitsAsynchronously(t *testing.T) {
	ctx := testCtx(t)
	s, db := migrated(t)
	if r, err := s.Acquire(ctx, db, AcquireArgs{Name: "held", Owner: "o", TTL: time.Minute, Client: "c1"}); err != nil || !r.Acquired {
		t.Fatalf("acquire: %+v, %v", r, err)
	}
	conn := batchConn(t, s)
	for _, inBatch := range []bool{false, true} {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		a := AcquireArgs{Name: "held", Owner: "o2", TTL: time.Minute, Client: "c2", inBatch: inBatch}
		sql, args, scan, result, err := s.acquireStmt(a)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := tx.Query(ctx, sql, args...)
		if err == nil {
			err = each(rows, scan)
		}
		if err != nil || result().Acquired {
			t.Fatalf("attempt on a held name: %+v, %v", result(), err)
		}
		var setting string
		if err := tx.QueryRow(ctx, "SHOW synchronous_commit").Scan(&setting); err != nil {
			t.Fatal(err)
		}
		_ = tx.Rollback(ctx)
		if want := map[bool]string{false: "off", true: "on"}[inBatch]; setting != want {
			t.Errorf("in a batch: %v: synchronous_commit %q after a failed attempt, want %q", inBatch, setting, want)
		}
	}
}

// AwaitHeldBell returns false at once for a bell its client does not hold,
// and keeps no lock on it (the client's ring, which takes that bell, does
// not wait for the watcher); for the bell the client holds, it waits until
// the client rings and returns true, or fails with a lock timeout.
func TestAwaitHeldBell(t *testing.T) {
	ctx := testCtx(t)
	s, _ := migrated(t)
	holder, watcher := pgtest.Conn(t), pgtest.Conn(t)
	const client = "c0ffee"
	if err := s.ClientLock(ctx, Pgx(holder), client); err != nil { // bell 0
		t.Fatal(err)
	}
	if rang, now, ok, err := s.AwaitHeldBell(ctx, watcher, client, 1, 10*time.Second); err != nil || rang || !ok || now != 0 {
		t.Fatalf("bell 1, free: rang %v, bell %d held %v, %v; want no wait, and bell 0 held", rang, now, ok, err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	k, err := s.Ring(rctx, Pgx(holder), client, 0) // takes bell 1: nothing of the watcher's holds it
	cancel()
	if err != nil || k != 1 {
		t.Fatalf("ring: bell %d, %v", k, err)
	}
	if _, _, _, err := s.AwaitHeldBell(ctx, watcher, client, 1, 50*time.Millisecond); Classify(err) != KindLockTimeout {
		t.Fatalf("bell 1, held: %v; want a lock timeout", err)
	}
	got := make(chan error, 1)
	go func() {
		rang, _, _, err := s.AwaitHeldBell(ctx, watcher, client, 1, 10*time.Second)
		if err == nil && !rang {
			err = errors.New("it did not wait")
		}
		got <- err
	}()
	pgtest.WaitFor(t, 10*time.Second, "the watcher to wait on bell 1", func() bool {
		return pgtest.Value[int](t, `SELECT count(*) FROM pg_locks WHERE "locktype" = 'advisory' AND NOT "granted"`) > 0
	})
	if _, err := s.Ring(ctx, Pgx(holder), client, 1); err != nil {
		t.Fatal(err)
	}
	if err := pgtest.Receive(t, got, "the watcher to return at the ring"); err != nil {
		t.Fatalf("bell 1, rung: %v", err)
	}
	// The client's session gone: no bell held.
	if err := holder.Close(ctx); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, 10*time.Second, "the holder's backend to end", func() bool {
		rang, _, ok, err := s.AwaitHeldBell(ctx, watcher, client, 2, time.Second)
		return err == nil && !rang && !ok
	})
}

// The bell a client holds, from the bells held: none, one, or two adjacent
// ones while it rings (the one about to be freed).
func TestHeldBell(t *testing.T) {
	for _, c := range []struct {
		held []int
		k    int
		ok   bool
	}{{nil, 0, false}, {[]int{0}, 0, true}, {[]int{7}, 7, true}, {[]int{7, 8}, 7, true}, {[]int{0, Bells - 1}, Bells - 1, true}, {[]int{0, 1}, 0, true}} {
		if k, ok := heldBell(c.held); k != c.k || ok != c.ok {
			t.Errorf("heldBell(%v) = %d, %v; want %d, %v", c.held, k, ok, c.k, c.ok)
		}
	}
}
