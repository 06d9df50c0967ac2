package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SQL helpers for tests that look at, or change, the server's state
// directly, past the code under test. Each runs on a short-lived connection
// as the superuser the tests connect as, and fails the test on error; call
// them from the test's goroutine.

// Conn returns a connection to the shared server as the tests' superuser,
// closed when the test ends: for a transaction the test keeps open (a row
// lock held across calls of the code under test).
func Conn(t testing.TB) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, DSN(t))
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// AppName returns an application_name for the connections of one helper
// of one test: prefix, then what makes it unique in this test binary and
// among binaries sharing PGLEASE_TEST_DSN. Keep prefix short: the server
// cuts application_name at 63 bytes.
func AppName(prefix string) string {
	return fmt.Sprintf("%s %s-%d", prefix, runID, schemaSeq.Add(1))
}

// AppConn is Conn with application_name app: the one connection of a
// helper that reads the server again and again (a poll) for a whole test,
// which Backends(t, app) counts. A helper must not connect per read and
// keep the connection until the test ends (Conn, Pool): polled every few
// milliseconds, it soon takes every connection the server allows.
func AppConn(t testing.TB, app string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(DSN(t))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	cfg.RuntimeParams["application_name"] = app
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// AppPool is AppConn as a pool of one connection, for code that reads
// through a pool: closed when the test ends.
func AppPool(t testing.TB, app string) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(DSN(t))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	cfg.MaxConns = 1
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Backends returns the number of sessions on the shared server whose
// application_name is app (see AppName).
func Backends(t testing.TB, app string) int {
	t.Helper()
	return Value[int](t, `SELECT count(*)::int FROM pg_stat_activity WHERE application_name = $1`, app)
}

// Exec runs sql with args on the shared server.
func Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	withConn(t, func(ctx context.Context, conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
		return nil
	})
}

// QueryRow runs sql with args on the shared server and scans the one row
// it returns into dest.
func QueryRow(t testing.TB, sql string, args []any, dest ...any) {
	t.Helper()
	queryRow(t, DSN(t), sql, args, dest...)
}

func queryRow(t testing.TB, dsn, sql string, args []any, dest ...any) {
	t.Helper()
	withConnTo(t, dsn, func(ctx context.Context, conn *pgx.Conn) error {
		if err := conn.QueryRow(ctx, sql, args...).Scan(dest...); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
		return nil
	})
}

// Value returns the one value of the one row sql returns on the shared
// server.
func Value[T any](t testing.TB, sql string, args ...any) T {
	t.Helper()
	var v T
	QueryRow(t, sql, args, &v)
	return v
}

// RelationExists reports whether the relation rel (a name as to_regclass
// reads it: quoted where needed, optionally schema-qualified) exists.
func RelationExists(t testing.TB, rel string) bool {
	t.Helper()
	return Value[bool](t, `SELECT to_regclass($1) IS NOT NULL`, rel)
}

// WaitLockWait waits until a backend whose application_name is LIKE
// appNameLike waits for a lock (another session holds a row or table it
// needs), and fails the test if none does within Patience: the signal that
// a statement has reached the server and is blocked there.
func WaitLockWait(t testing.TB, appNameLike string) {
	t.Helper()
	WaitFor(t, Patience, "a backend of "+appNameLike+" waiting for a lock", func() bool {
		return Value[bool](t, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE application_name LIKE $1 AND wait_event_type = 'Lock')`, appNameLike)
	})
}

// WaitListening waits until a backend whose application_name is LIKE
// appNameLike sits idle after a LISTEN, and fails the test if none does
// within Patience. A pglease client's dedicated connection ("pglease
// <owner>") is such a backend while the client waits for release
// notifications and holds no lease (renewals would run on it): the signal,
// seen from the server, that a waiter in another process waits. Tests in
// the client's own process have a finer one in the client.
func WaitListening(t testing.TB, appNameLike string) {
	t.Helper()
	WaitFor(t, Patience, "a backend of "+appNameLike+" listening", func() bool {
		return Value[bool](t, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE application_name LIKE $1 AND state = 'idle' AND query ILIKE 'LISTEN %')`, appNameLike)
	})
}

// SelectOnlyDSN creates a login role that may only read tables (USAGE on
// the schema of the first, SELECT on each; names as "schema.table"), dropped
// when the test ends, and returns the DSN of the shared server as that
// role: for checking that read-only code needs no more.
func SelectOnlyDSN(t testing.TB, tables ...string) string {
	t.Helper()
	if len(tables) == 0 || !strings.Contains(tables[0], ".") {
		t.Fatalf("pgtest: SelectOnlyDSN needs schema-qualified tables, got %q", tables)
	}
	schema := tables[0][:strings.Index(tables[0], ".")]
	return RoleDSN(t, "USAGE ON SCHEMA "+schema, "SELECT ON "+strings.Join(tables, ", "))
}

// RoleDSN creates a login role, dropped when the test ends, grants it
// each of grants (what a GRANT statement grants: "USAGE ON SCHEMA s",
// "SELECT ON s.t"), and returns the DSN of the shared server as that role.
func RoleDSN(t testing.TB, grants ...string) string {
	t.Helper()
	role := fmt.Sprintf("role_%d", time.Now().UnixNano())
	Exec(t, "CREATE ROLE "+role+" LOGIN")
	t.Cleanup(func() { Exec(t, "DROP OWNED BY "+role+"; DROP ROLE "+role) })
	for _, g := range grants {
		Exec(t, "GRANT "+g+" TO "+role)
	}
	u, err := url.Parse(DSN(t))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	u.User = url.User(role)
	return u.String()
}
