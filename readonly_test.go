package pglease

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pglease/pglease/internal/pgtest"
	"github.com/pglease/pglease/internal/store"
)

// Get and List never create anything: not the schema, the sequence or the
// table, with or without auto-migration.
func TestReadsOnMissingTableChangeNothing(t *testing.T) {
	ctx := testCtx(t)
	missing := fmt.Sprintf("ro_missing_%d", time.Now().UnixNano()) // a schema that does not exist
	t.Cleanup(func() { pgtest.Exec(t, `DROP SCHEMA IF EXISTS `+pgx.Identifier{missing}.Sanitize()+` CASCADE`) })
	for _, table := range []string{missing + ".leases", pgtest.Schema(t) + ".leases"} {
		for _, noMigrate := range []bool{false, true} {
			c := testClient(t, Config{Table: table, DisableAutoMigrate: noMigrate})
			infos, err := c.list(ctx)
			if err != nil || infos == nil || len(infos) != 0 {
				t.Fatalf("%s (DisableAutoMigrate %v): List = %#v, %v; want an empty slice", table, noMigrate, infos, err)
			}
			if _, err := c.Get(ctx, "x"); !errors.Is(err, ErrNoLease) {
				t.Fatalf("%s (DisableAutoMigrate %v): Get = %v, want ErrNoLease", table, noMigrate, err)
			}
			if pgtest.RelationExists(t, c.st.Names.QualifiedTable()) || pgtest.RelationExists(t, c.st.Names.QualifiedSeq()) {
				t.Fatalf("%s (DisableAutoMigrate %v): a read created the table or its sequence", table, noMigrate)
			}
		}
	}
	var n int
	pgtest.QueryRow(t, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, []any{missing}, &n)
	if n != 0 {
		t.Fatalf("a read created the schema %s", missing)
	}
}

// ForceRelease, RequestStepDown and Cleanup act on rows that are there: on
// a table (or schema) that does not exist they return ErrNoTable, naming
// the table, and create nothing, with or without auto-migration; also
// when the table is dropped after the client used it.
func TestAdminCallsOnMissingTableCreateNothing(t *testing.T) {
	ctx := testCtx(t)
	missing := fmt.Sprintf("admin_missing_%d", time.Now().UnixNano()) // a schema that does not exist
	t.Cleanup(func() { pgtest.Exec(t, `DROP SCHEMA IF EXISTS `+pgx.Identifier{missing}.Sanitize()+` CASCADE`) })
	check := func(c *Client, what string) {
		t.Helper()
		name := c.st.Names.QualifiedTable()
		_, err := c.forceRelease(ctx, "x")
		errs := map[string]error{"ForceRelease": err, "RequestStepDown": c.RequestStepDown(ctx, "x")}
		n, err := c.cleanup(ctx)
		if n != 0 {
			t.Errorf("%s: Cleanup = %d", what, n)
		}
		errs["Cleanup"] = err
		for call, err := range errs {
			if !errors.Is(err, ErrNoTable) || errors.Is(err, ErrNoLease) || !strings.Contains(err.Error(), name+" does not exist") {
				t.Errorf("%s: %s = %v; want ErrNoTable naming %s", what, call, err, name)
			}
		}
		if pgtest.RelationExists(t, name) || pgtest.RelationExists(t, c.st.Names.QualifiedSeq()) || pgtest.RelationExists(t, c.st.Names.QualifiedWaiters()) {
			t.Fatalf("%s: an administrative call created the table, its sequence or its waiters table", what)
		}
	}
	for _, table := range []string{missing + ".leases", pgtest.Schema(t) + ".leases"} {
		for _, noMigrate := range []bool{false, true} {
			check(testClient(t, Config{Table: table, DisableAutoMigrate: noMigrate}), fmt.Sprintf("%s (DisableAutoMigrate %v)", table, noMigrate))
		}
	}
	var n int
	pgtest.QueryRow(t, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, []any{missing}, &n)
	if n != 0 {
		t.Fatalf("an administrative call created the schema %s", missing)
	}

	// A table the client had used, then dropped.
	c := testClient(t, Config{Table: pgtest.Schema(t) + ".dropped"})
	l, err := c.TryAcquire(ctx, "x", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// The acquisition started the client's dedicated session, which checks
	// the table as it connects (and, once an administrative call below
	// found the table gone, would migrate it anew, as a client's next call
	// does): the table is dropped once the session is up.
	pgtest.WaitFor(t, patience, "the client's session to hold its bell", func() bool { return belled(c) })
	pgtest.Exec(t, `DROP TABLE `+c.st.Names.QualifiedTable()+`, `+c.st.Names.QualifiedWaiters()+`; DROP SEQUENCE `+c.st.Names.QualifiedSeq())
	check(c, "after DROP TABLE")
	_ = l.Release(ctx)

	// The table there: an unknown name is ErrNoLease, as it was.
	if _, err := c.forceRelease(ctx, "x"); !errors.Is(err, ErrNoTable) {
		t.Fatalf("ForceRelease after DROP TABLE and a release: %v, want ErrNoTable", err)
	}
	if err := c.migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.forceRelease(ctx, "x"); !errors.Is(err, ErrNoLease) || errors.Is(err, ErrNoTable) {
		t.Fatalf("ForceRelease of a free name: %v, want ErrNoLease", err)
	}
}

// A role with only USAGE on the schema and SELECT on the table can read.
func TestReadsNeedOnlySelect(t *testing.T) {
	ctx := testCtx(t)
	schema := pgtest.Schema(t)
	table := schema + ".leases"
	owner := testClient(t, Config{Table: table})
	l, err := owner.TryAcquire(ctx, "held", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)

	role := fmt.Sprintf("pglease_ro_%d", time.Now().UnixNano())
	r := pgx.Identifier{role}.Sanitize()
	pgtest.Exec(t, `CREATE ROLE `+r+` LOGIN`)
	t.Cleanup(func() { pgtest.Exec(t, `DROP OWNED BY `+r+`; DROP ROLE `+r) })
	pgtest.Exec(t, `GRANT USAGE ON SCHEMA `+pgx.Identifier{schema}.Sanitize()+` TO `+r)
	pgtest.Exec(t, `GRANT SELECT ON `+pgx.Identifier{schema, "leases"}.Sanitize()+` TO `+r)
	u, _ := url.Parse(pgtest.DSN(t))
	u.User = url.User(role)

	for _, noMigrate := range []bool{false, true} {
		reader, err := Open(ctx, u.String(), Config{Table: table, DisableAutoMigrate: noMigrate})
		if err != nil {
			t.Fatalf("Open as %s: %v", role, err)
		}
		defer reader.Close()
		infos, err := reader.list(ctx)
		if err != nil || len(infos) != 1 || infos[0].Name != "held" || infos[0].Token != l.Token() || infos[0].Remaining <= 0 {
			t.Fatalf("DisableAutoMigrate %v: List as a SELECT-only role = %+v, %v", noMigrate, infos, err)
		}
		in, err := reader.Get(ctx, "held")
		if err != nil || in.Token != l.Token() || in.Owner != owner.Owner() {
			t.Fatalf("DisableAutoMigrate %v: Get as a SELECT-only role = %+v, %v", noMigrate, in, err)
		}
		if _, err := reader.Get(ctx, "free"); !errors.Is(err, ErrNoLease) {
			t.Fatalf("DisableAutoMigrate %v: Get of a free name: %v, want ErrNoLease", noMigrate, err)
		}
	}
}

// A table that Migrate would upgrade is read as it is, and left as it is; a
// table of a newer version or of another shape is refused, untouched.
func TestReadsCheckTheTableWithoutChangingIt(t *testing.T) {
	ctx := testCtx(t)
	columns := func(schema string) int {
		var n int
		pgtest.QueryRow(t, `SELECT count(*) FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'leases'`, []any{schema}, &n)
		return n
	}

	// Schema version 1: no session_server column (nor those of versions
	// 4 and 10), and a token sequence behind the table.
	schema := pgtest.Schema(t)
	owner := testClient(t, Config{Table: schema + ".leases"})
	l, err := owner.TryAcquire(ctx, "old", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	_ = owner.Close() // releases "old"
	tbl := owner.st.Names.QualifiedTable()
	rows(t, owner).Insert("old", "v1", l.Token()+100, time.Minute, "")
	pgtest.Exec(t, `ALTER TABLE `+tbl+` DROP COLUMN session_server, DROP COLUMN semaphore, DROP COLUMN slots, DROP COLUMN stepdown_at, DROP COLUMN kind, DROP COLUMN weight`)
	pgtest.Exec(t, `COMMENT ON TABLE `+tbl+` IS 'pglease lease table, schema version 1'`)
	c := testClient(t, Config{Table: schema + ".leases"})
	if infos, err := c.list(ctx); err != nil || len(infos) != 1 || infos[0].Owner != "v1" {
		t.Fatalf("List on a version-1 table: %+v, %v", infos, err)
	}
	if in, err := c.Get(ctx, "old"); err != nil || in.Token != l.Token()+100 {
		t.Fatalf("Get on a version-1 table: %+v, %v", in, err)
	}
	var comment string
	var last int64
	pgtest.QueryRow(t, `SELECT obj_description($1::regclass, 'pg_class'), coalesce(pg_sequence_last_value($2::regclass), 0)`,
		[]any{tbl, owner.st.Names.QualifiedSeq()}, &comment, &last)
	if n := columns(schema); n != 10 || !strings.Contains(comment, "version 1") || last != l.Token() {
		t.Fatalf("reads changed the version-1 table: %d columns, comment %q, sequence at %d (want %d)", n, comment, last, l.Token())
	}

	// A newer version.
	pgtest.Exec(t, fmt.Sprintf(`COMMENT ON TABLE %s IS 'pglease lease table, schema version %d'`, tbl, store.SchemaVersion+1))
	c = testClient(t, Config{Table: schema + ".leases"})
	if _, err := c.list(ctx); !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("List on a newer table: %v, want ErrSchema", err)
	}

	// Another shape, without a sequence beside it.
	schema = pgtest.Schema(t)
	pgtest.Exec(t, `CREATE TABLE `+pgx.Identifier{schema, "leases"}.Sanitize()+` (name text PRIMARY KEY, owner text)`)
	c = testClient(t, Config{Table: schema + ".leases"})
	if _, err := c.list(ctx); !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("List on a foreign table: %v, want ErrSchema", err)
	}
	if _, err := c.Get(ctx, "x"); !errors.Is(err, ErrSchema) {
		t.Fatalf("Get on a foreign table: %v, want ErrSchema", err)
	}
	if n := columns(schema); n != 2 || pgtest.RelationExists(t, c.st.Names.QualifiedSeq()) {
		t.Fatalf("reads changed the foreign table: %d columns, sequence created: %v", n, pgtest.RelationExists(t, c.st.Names.QualifiedSeq()))
	}
}

// A table dropped after a client checked it is read as no table: no rows,
// no error.
func TestReadsAfterTableDropped(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{Table: pgtest.Schema(t) + ".leases", DisableAutoMigrate: true})
	owner := testClient(t, Config{Table: c.cfg.Table})
	if err := owner.migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if infos, err := c.list(ctx); err != nil || len(infos) != 0 {
		t.Fatalf("List = %v, %v", infos, err)
	}
	pgtest.Exec(t, `DROP TABLE `+c.st.Names.QualifiedTable())
	infos, err := c.list(ctx)
	if err != nil || infos == nil || len(infos) != 0 {
		t.Fatalf("List after DROP TABLE = %#v, %v; want an empty slice", infos, err)
	}
	if _, err := c.Get(ctx, "x"); !errors.Is(err, ErrNoLease) {
		t.Fatalf("Get after DROP TABLE = %v, want ErrNoLease", err)
	}
}
