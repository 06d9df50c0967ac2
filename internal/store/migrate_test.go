package store

import (
	"testing"

	"github.com/pglease/pglease/internal/pgtest"
)

// A migration waits at most 200 ms for a lock, or the session's own
// lock_timeout when that is stricter, and only in its own transaction.
func TestMigrationLockTimeoutKeepsAStricterOne(t *testing.T) {
	ctx := testCtx(t)
	s := newStore(t, "leases")
	conn := pgtest.Conn(t)
	for _, tc := range []struct{ session, want string }{{"0", "200ms"}, {"5s", "200ms"}, {"50ms", "50ms"}} {
		if _, err := conn.Exec(ctx, "SET lock_timeout = '"+tc.session+"'"); err != nil {
			t.Fatal(err)
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := Pgx(tx).Query(ctx, s.Q.MigrationLockTimeout, []any{migrationLockTimeout.Milliseconds()}, func(Row) error { return nil }); err != nil {
			t.Fatal(err)
		}
		var in, after string
		if err := tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&in); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(ctx, "SHOW lock_timeout").Scan(&after); err != nil {
			t.Fatal(err)
		}
		if in != tc.want || after != tc.session {
			t.Errorf("session lock_timeout %s: %s in the migration's transaction (want %s), %s after it", tc.session, in, tc.want, after)
		}
	}
}
