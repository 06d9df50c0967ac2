package pglease

import (
	"context"
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
