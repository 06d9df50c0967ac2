package pglease

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pglease/pglease/internal/pgtest"
	"github.com/pglease/pglease/internal/store"
)

// Server errors get a hint that says what to do; the cause stays reachable.
func TestOpErrorHints(t *testing.T) {
	for code, want := range map[string]string{
		"42501": "privilege",
		"42P01": "pglease migrate",
		"28P01": "password",
		"3D000": "database does not exist",
		"53200": "max_locks_per_transaction",
		"08006": "unreachable",
	} {
		cause := &pgconn.PgError{Code: code}
		err := opError("acquire", cause)
		if !strings.Contains(err.Error(), want) || !errors.Is(err, cause) {
			t.Errorf("%s: %v, want a hint containing %q", code, err, want)
		}
	}
	err := opError("check", &store.SchemaError{Msg: "column x"})
	if !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "column x") {
		t.Errorf("schema error: %v", err)
	}
}

// A release does not wait for its WAL flush (lost in a crash, it only
// delays the next holder); acquire and renew keep the server's setting.
func TestReleaseSkipsTheFlushWait(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	if err := c.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	setting := func(run func(q store.Querier) error) string {
		tx, err := pgtest.Pool(t).Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		q := store.Pgx(tx)
		if err := run(q); err != nil {
			t.Fatal(err)
		}
		var v string
		if err := tx.QueryRow(ctx, "SELECT current_setting('synchronous_commit')").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := setting(func(q store.Querier) error { _, err := c.st.Release(ctx, q, "x", 1, false); return err }); v != "off" {
		t.Fatalf("synchronous_commit after Release = %q, want off", v)
	}
	if v := setting(func(q store.Querier) error {
		_, err := c.st.Acquire(ctx, q, store.AcquireArgs{Name: "x", Owner: "o", TTL: time.Second})
		return err
	}); v != "on" {
		t.Fatalf("synchronous_commit after Acquire = %q, want on", v)
	}
}
