package pglease

import (
	"context"
	"database/sql"
	"errors"
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
					if _, err := other.ForceRelease(ctx, l.Name()); err != nil {
						t.Fatal(err)
					}
				}, true},
				{"TakenOver", func(ctx context.Context, t *testing.T, l *Lease, other *Client) {
					if _, err := other.ForceRelease(ctx, l.Name()); err != nil {
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
					if tc.serverSays && l.Err() != nil {
						t.Fatalf("the lease ended before the guard: %v", l.Err())
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
						case <-l.Done():
						default:
							t.Fatal("the lease still looks held after the server refused its Guard")
						}
						if !errors.Is(l.Err(), ErrLeaseLost) || !errors.Is(gerr, ErrLeaseLost) {
							t.Fatalf("lease Err %v, Guard %v: want ErrLeaseLost", l.Err(), gerr)
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
	if err := l.Err(); err != nil {
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
