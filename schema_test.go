package pglease

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pglease/pglease/internal/pgtest"
)

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
	pgtest.Exec(t, `CREATE ROLE `+r+` LOGIN`)
	t.Cleanup(func() { pgtest.Exec(t, `DROP OWNED BY `+r+`; DROP ROLE `+r) })
	pgtest.Exec(t, `GRANT USAGE ON SCHEMA `+s+` TO `+r)
	pgtest.Exec(t, `GRANT SELECT, INSERT, UPDATE, DELETE ON `+s+`.leases, `+s+`.leases_waiters TO `+r)
	pgtest.Exec(t, `GRANT USAGE ON SEQUENCE `+s+`.leases_token_seq TO `+r)
	pgtest.Exec(t, `REVOKE CREATE ON SCHEMA public FROM PUBLIC`)

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
	pgtest.Exec(t, `CREATE TABLE `+pgx.Identifier{schema, "leases"}.Sanitize()+` (name text PRIMARY KEY, owner text)`)
	pgtest.Exec(t, `CREATE SEQUENCE `+pgx.Identifier{schema, "leases_token_seq"}.Sanitize())
	c := testClient(t, Config{Table: schema + ".leases"})
	_, err := c.TryAcquire(ctx, "x")
	if !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), `"owner"`) || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("TryAcquire on a foreign table: %v", err)
	}
	var cols int
	pgtest.QueryRow(t, `SELECT count(*) FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'leases'`, []any{schema}, &cols)
	if cols != 2 {
		t.Fatalf("foreign table was altered: %d columns", cols)
	}
}

func TestDDLIsExportedAndVersioned(t *testing.T) {
	ddl, err := DDL("ops.locks")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`CREATE SCHEMA IF NOT EXISTS "ops"`, `CREATE TABLE IF NOT EXISTS "ops"."locks"`, `"ops"."locks_token_seq"`, `CREATE UNLOGGED TABLE IF NOT EXISTS "ops"."locks_waiters"`, `CREATE INDEX IF NOT EXISTS "locks_semaphore_idx" ON "ops"."locks"`, "schema version 4"} {
		if !strings.Contains(ddl, want) {
			t.Errorf("DDL lacks %q:\n%s", want, ddl)
		}
	}
	// The DDL runs as is, twice, and the client accepts the result.
	schema := pgtest.Schema(t)
	ddl, _ = DDL(schema + ".mig")
	pgtest.Exec(t, ddl)
	pgtest.Exec(t, ddl)
	c := testClient(t, Config{Table: schema + ".mig", DisableAutoMigrate: true})
	l, err := c.TryAcquire(testCtx(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(context.Background())
}

// Tokens survive a lost or rewound sequence: Migrate creates a missing
// sequence above the table's largest token and moves one that is behind
// past it; a client that may not migrate refuses to hand out old tokens.
func TestTokenSequenceRepairedBehindTable(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	for _, name := range []string{"a", "b", "kept"} {
		l, err := c.TryAcquire(ctx, name, WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
	}
	seq := c.st.Names.QualifiedSeq()
	for _, tc := range []struct{ name, sql string }{
		{"missing", `DROP SEQUENCE ` + seq},
		{"behind", `SELECT setval('` + strings.ReplaceAll(seq, `'`, `''`) + `', 1)`},
	} {
		// Tokens of deleted rows are gone with them; the table's
		// largest token is what the repair can and must go past.
		last := rows(t, c).MaxToken()
		pgtest.Exec(t, tc.sql)
		if tc.name == "behind" {
			strict := testClient(t, Config{Table: c.cfg.Table, DisableAutoMigrate: true})
			if _, err := strict.TryAcquire(ctx, "x"); !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "Client.Migrate") {
				t.Fatalf("%s: a client that may not migrate: %v, want ErrSchema naming Client.Migrate", tc.name, err)
			}
		}
		fresh := testClient(t, Config{Table: c.cfg.Table})
		l, err := fresh.TryAcquire(ctx, "seq-"+tc.name, WithTTL(time.Minute))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if l.Token() <= last {
			t.Fatalf("sequence %s: token %d not above the table's largest %d", tc.name, l.Token(), last)
		}
		defer l.Release(ctx)
	}
}

// A table of schema version 3 (pglease before the semaphore and step-down
// columns) is refused until migrated, keeps its leases through the
// migration, and is usable afterwards.
func TestVersion3TableIsMigrated(t *testing.T) {
	ctx := testCtx(t)
	schema := pgtest.Schema(t)
	owner := testClient(t, Config{Table: schema + ".leases"})
	if err := owner.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := owner.TryAcquire(ctx, "kept", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	tbl := owner.st.Names.QualifiedTable()
	pgtest.Exec(t, `DROP INDEX `+pgx.Identifier{schema, owner.st.Names.SemaphoreIndex}.Sanitize())
	pgtest.Exec(t, `ALTER TABLE `+tbl+` DROP COLUMN semaphore, DROP COLUMN slots, DROP COLUMN stepdown_at`)
	pgtest.Exec(t, `COMMENT ON TABLE `+tbl+` IS 'pglease lease table, schema version 3'`)

	old := testClient(t, Config{Table: schema + ".leases", DisableAutoMigrate: true})
	if _, err := old.TryAcquire(ctx, "x"); !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "migrate") {
		t.Fatalf("TryAcquire on a version-3 table without migrating: %v, want ErrSchema saying to migrate", err)
	}
	c := testClient(t, Config{Table: schema + ".leases"})
	if err := c.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var comment string
	var idx bool
	pgtest.QueryRow(t, `SELECT obj_description($1::regclass, 'pg_class'), to_regclass($2) IS NOT NULL`,
		[]any{tbl, pgx.Identifier{schema, owner.st.Names.SemaphoreIndex}.Sanitize()}, &comment, &idx)
	if !strings.Contains(comment, "version 4") || !idx {
		t.Fatalf("after Migrate: comment %q, semaphore index present: %v", comment, idx)
	}
	if in, err := c.Get(ctx, "kept"); err != nil || in.Token != held.Token() {
		t.Fatalf("the lease held across the migration: %+v, %v", in, err)
	}
	if err := held.Renew(ctx); err != nil {
		t.Fatalf("renewing across the migration: %v", err)
	}
	l, err := c.TryAcquire(ctx, "new", WithSlots(2))
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
}
