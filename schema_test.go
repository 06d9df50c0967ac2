package pglease

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/pgtest"
)

func TestConcurrentMigrateCreatesOnce(t *testing.T) {
	ctx := testCtx(t)
	table := fmt.Sprintf("new_schema_%d.leases", time.Now().UnixNano()) // a schema that does not exist yet
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := Open(ctx, pgtest.DSN(t), Config{Table: table})
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			errs <- c.Migrate(ctx)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate: %v", err)
		}
	}
	schema := table[:strings.Index(table, ".")]
	t.Cleanup(func() { execSQL(t, `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`) })
	var n int
	query(t, `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind IN ('r','S')`, []any{schema}, &n)
	if n != 2 {
		t.Fatalf("%d tables/sequences in %s, want 2", n, schema)
	}
}

func TestRoleWithoutCreateWorksOnExistingTable(t *testing.T) {
	ctx := testCtx(t)
	schema := pgtest.Schema(t)
	owner := testClient(t, Config{Table: schema + ".leases"})
	if err := owner.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	role := schema + "_app"
	r := pgx.Identifier{role}.Sanitize()
	s := pgx.Identifier{schema}.Sanitize()
	execSQL(t, `CREATE ROLE `+r+` LOGIN`)
	t.Cleanup(func() { execSQL(t, `DROP OWNED BY `+r+`; DROP ROLE `+r) })
	execSQL(t, `GRANT USAGE ON SCHEMA `+s+` TO `+r)
	execSQL(t, `GRANT SELECT, INSERT, UPDATE, DELETE ON `+s+`.leases TO `+r)
	execSQL(t, `GRANT USAGE ON SEQUENCE `+s+`.leases_token_seq TO `+r)
	execSQL(t, `REVOKE CREATE ON SCHEMA public FROM PUBLIC`)

	u, _ := url.Parse(pgtest.DSN(t))
	u.User = url.User(role)
	app, err := Open(ctx, u.String(), Config{Table: schema + ".leases"})
	if err != nil {
		t.Fatalf("Open as %s: %v", role, err)
	}
	defer app.Close()
	l, err := app.TryAcquire(ctx, "minimal-grants")
	if err != nil {
		t.Fatalf("TryAcquire as a role without CREATE: %v", err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Without the table, the same role gets a clear error.
	bad, err := Open(ctx, u.String(), Config{Table: schema + ".other"})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	_, err = bad.TryAcquire(ctx, "x")
	if err == nil || !strings.Contains(err.Error(), "privilege") {
		t.Fatalf("missing table without CREATE rights: %v", err)
	}
}

func TestExistingTableOfAnotherShapeIsReportedAndUntouched(t *testing.T) {
	ctx := testCtx(t)
	schema := pgtest.Schema(t)
	execSQL(t, `CREATE TABLE `+pgx.Identifier{schema, "leases"}.Sanitize()+` (name text PRIMARY KEY, owner text)`)
	execSQL(t, `CREATE SEQUENCE `+pgx.Identifier{schema, "leases_token_seq"}.Sanitize())
	c := testClient(t, Config{Table: schema + ".leases"})
	_, err := c.TryAcquire(ctx, "x")
	if !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), `"owner"`) || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("TryAcquire on a foreign table: %v", err)
	}
	var cols int
	query(t, `SELECT count(*) FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'leases'`, []any{schema}, &cols)
	if cols != 2 {
		t.Fatalf("foreign table was altered: %d columns", cols)
	}
}

func TestDDLIsExportedAndVersioned(t *testing.T) {
	ddl, err := DDL("ops.locks")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`CREATE SCHEMA IF NOT EXISTS "ops"`, `CREATE TABLE IF NOT EXISTS "ops"."locks"`, `"ops"."locks_token_seq"`, "schema version 2"} {
		if !strings.Contains(ddl, want) {
			t.Errorf("DDL lacks %q:\n%s", want, ddl)
		}
	}
	// The DDL runs as is, twice, and the client accepts the result.
	schema := pgtest.Schema(t)
	ddl, _ = DDL(schema + ".mig")
	execSQL(t, ddl)
	execSQL(t, ddl)
	c := testClient(t, Config{Table: schema + ".mig", DisableAutoMigrate: true})
	l, err := c.TryAcquire(testCtx(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(context.Background())
}

func TestInvalidInputIsRejectedBeforeAnythingIsSent(t *testing.T) {
	ctx := testCtx(t)
	for _, table := range []string{"Leases", `x"; DROP TABLE y; --`, "a.b.c", "ünïcode", "1abc", strings.Repeat("a", 64), "a.", ".a"} {
		if _, err := Open(ctx, "postgres://nowhere.invalid:1/db", Config{Table: table}); !errors.Is(err, ErrInvalidIdentifier) {
			t.Errorf("table %q: %v, want ErrInvalidIdentifier", table, err)
		}
		if _, err := DDL(table); !errors.Is(err, ErrInvalidIdentifier) {
			t.Errorf("DDL(%q): %v", table, err)
		}
	}
	c := testClient(t, Config{})
	for _, name := range []string{"", strings.Repeat("n", 256), "bad\xff", "nul\x00byte"} {
		if _, err := c.TryAcquire(ctx, name); !errors.Is(err, ErrInvalidName) {
			t.Errorf("name %q: %v, want ErrInvalidName", name, err)
		}
	}
	for _, ttl := range []time.Duration{0, -time.Second, 500 * time.Millisecond, 200 * 365 * 24 * time.Hour} {
		if _, err := c.TryAcquire(ctx, "ok", WithTTL(ttl)); !errors.Is(err, ErrInvalidTTL) {
			t.Errorf("ttl %s: %v, want ErrInvalidTTL", ttl, err)
		}
	}
	if _, err := Open(ctx, "postgres://x", Config{TTL: -1}); !errors.Is(err, ErrInvalidTTL) {
		t.Errorf("Config.TTL -1: %v", err)
	}
	if _, err := c.TryAcquire(ctx, "ok", WithTTL(2*time.Second), WithMinHold(3*time.Second)); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("min hold above TTL: %v", err)
	}
	// None of it created a row.
	if infos, err := c.List(ctx); err != nil || len(infos) != 0 {
		t.Fatalf("List = %v, %v; want no rows", infos, err)
	}
	if err := CheckName(strings.Repeat("é", 127)); err != nil {
		t.Errorf("254-byte name rejected: %v", err)
	}
}

func TestOpenErrorsAreClearAndRedacted(t *testing.T) {
	ctx := testCtx(t)
	_, err := Open(ctx, "postgres://user:s3cret-pw@127.0.0.1:1/db?connect_timeout=2", Config{})
	if err == nil || strings.Contains(err.Error(), "s3cret-pw") || !IsRetryable(errors.Unwrap(err)) && !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("unreachable DSN: %v", err)
	}
	_, err = Open(ctx, "postgres://user:s3cret-pw@127.0.0.1:notaport/db", Config{})
	if err == nil || strings.Contains(err.Error(), "s3cret-pw") {
		t.Fatalf("malformed DSN: %v", err)
	}
}

func execSQL(t testing.TB, sql string) {
	t.Helper()
	query(t, sql, nil)
}

func query(t testing.TB, sql string, args []any, dest ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if len(dest) == 0 {
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return
	}
	if err := conn.QueryRow(ctx, sql, args...).Scan(dest...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}
