package pglease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pglease/pglease/internal/pgtest"
	"github.com/pglease/pglease/internal/store"
)

// The exported DDL of this version, applied by a user's migration tool
// over a table that the exported DDL of any earlier version created (the
// documented path with DisableAutoMigrate), leaves a complete table of
// this version: the shape check passes, the old lease is still there, and
// contended acquisitions, exclusive and shared, queue and are handed over.
// (The DDL of version 8 once stamped a version-7 table version 8 without
// the waiters table's "shared" column, and every contended acquisition
// failed with "column w.shared does not exist".)
//
// Migrate does the same (a version-3 table could lack the waiters table's
// "notified_at", which no migration added).
func TestExportedDDLUpgradesEveryEarlierVersion(t *testing.T) {
	for _, v := range pgtest.OldSchemaVersions {
		for _, how := range []string{"DDL", "Migrate"} {
			t.Run(how+" version "+v, func(t *testing.T) { upgradeFrom(t, v, how) })
		}
	}
}

// upgradeFrom upgrades a table of schema version v (see
// pgtest.CreateOldTable) with the exported DDL or with Migrate, and checks
// the result.
func upgradeFrom(t *testing.T, v, how string) {
	ctx := testCtx(t)
	schema := pgtest.Schema(t)
	pgtest.CreateOldTable(t, schema, v)
	tbl := pgx.Identifier{schema, "leases"}.Sanitize()
	pgtest.Exec(t, `INSERT INTO `+tbl+` (name, owner, token, acquired_at, renewed_at, expires_at, hold_until, ttl)
		VALUES ('kept', 'old', 7, now(), now(), now() + interval '1 hour', now(), interval '1 hour')`)
	pgtest.Exec(t, `SELECT setval($1::regclass, 7)`, pgx.Identifier{schema, "leases_token_seq"}.Sanitize())

	if how == "Migrate" {
		if err := testClient(t, Config{Table: schema + ".leases"}).migrate(ctx); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	} else {
		ddl, err := schemaDDL(schema + ".leases")
		if err != nil {
			t.Fatal(err)
		}
		pgtest.Exec(t, ddl)
	}
	var comment string
	pgtest.QueryRow(t, `SELECT obj_description($1::regclass, 'pg_class')`, []any{tbl}, &comment)
	if want := fmt.Sprintf("schema version %d", store.SchemaVersion); !strings.HasSuffix(comment, want) {
		t.Fatalf("table comment %q after the %s, want %q", comment, how, want)
	}
	checkContended(ctx, t, schema+".leases", 7)
}

// checkContended checks, with clients that never migrate (so that the
// shape check decides whether they may use it), that the table is
// complete: the lease "kept" of token kept is there (unless kept is 0),
// tokens go on above it, an exclusive waiter queues and is handed the
// lease at its release, a shared waiter queues behind an exclusive holder
// and is handed a shared lease, which another shared holder then joins.
func checkContended(ctx context.Context, t *testing.T, table string, kept int64) {
	t.Helper()
	a := testClient(t, Config{Table: table, DisableAutoMigrate: true})
	b := testClient(t, Config{Table: table, DisableAutoMigrate: true})
	if kept > 0 {
		if in, err := a.Get(ctx, "kept"); err != nil || in.Token != kept {
			t.Fatalf("the lease of before the upgrade: %+v, %v", in, err)
		}
	}
	first, err := a.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	if first.Token() <= kept {
		t.Fatalf("token %d, not above the table's %d", first.Token(), kept)
	}
	second := queue(ctx, t, b, "job", false)
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next := pgtest.Receive(t, second, "the queued exclusive waiter's lease")
	if next.err != nil {
		t.Fatalf("the queued exclusive waiter: %v", next.err)
	}
	reader := queue(ctx, t, a, "job", true)
	if err := next.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	got := pgtest.Receive(t, reader, "the queued shared waiter's lease")
	if got.err != nil || !isShared(got.l) {
		t.Fatalf("the queued shared waiter: %+v, %v", got.l, got.err)
	}
	other, err := b.TryAcquire(ctx, "job", WithShared())
	if err != nil {
		t.Fatalf("a second shared holder: %v", err)
	}
	_ = other.Release(ctx)
	_ = got.l.Release(ctx)
}

type queuedLease struct {
	l   *Lease
	err error
}

// queue starts c's Acquire of name (shared or not) and returns once it
// waits in the table's queue, or fails the test when the Acquire ends
// first.
func queue(ctx context.Context, t *testing.T, c *Client, name string, shared bool) <-chan queuedLease {
	t.Helper()
	out := make(chan queuedLease, 1)
	var opts []Option
	if shared {
		opts = append(opts, WithShared())
	}
	go func() {
		l, err := c.Acquire(ctx, name, opts...)
		out <- queuedLease{l, err}
	}()
	var queued bool
	pgtest.WaitFor(t, patience, "the Acquire to queue", func() bool {
		if len(out) > 0 {
			return true
		}
		// (Read as a document: a table without the column says so in
		// the Acquire's error, not in this query's.)
		queued = pgtest.Value[bool](t, `SELECT EXISTS (SELECT FROM `+c.st.Names.QualifiedWaiters()+` AS w
			WHERE w.name = $1 AND coalesce((to_jsonb(w) ->> 'shared')::boolean, false) = $2)`, name, shared)
		return queued
	})
	if !queued {
		r := <-out
		t.Fatalf("the Acquire of %s (shared: %v) ended without queueing: %v", name, shared, r.err)
	}
	return out
}

// The shape check verifies every column of the lease and waiters tables,
// the token sequence and the functions, and names what is wrong: what a
// migration adds (a column, a function) is repaired by Migrate, at the
// current version too; what it does not (a column pglease never adds, a
// changed default, a cycling sequence) is refused and left as it is.
func TestShapeCheckNamesWhatIsMissing(t *testing.T) {
	for _, tc := range []struct {
		name, sql string // sql: {{t}} the table, {{w}} the waiters table, {{s}} the sequence, {{f}} the shared function
		want      []string
		repaired  bool
	}{
		{"waiters' shared", `ALTER TABLE {{w}} DROP COLUMN shared`, []string{`"shared"`, "lacks", "pglease migrate"}, true},
		{"waiters' notified_at", `ALTER TABLE {{w}} DROP COLUMN notified_at`, []string{`"notified_at"`, "pglease migrate"}, true},
		{"lease table's stepdown_at", `ALTER TABLE {{t}} DROP COLUMN stepdown_at, DROP COLUMN slots`, []string{`"slots", "stepdown_at"`, "pglease migrate"}, true},
		{"shared function", `DROP FUNCTION {{f}}`, []string{"leases_acquire_shared", "pglease migrate"}, true},
		{"sequence", `DROP SEQUENCE {{s}}`, []string{"leases_token_seq", "pglease migrate"}, true},
		{"waiters' default", `ALTER TABLE {{w}} ALTER COLUMN shared DROP DEFAULT`, []string{`"shared"`, "DEFAULT false", "nothing was changed"}, false},
		{"waiters' key", `ALTER TABLE {{w}} DROP CONSTRAINT leases_waiters_pkey`, []string{`"name"`, "primary key", "nothing was changed"}, false},
		{"lease table's ttl", `ALTER TABLE {{t}} DROP COLUMN ttl`, []string{`"ttl"`, "nothing was changed"}, false},
		{"lease table's token type", `ALTER TABLE {{t}} ALTER COLUMN token TYPE numeric`, []string{`"token"`, "numeric", "bigint NOT NULL"}, false},
		{"cycling sequence", `ALTER SEQUENCE {{s}} CYCLE`, []string{"leases_token_seq", "cycles: true"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			table := pgtest.Schema(t) + ".leases"
			owner := testClient(t, Config{Table: table})
			if err := owner.migrate(ctx); err != nil {
				t.Fatal(err)
			}
			n := owner.st.Names
			pgtest.Exec(t, strings.NewReplacer("{{t}}", n.QualifiedTable(), "{{w}}", n.QualifiedWaiters(),
				"{{s}}", n.QualifiedSeq(), "{{f}}", n.SharedProcedure()).Replace(tc.sql))
			strict := testClient(t, Config{Table: table, DisableAutoMigrate: true})
			_, err := strict.TryAcquire(ctx, "x")
			if !errors.Is(err, ErrSchema) {
				t.Fatalf("TryAcquire: %v, want ErrSchema", err)
			}
			t.Log(err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q: %v", w, err)
				}
			}
			err = testClient(t, Config{Table: table}).migrate(ctx)
			if !tc.repaired {
				if !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "nothing was changed") {
					t.Fatalf("Migrate: %v, want ErrSchema saying nothing was changed", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Migrate: %v", err)
			}
			checkContended(ctx, t, table, 0)
		})
	}
}

// downgradeToVersion7 makes c's table what schema version 7 had: no
// shared acquisition function, no "shared" column in the waiters table.
func downgradeToVersion7(t *testing.T, c *Client) {
	n := c.st.Names
	pgtest.Exec(t, `DROP FUNCTION `+n.SharedProcedure())
	pgtest.Exec(t, `ALTER TABLE `+n.QualifiedWaiters()+` DROP COLUMN shared`)
	pgtest.Exec(t, `COMMENT ON TABLE `+n.QualifiedTable()+` IS 'pglease lease table, schema version 7'`)
}

// openReader begins, on a connection of its own, a transaction that reads
// the lease table and its waiters table and stays open, as a report or
// pg_dump does; it returns the transaction and its backend's pid.
func openReader(ctx context.Context, t *testing.T, n store.Names) (pgx.Tx, uint32) {
	t.Helper()
	conn := pgtest.Conn(t)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	for _, rel := range []string{n.QualifiedTable(), n.QualifiedWaiters()} {
		if _, err := tx.Exec(ctx, `SELECT count(*) FROM `+rel); err != nil {
			t.Fatal(err)
		}
	}
	return tx, conn.PgConn().PID()
}

// An automatic migration behind an open reader of the tables (a report, a
// pg_dump) never stalls the other statements on them: it takes its locks
// with a short lock_timeout and tries again. A holder with a TTL of 3 s
// keeps its lease while the reader stays open for 6 s, the migration
// meanwhile gives up on its lock (and says who holds it), and it completes
// once the reader has ended. (Its ALTER TABLE once queued for its lock
// behind the reader, every renewal queued behind it, and the holder lost
// its lease.)
func TestMigrationBehindAReaderNeverStallsRenewals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	table := pgtest.Schema(t) + ".leases"
	holder := testClient(t, Config{Table: table})
	l, err := holder.TryAcquire(ctx, "job", WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	downgradeToVersion7(t, holder)

	const open = 6 * time.Second
	reader, pid := openReader(ctx, t, holder.st.Names)
	opened := time.Now()
	logs := make(chan slog.Record, 100)
	migrator := testClient(t, Config{Table: table, Logger: slog.New(recordHandler{logs})})
	done := make(chan error, 1)
	go func() { done <- migrator.migrate(ctx) }()

	timer := time.NewTimer(open)
	defer timer.Stop()
	select {
	case <-l.Context().Done():
		t.Fatalf("the holder lost its lease %s after the reader began (TTL 3 s): %v", time.Since(opened).Round(time.Millisecond), context.Cause(l.Context()))
	case err := <-done:
		t.Fatalf("the migration ended while the reader held its lock: %v", err)
	case <-timer.C:
	}
	var blocked []string
	for len(logs) > 0 {
		r := <-logs
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "blockers" {
				blocked = append(blocked, a.Value.String())
			}
			return true
		})
	}
	if len(blocked) == 0 || !strings.Contains(strings.Join(blocked, " "), fmt.Sprintf("pid %d ", pid)) {
		t.Fatalf("the migration's warnings while the reader (pid %d) was open: %q, want it to give up on its lock and name the reader", pid, blocked)
	}
	t.Logf("the migration gave up on its lock %d times in %s", len(blocked), open)

	if err := reader.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pgtest.Receive(t, done, "the migration after the reader ended"); err != nil {
		t.Fatalf("Migrate after the reader ended: %v", err)
	}
	var comment string
	pgtest.QueryRow(t, `SELECT obj_description($1::regclass, 'pg_class')`, []any{holder.st.Names.QualifiedTable()}, &comment)
	if !strings.HasSuffix(comment, fmt.Sprintf("schema version %d", store.SchemaVersion)) {
		t.Fatalf("table comment %q after the migration", comment)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("the holder's lease after the migration: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	checkContended(ctx, t, table, 0)
}

// A migration that cannot take its locks before its context ends says
// so: which sessions hold them (here the reader's pid) and what to do,
// and its error matches the context's.
func TestBlockedMigrationSaysWhoBlocksIt(t *testing.T) {
	ctx := testCtx(t)
	schema := pgtest.Schema(t)
	pgtest.CreateOldTable(t, schema, "7")
	c := testClient(t, Config{Table: schema + ".leases"})
	_, pid := openReader(ctx, t, c.st.Names)
	mctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err := c.migrate(mctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Migrate behind an open reader: %v, want the context's deadline", err)
	}
	t.Log(err)
	for _, w := range []string{fmt.Sprintf("pid %d ", pid), "could not take its locks", "pglease migrate"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the error does not say %q: %v", w, err)
		}
	}
}

// The exported DDL refuses, changing nothing, a table of a newer schema
// version (whose functions it would replace with older ones) and a table
// that is not pglease's.
func TestExportedDDLRefusesNewerAndForeignTables(t *testing.T) {
	ctx := testCtx(t)
	conn := pgtest.Conn(t)

	schema := pgtest.Schema(t)
	c := testClient(t, Config{Table: schema + ".leases"})
	if err := c.migrate(ctx); err != nil {
		t.Fatal(err)
	}
	n := c.st.Names
	pgtest.Exec(t, `ALTER TABLE `+n.QualifiedWaiters()+` DROP COLUMN shared`)
	newer := fmt.Sprintf("pglease lease table, schema version %d", store.SchemaVersion+1)
	pgtest.Exec(t, `COMMENT ON TABLE `+n.QualifiedTable()+` IS '`+newer+`'`)
	ddl, err := schemaDDL(schema + ".leases")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, ddl); err == nil || !strings.Contains(err.Error(), "newer than this DDL") {
		t.Fatalf("the DDL over a table of schema version %d: %v, want it refused", store.SchemaVersion+1, err)
	}
	var comment string
	var shared bool
	pgtest.QueryRow(t, `SELECT obj_description($1::regclass, 'pg_class'),
		EXISTS (SELECT FROM pg_attribute WHERE attrelid = $2::regclass AND attname = 'shared')`,
		[]any{n.QualifiedTable(), n.QualifiedWaiters()}, &comment, &shared)
	if comment != newer || shared {
		t.Fatalf("the refused DDL changed the table: comment %q, waiters' shared column added: %v", comment, shared)
	}

	foreign := pgtest.Schema(t)
	pgtest.Exec(t, `CREATE TABLE `+pgx.Identifier{foreign, "leases"}.Sanitize()+` (name text PRIMARY KEY, owner text)`)
	ddl, _ = schemaDDL(foreign + ".leases")
	if _, err := conn.Exec(ctx, ddl); err == nil || !strings.Contains(err.Error(), "not a pglease lease table") {
		t.Fatalf("the DDL over another table: %v, want it refused", err)
	}
	if cols := pgtest.Value[int64](t, `SELECT count(*) FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'leases'`, foreign); cols != 2 {
		t.Fatalf("the refused DDL changed the other table: %d columns", cols)
	}
}
