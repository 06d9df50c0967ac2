package pglease

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pglease/pglease/internal/pgtest"
)

// foreignDriver wraps pgx's stdlib driver but hides its *pgx.Conn, so the
// client sees a database/sql driver it knows nothing about (as with lib/pq).
type foreignDriver struct{ driver.Driver }

type foreignConn struct{ driver.Conn }

func (d foreignDriver) Open(name string) (driver.Conn, error) {
	c, err := d.Driver.Open(name)
	if err != nil {
		return nil, err
	}
	return foreignConn{c}, nil
}

var registerForeign sync.Once

func openSQL(t *testing.T, foreign bool) *sql.DB {
	t.Helper()
	name := "pgx"
	if foreign {
		registerForeign.Do(func() { sql.Register("pglease-foreign", foreignDriver{stdlib.GetDefaultDriver()}) })
		name = "pglease-foreign"
	}
	db, err := sql.Open(name, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestDatabaseSQL(t *testing.T) {
	for _, tc := range []struct {
		name    string
		foreign bool
	}{{"PgxStdlibHasEveryFeature", false}, {"ForeignDriverPollsAndRenews", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			db := openSQL(t, tc.foreign)
			table := pgtest.Schema(t) + ".leases"
			c, err := NewFromDB(db, Config{Table: table, PollInterval: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			other := testClient(t, Config{Table: table})

			l, err := c.TryAcquire(ctx, "sql", WithTTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(1500 * time.Millisecond) // renewals keep it
			if err := l.Err(); err != nil {
				t.Fatalf("lease lost: %v", err)
			}
			if _, err := other.TryAcquire(ctx, "sql"); !errors.Is(err, ErrNotAcquired) {
				t.Fatalf("other client acquired a held lease: %v", err)
			}
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.GuardSQL(ctx, tx); err != nil {
				t.Fatalf("GuardSQL: %v", err)
			}
			_ = tx.Rollback()
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			// Waiting works with or without notifications.
			ol, err := other.TryAcquire(ctx, "sql", WithTTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			go func() { time.Sleep(300 * time.Millisecond); _ = ol.Release(context.Background()) }()
			l2, err := c.Acquire(ctx, "sql")
			if err != nil {
				t.Fatal(err)
			}
			_ = l2.Release(ctx)
			_, err = c.TryAcquire(ctx, "ff", WithFastFailover())
			if tc.foreign != errors.Is(err, ErrSessionUnavailable) {
				t.Fatalf("FastFailover with foreign=%v: %v", tc.foreign, err)
			}
		})
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
	admin := testClient(t, Config{Table: c.cfg.Table})
	forced := make(chan error, 1)
	go func() {
		_, err := admin.ForceRelease(ctx, "g")
		forced <- err
	}()
	select {
	case err := <-forced:
		t.Fatalf("force-release committed inside the guarded transaction: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-forced; err != nil {
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

type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) Observe(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	if e.Kind == EventRenewed {
		panic("a broken observer")
	}
}

func (r *recorder) kinds() []EventKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []EventKind
	for _, e := range r.events {
		out = append(out, e.Kind)
	}
	return out
}

// Events arrive in order; a panicking observer breaks neither renewals nor
// later events.
func TestObserverEventsInOrderAndPanicsRecovered(t *testing.T) {
	ctx := testCtx(t)
	rec := &recorder{}
	c := testClient(t, Config{Observer: rec})
	other := testClient(t, Config{Table: c.cfg.Table})
	ol, err := other.TryAcquire(ctx, "o")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(ctx, "o"); !errors.Is(err, ErrNotAcquired) {
		t.Fatal(err)
	}
	_ = ol.Release(ctx)
	l, err := c.TryAcquire(ctx, "o", WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1200 * time.Millisecond)
	if err := l.Err(); err != nil {
		t.Fatalf("renewals broke with a panicking observer: %v", err)
	}
	_ = l.Release(ctx)
	_ = c.Close()
	k := rec.kinds()
	want := []EventKind{EventContended, EventAcquired, EventRenewed}
	if len(k) < 4 || k[0] != want[0] || k[1] != want[1] || k[2] != want[2] || k[len(k)-1] != EventReleased {
		t.Fatalf("events %v", k)
	}
}

// SlowSuccessfulRenewDoesNotExtendTrust: the deadline is computed from when
// a renewal was sent, however late its reply arrives.
func TestSlowSuccessfulRenewDoesNotExtendTrust(t *testing.T) {
	ctx := testCtx(t)
	c, proxy := proxiedClient(t, Config{})
	const ttl = 5 * time.Second
	l, err := c.TryAcquire(ctx, "slow", WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	proxy.SetDelay(400 * time.Millisecond)
	sent := time.Now()
	if err := l.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if rtt := time.Since(sent); rtt < 400*time.Millisecond {
		t.Fatalf("proxy delay not in effect: %s", rtt)
	}
	// The reply took at least the proxy's delay to come back, so the
	// statement was sent at least that long before Renew returned. Trust
	// computed from the reply would end later than this bound.
	returned := time.Now()
	if max := returned.Add(-400*time.Millisecond + ttl - c.margin(ttl)); l.Deadline().After(max) {
		t.Fatalf("deadline %s after the reply; the bound from the send time is %s", l.Deadline().Sub(returned), max.Sub(returned))
	}
	proxy.SetDelay(0)
	_ = l.Release(ctx)
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
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l2, err := other.Acquire(actx, "g", WithTTL(2*time.Second))
	if err != nil {
		t.Fatalf("a contender could not take over while the guarded transaction sat idle: %v", err)
	}
	defer l2.Release(ctx)
	if l2.Token() <= l.Token() {
		t.Fatalf("token %d after %d", l2.Token(), l.Token())
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the old holder's lease did not end")
	}
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
