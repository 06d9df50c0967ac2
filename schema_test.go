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
	"github.com/pglease/pglease/internal/store"
)

func TestRoleWithoutCreateWorksOnExistingTable(t *testing.T) {
	ctx := testCtx(t)
	schema := pgtest.Schema(t)
	owner := testClient(t, Config{Table: schema + ".leases"})
	if err := owner.migrate(ctx); err != nil {
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
	ddl, err := schemaDDL("ops.locks")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`CREATE SCHEMA IF NOT EXISTS "ops"`, `CREATE TABLE IF NOT EXISTS "ops"."locks"`, `"ops"."locks_token_seq"`, `CREATE UNLOGGED TABLE IF NOT EXISTS "ops"."locks_waiters"`, `CREATE INDEX IF NOT EXISTS "locks_semaphore_idx" ON "ops"."locks"`, fmt.Sprintf("schema version %d", store.SchemaVersion)} {
		if !strings.Contains(ddl, want) {
			t.Errorf("DDL lacks %q:\n%s", want, ddl)
		}
	}
	// The DDL runs as is, twice, and the client accepts the result.
	schema := pgtest.Schema(t)
	ddl, _ = schemaDDL(schema + ".mig")
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
			if _, err := strict.TryAcquire(ctx, "x"); !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "admin.Migrate") {
				t.Fatalf("%s: a client that may not migrate: %v, want ErrSchema naming admin.Migrate", tc.name, err)
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
	if err := owner.migrate(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := owner.TryAcquire(ctx, "kept", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	tbl := owner.st.Names.QualifiedTable()
	pgtest.Exec(t, `DROP INDEX `+pgx.Identifier{schema, owner.st.Names.SemaphoreIndex}.Sanitize())
	pgtest.Exec(t, `ALTER TABLE `+tbl+` DROP COLUMN semaphore, DROP COLUMN slots, DROP COLUMN stepdown_at, DROP COLUMN kind, DROP COLUMN weight`)
	pgtest.Exec(t, `COMMENT ON TABLE `+tbl+` IS 'pglease lease table, schema version 3'`)

	old := testClient(t, Config{Table: schema + ".leases", DisableAutoMigrate: true})
	if _, err := old.TryAcquire(ctx, "x"); !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "migrate") {
		t.Fatalf("TryAcquire on a version-3 table without migrating: %v, want ErrSchema saying to migrate", err)
	}
	c := testClient(t, Config{Table: schema + ".leases"})
	if err := c.migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var comment string
	var idx bool
	pgtest.QueryRow(t, `SELECT obj_description($1::regclass, 'pg_class'), to_regclass($2) IS NOT NULL`,
		[]any{tbl, pgx.Identifier{schema, owner.st.Names.SemaphoreIndex}.Sanitize()}, &comment, &idx)
	if !strings.Contains(comment, fmt.Sprintf("version %d", store.SchemaVersion)) || !idx {
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

// Many replicas start at once on a fresh schema, each spelling
// the table its own way: unqualified behind a search_path set with options
// or as a run-time parameter (one that starts with a schema that does not
// exist, so that the server resolves it to the next), and schema-qualified
// with the default or another search_path. Every Migrate and first
// TryAcquire succeeds, in plain and fast-failover mode, and they create one
// table. The same holds when they all find a table of schema version 2 to
// upgrade. Each round is a fresh schema and another number of clients, so
// that the race is hit whatever the order.
func TestManyClientsStartAtOnceWithMixedSpellings(t *testing.T) {
	t.Run("FreshSchema", func(t *testing.T) {
		for round := range 8 {
			n := 2 + round%7
			t.Run(fmt.Sprintf("round%d_%dclients", round, n), func(t *testing.T) { startAtOnce(t, n, nil) })
		}
	})
	t.Run("FromVersion2", func(t *testing.T) {
		for round := range 4 {
			n := 4 + round
			t.Run(fmt.Sprintf("round%d_%dclients", round, n), func(t *testing.T) { startAtOnce(t, n, downgradeToVersion2) })
		}
	})
}

// startAtOnce opens n clients of the table "leases" in a fresh schema,
// spelled in turn as the spellings below, and lets them all migrate (half
// of them through Migrate, half through their first acquisition) and
// acquire a name of their own at once.
func startAtOnce(t *testing.T, n int, prepare func(t *testing.T, schema string)) {
	ctx := testCtx(t)
	schema := pgtest.Schema(t)
	if prepare != nil {
		prepare(t, schema)
	}
	spellings := []struct {
		label  string
		table  string
		params map[string]string
	}{
		{"unqualified, options=-c search_path", "leases", map[string]string{"options": "-c search_path=" + schema}},
		{"schema-qualified", schema + ".leases", nil},
		{"unqualified, search_path=<missing schema>,<schema>", "leases", map[string]string{"search_path": "pglease_no_such_schema, " + schema}},
		{"schema-qualified, search_path=public", schema + ".leases", map[string]string{"search_path": "public"}},
	}
	clients := make([]*Client, n)
	for i := range clients {
		s := spellings[i%len(spellings)]
		c, err := Open(ctx, dsnWithParams(t, s.params), Config{Table: s.table, TTL: 10 * time.Second})
		if err != nil {
			t.Fatalf("Open (%s): %v", s.label, err)
		}
		defer c.Close()
		clients[i] = c
	}
	start := make(chan struct{})
	tokens := make([]int64, n)
	var wg sync.WaitGroup
	for i, c := range clients {
		label := spellings[i%len(spellings)].label
		var opts []Option
		if i/2%2 == 1 {
			opts = append(opts, WithFastFailover())
			label += ", fast failover"
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if i%2 == 0 {
				if err := c.migrate(ctx); err != nil {
					t.Errorf("client %d (%s): Migrate: %v", i, label, err)
					return
				}
			}
			l, err := c.TryAcquire(ctx, fmt.Sprintf("replica-%d", i), opts...)
			if err != nil {
				var he *HeldError
				if errors.As(err, &he) {
					err = fmt.Errorf("%w (holder %+v)", err, he.Holder)
				}
				t.Errorf("client %d (%s): first TryAcquire: %v", i, label, err)
				return
			}
			tokens[i] = l.Token()
		}()
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		return
	}
	seen := map[int64]int{}
	for i, tok := range tokens {
		if j, dup := seen[tok]; dup {
			t.Errorf("clients %d and %d both got token %d: not one table and sequence", j, i, tok)
		}
		seen[tok] = i
	}
	var rels int
	var public bool
	var comment string
	pgtest.QueryRow(t, `SELECT count(*) FILTER (WHERE c.relnamespace = $1::regnamespace),
		       count(*) FILTER (WHERE c.relnamespace = 'public'::regnamespace) > 0,
		       coalesce(max(obj_description(c.oid, 'pg_class')) FILTER (WHERE c.relname = 'leases'), '')
		  FROM pg_class AS c WHERE c.relname IN ('leases', 'leases_token_seq', 'leases_waiters', 'leases_semaphore_idx')`,
		[]any{schema}, &rels, &public, &comment)
	if rels != 4 || public || !strings.Contains(comment, fmt.Sprintf("schema version %d", store.SchemaVersion)) {
		t.Errorf("in %s: %d of the 4 relations, some in public: %v, table comment %q", schema, rels, public, comment)
	}
}

// downgradeToVersion2 creates schema.leases as pglease 0.1.0 left it:
// schema version 2, without the waiters table (version 3), the semaphore
// and step-down columns and the semaphore index (version 4).
func downgradeToVersion2(t *testing.T, schema string) {
	c := testClient(t, Config{Table: schema + ".leases"})
	if err := c.migrate(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	tbl := c.st.Names.QualifiedTable()
	pgtest.Exec(t, `DROP TABLE `+c.st.Names.QualifiedWaiters())
	pgtest.Exec(t, `DROP INDEX `+pgx.Identifier{schema, c.st.Names.SemaphoreIndex}.Sanitize())
	pgtest.Exec(t, `ALTER TABLE `+tbl+` DROP COLUMN semaphore, DROP COLUMN slots, DROP COLUMN stepdown_at, DROP COLUMN kind, DROP COLUMN weight`)
	pgtest.Exec(t, `COMMENT ON TABLE `+tbl+` IS 'pglease lease table, schema version 2'`)
}

// An unqualified table whose search_path names no existing schema has
// nowhere to be created: Migrate says so, naming the search_path and what
// to do, and creates nothing.
func TestUnqualifiedTableWithNoSchemaToCreateIn(t *testing.T) {
	ctx := testCtx(t)
	c, err := Open(ctx, dsnWithParams(t, map[string]string{"search_path": "pglease_no_such_schema"}), Config{Table: "leases"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.migrate(ctx)
	if !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "pglease_no_such_schema") || !strings.Contains(err.Error(), "SCHEMA.TABLE") {
		t.Fatalf("Migrate with no existing schema on the search_path: %v, want ErrSchema naming the search_path and what to do", err)
	}
	if pgtest.Value[bool](t, `SELECT to_regnamespace('pglease_no_such_schema') IS NOT NULL`) {
		t.Fatal("Migrate created the schema of the search_path")
	}
}
