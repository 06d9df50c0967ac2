package pglease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pglease/pglease/internal/pgtest"
)

// callerTx is a transaction of either driver, as a caller of Guard holds it.
type callerTx struct {
	guard  func(context.Context, *Lease) error
	exec   func(context.Context, string) error
	commit func(context.Context) error
}

// txMakers open a transaction with pgx and with database/sql; each is
// rolled back at the end of the test unless it was committed.
func txMakers(t *testing.T) map[string]func(context.Context) callerTx {
	pool := pgtest.Pool(t)
	db := openSQL(t, false)
	return map[string]func(context.Context) callerTx{
		"Pgx": func(ctx context.Context) callerTx {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
			return callerTx{
				guard: func(ctx context.Context, l *Lease) error { return l.Guard(ctx, tx) },
				exec: func(ctx context.Context, q string) error {
					_, err := tx.Exec(ctx, q)
					return err
				},
				commit: func(ctx context.Context) error {
					err := tx.Commit(ctx)
					if err != nil && !errors.Is(err, pgx.ErrTxCommitRollback) {
						t.Errorf("pgx commit after a failed guard: %v, want pgx.ErrTxCommitRollback", err)
					}
					return err
				},
			}
		},
		"DatabaseSQL": func(ctx context.Context) callerTx {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tx.Rollback() })
			return callerTx{
				guard: func(ctx context.Context, l *Lease) error { return l.GuardSQL(ctx, tx) },
				exec: func(ctx context.Context, q string) error {
					_, err := tx.ExecContext(ctx, q)
					return err
				},
				commit: func(context.Context) error { return tx.Commit() },
			}
		},
	}
}

// A caller that ignores a failed Guard's error, writes and commits: the
// commit fails and the write is not there, with both drivers, whether the
// server found the lease gone (force-released or taken over) or the client
// already knew it had ended. A lease the server reports not held is lost
// locally too.
func TestFailedGuardAbortsTransaction(t *testing.T) {
	for name, begin := range txMakers(t) {
		t.Run(name, func(t *testing.T) {
			for _, tc := range []struct {
				name string
				// stale makes l stale; serverSays is true when only the
				// server can tell (the client still thinks it holds l).
				stale      func(ctx context.Context, t *testing.T, l *Lease, other *Client)
				serverSays bool
			}{
				{"ForceReleased", func(ctx context.Context, t *testing.T, l *Lease, other *Client) {
					if _, err := other.forceRelease(ctx, l.Name()); err != nil {
						t.Fatal(err)
					}
				}, true},
				{"TakenOver", func(ctx context.Context, t *testing.T, l *Lease, other *Client) {
					if _, err := other.forceRelease(ctx, l.Name()); err != nil {
						t.Fatal(err)
					}
					if _, err := other.TryAcquire(ctx, l.Name()); err != nil {
						t.Fatal(err)
					}
				}, true},
				{"ReleasedLocally", func(ctx context.Context, t *testing.T, l *Lease, _ *Client) {
					if err := l.Release(ctx); err != nil {
						t.Fatal(err)
					}
				}, false},
			} {
				t.Run(tc.name, func(t *testing.T) {
					ctx := testCtx(t)
					// A long TTL: no renewal notices the loss during the
					// test, so only the Guard can.
					c := testClient(t, Config{TTL: time.Minute})
					other := testClient(t, Config{Table: c.cfg.Table})
					writes := c.st.Names.Schema + ".writes"
					if _, err := pgtest.Pool(t).Exec(ctx, "CREATE TABLE "+writes+" (v text)"); err != nil {
						t.Fatal(err)
					}
					l, err := c.TryAcquire(ctx, "g")
					if err != nil {
						t.Fatal(err)
					}
					tc.stale(ctx, t, l, other)
					if tc.serverSays && causeOf(l.Context()) != nil {
						t.Fatalf("the lease ended before the guard: %v", causeOf(l.Context()))
					}

					tx := begin(ctx)
					gerr := tx.guard(ctx, l)
					if !errors.Is(gerr, ErrNotHeld) {
						t.Fatalf("Guard: %v, want ErrNotHeld", gerr)
					}
					// The caller ignores the error.
					_ = tx.exec(ctx, "INSERT INTO "+writes+" VALUES ('stale')")
					if err := tx.commit(ctx); err == nil {
						t.Fatal("a transaction whose Guard failed committed")
					}
					var n int
					if err := pgtest.Pool(t).QueryRow(ctx, "SELECT count(*) FROM "+writes).Scan(&n); err != nil {
						t.Fatal(err)
					}
					if n != 0 {
						t.Fatalf("the stale write committed (%d rows)", n)
					}
					if tc.serverSays {
						select {
						case <-l.Context().Done():
						default:
							t.Fatal("the lease still looks held after the server refused its Guard")
						}
						if !errors.Is(causeOf(l.Context()), ErrLeaseLost) || !errors.Is(gerr, ErrLeaseLost) {
							t.Fatalf("lease Err %v, Guard %v: want ErrLeaseLost", causeOf(l.Context()), gerr)
						}
					}
				})
			}
		})
	}
}

// A Guard that fails for a transient reason (the connection breaks, ctx is
// cancelled) returns that error, not ErrNotHeld, and leaves the lease held.
func TestTransientGuardFailureKeepsLease(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{TTL: time.Minute})
	l, err := c.TryAcquire(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for name, begin := range txMakers(t) {
		tx := begin(ctx)
		if err := tx.guard(cancelled, l); err == nil || errors.Is(err, ErrNotHeld) {
			t.Errorf("%s: Guard with a cancelled ctx: %v, want a non-ErrNotHeld error", name, err)
		}
	}

	proxy := pgtest.NewProxy(t, pgtest.HostPort(t, pgtest.DSN(t)))
	pool, err := pgxpool.New(ctx, proxy.DSN(pgtest.DSN(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	db, err := sql.Open("pgx", proxy.DSN(pgtest.DSN(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ptx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ptx.Rollback(ctx) // returns the connection, so pool.Close does not wait
	stx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer stx.Rollback()
	proxy.ResetAll()
	if err := l.Guard(ctx, ptx); err == nil || errors.Is(err, ErrNotHeld) {
		t.Errorf("pgx Guard on a broken connection: %v, want a non-ErrNotHeld error", err)
	}
	if err := l.GuardSQL(ctx, stx); err == nil || errors.Is(err, ErrNotHeld) {
		t.Errorf("database/sql Guard on a broken connection: %v, want a non-ErrNotHeld error", err)
	}
	if err := causeOf(l.Context()); err != nil {
		t.Fatalf("a transient Guard failure ended the lease: %v", err)
	}
	// And a Guard that passes still lets the transaction commit.
	tx, err := pgtest.Pool(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Guard(ctx, tx); err != nil {
		t.Fatalf("Guard: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit after a passing Guard: %v", err)
	}
}

// guardedTx acquires "g" with ttl on a new client and opens a transaction
// of the test pool in which the lease's Guard passed (rolled back at the
// end of the test unless committed).
func guardedTx(t *testing.T, ttl time.Duration) (*Client, *Lease, *pgxpool.Pool, pgx.Tx) {
	t.Helper()
	ctx := testCtx(t)
	c := testClient(t, Config{})
	l, err := c.TryAcquire(ctx, "g", WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	pool := pgtest.Pool(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if err := l.Guard(ctx, tx); err != nil {
		t.Fatalf("Guard: %v", err)
	}
	return c, l, pool, tx
}

// Guard keeps a takeover (here a force-release) from committing while the
// guarded transaction is open, and fails once the token is stale.
func TestGuardBlocksTakeoverUntilCommit(t *testing.T) {
	ctx := testCtx(t)
	c, l, pool, tx := guardedTx(t, 5*time.Second)
	admin := testClient(t, Config{Table: c.cfg.Table, Owner: "force-releaser"})
	forced := make(chan error, 1)
	go func() {
		_, err := admin.forceRelease(ctx, "g")
		forced <- err
	}()
	pgtest.WaitLockWait(t, "pglease force-releaser")
	select {
	case err := <-forced:
		t.Fatalf("force-release committed inside the guarded transaction: %v", err)
	default:
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pgtest.Receive(t, forced, "the force-release after the commit"); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := l.Guard(ctx, tx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Guard after force-release: %v, want ErrNotHeld", err)
	}
}

// A guarded transaction whose client goes silent (a partition: nothing
// reaches the server, the connection stays open) must not block takeovers
// for ever: the server ends it once it has sat idle past the lease's local
// deadline, a contender then takes the name, and the stale transaction
// cannot commit.
func TestAbandonedGuardedTransactionDoesNotBlockTakeover(t *testing.T) {
	ctx := testCtx(t)
	c, l, _, tx := guardedTx(t, 2*time.Second)
	other := testClient(t, Config{Table: c.cfg.Table})
	// The transaction now sits idle, as when its client is partitioned.
	actx, cancel := context.WithTimeout(ctx, patience)
	defer cancel()
	l2, err := other.Acquire(actx, "g", WithTTL(2*time.Second))
	if err != nil {
		t.Fatalf("a contender could not take over while the guarded transaction sat idle: %v", err)
	}
	defer l2.Release(ctx)
	if l2.Token() <= l.Token() {
		t.Fatalf("token %d after %d", l2.Token(), l.Token())
	}
	pgtest.Receive(t, l.Context().Done(), "the old holder's lease to end")
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("the abandoned guarded transaction committed after a takeover")
	}
}

// The idle bound a Guard sets is local to the caller's transaction, and a
// stricter setting of the caller's own is kept.
func TestGuardIdleBoundIsTransactionLocal(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	l, err := c.TryAcquire(ctx, "g", WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	conn, err := pgtest.Pool(t).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	setting := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) int64 {
		var ms int64
		if err := q.QueryRow(ctx, "SELECT setting::bigint FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout'").Scan(&ms); err != nil {
			t.Fatal(err)
		}
		return ms
	}
	for _, own := range []int64{0, 1000} {
		if _, err := conn.Exec(ctx, fmt.Sprintf("SET idle_in_transaction_session_timeout = %d", own)); err != nil {
			t.Fatal(err)
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Guard(ctx, tx); err != nil {
			t.Fatalf("Guard: %v", err)
		}
		got := setting(tx)
		want := own
		if own == 0 {
			if got <= 0 || got > (30*time.Second).Milliseconds() {
				t.Errorf("session setting 0: in the guarded transaction %d ms, want the time left until the lease's deadline", got)
			}
		} else if got != want {
			t.Errorf("session setting %d ms: in the guarded transaction %d ms, want the stricter %d", own, got, want)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if after := setting(conn); after != own {
			t.Errorf("after the transaction: %d ms, want the session's own %d", after, own)
		}
	}
}

// Guard works for a lease whose TTL is longer than the server's largest
// idle_in_transaction_session_timeout (about 24.8 days): the timeout it
// sets is clamped to the setting's range instead of being refused by the
// server, which the client would otherwise take for "not held".
func TestGuardOfALeaseLongerThanTheIdleTimeoutRange(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	l, err := c.TryAcquire(ctx, "month", WithTTL(30*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	tx, err := pgtest.Pool(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := l.Guard(ctx, tx); err != nil {
		t.Fatalf("Guard: %v", err)
	}
	var setting string
	if err := tx.QueryRow(ctx, "SELECT current_setting('idle_in_transaction_session_timeout')").Scan(&setting); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit after Guard: %v", err)
	}
	if causeOf(l.Context()) != nil {
		t.Fatalf("lease ended: %v", causeOf(l.Context()))
	}
	t.Logf("idle_in_transaction_session_timeout inside the guarded transaction: %s", setting)
}
