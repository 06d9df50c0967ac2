package pglease

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync"
	"testing"
	"time"

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

// A client on a database/sql handle: with pgx's stdlib driver it has every
// feature; with another driver it renews on a pinned connection, waits by
// polling, and refuses fast failover.
func TestClientOnDatabaseSQL(t *testing.T) {
	for _, tc := range []struct {
		name    string
		foreign bool
	}{{"PgxStdlibHasEveryFeature", false}, {"ForeignDriverPollsAndRenews", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			db := openSQL(t, tc.foreign)
			table := pgtest.Schema(t) + ".leases"
			log := newEventLog()
			c, err := NewFromDB(db, Config{Table: table, PollInterval: 200 * time.Millisecond, Observer: log})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			other := testClient(t, Config{Table: table})

			l, err := c.TryAcquire(ctx, "sql", WithTTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			awaitKeptPast(t, log, l, l.Deadline())
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
			got := make(chan *Lease, 1)
			go func() {
				l2, err := c.Acquire(ctx, "sql")
				if err != nil {
					t.Error(err)
				}
				got <- l2
			}()
			log.await(t, "the waiter to find the name held", is(EventContended, "sql"))
			if err := ol.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if l2 := pgtest.Receive(t, got, "the waiter to get the released name"); l2 != nil {
				_ = l2.Release(ctx)
			}
			_, err = c.TryAcquire(ctx, "ff", WithFastFailover())
			if tc.foreign != errors.Is(err, ErrSessionUnavailable) {
				t.Fatalf("FastFailover with foreign=%v: %v", tc.foreign, err)
			}
		})
	}
}
