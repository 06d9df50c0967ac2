package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

var (
	schemaSeq atomic.Int64
	// runID distinguishes test binaries sharing one PGLEASE_TEST_DSN server.
	runID = func() string {
		b := make([]byte, 3)
		_, _ = rand.Read(b)
		return hex.EncodeToString(b)
	}()
)

// Schema creates a fresh, uniquely named schema and drops it (CASCADE) when
// the test ends. The name matches [a-z_][a-z0-9_]{0,62}.
func Schema(t testing.TB) string {
	t.Helper()
	name := schemaName(t.Name(), runID, schemaSeq.Add(1))
	Exec(t, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize())
	t.Cleanup(func() {
		Exec(t, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE")
	})
	return name
}

// schemaName builds t_<sanitized test name>_<run>_<seq>, at most 63 bytes.
func schemaName(testName, run string, seq int64) string {
	var b strings.Builder
	for _, r := range strings.ToLower(testName) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	suffix := fmt.Sprintf("_%s_%d", run, seq)
	base := "t_" + b.String()
	if max := 63 - len(suffix); len(base) > max {
		base = base[:max]
	}
	return base + suffix
}

// Pool returns a pgxpool connected to the shared server, closed when the
// test ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, DSN(t))
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TerminateBackends runs pg_terminate_backend on every other backend whose
// application_name is LIKE appNameLike and returns how many were signalled.
func TerminateBackends(t testing.TB, appNameLike string) int {
	t.Helper()
	var n int
	withConn(t, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
			FROM pg_stat_activity
			WHERE application_name LIKE $1 AND pid <> pg_backend_pid()`, appNameLike).Scan(&n)
	})
	return n
}

// withConn runs f on a short-lived connection to the shared server.
func withConn(t testing.TB, f func(context.Context, *pgx.Conn) error) {
	t.Helper()
	withConnTo(t, DSN(t), f)
}

// withConnTo runs f on a short-lived connection to the server at dsn.
func withConnTo(t testing.TB, dsn string, f func(context.Context, *pgx.Conn) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer conn.Close(ctx)
	if err := f(ctx, conn); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
}
