package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newStore returns the store of table, failing the test on a bad name.
func newStore(t *testing.T, table string) *Store {
	t.Helper()
	s, err := New(table)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// migrated returns a store on a fresh table whose schema is in place, and
// a pool to run its statements on.
func migrated(t *testing.T) (*Store, DB) {
	t.Helper()
	s := newStore(t, pgtest.Schema(t)+".leases")
	db := Pgx(pgtest.Pool(t))
	if createdBy703758e {
		createV9Of703758e(t, s)
	}
	if err := s.EnsureSchema(testCtx(t), db); err != nil {
		t.Fatal(err)
	}
	return s, db
}

// ensureConcurrently runs EnsureSchema for each table at once, each on a
// connection of its own, and returns their errors.
func ensureConcurrently(t *testing.T, tables []string) []error {
	ctx := testCtx(t)
	errs := make([]error, len(tables))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, table := range tables {
		s := newStore(t, table)
		conn, err := pgx.Connect(ctx, pgtest.DSN(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = s.EnsureSchema(ctx, Pgx(conn))
		}()
	}
	close(start)
	wg.Wait()
	return errs
}

// newSchemaName returns the name of a schema that does not exist yet,
// dropped when the test ends.
func newSchemaName(t *testing.T) string {
	name := fmt.Sprintf("new_schema_%d", time.Now().UnixNano())
	t.Cleanup(func() { pgtest.Exec(t, `DROP SCHEMA IF EXISTS `+pgx.Identifier{name}.Sanitize()+` CASCADE`) })
	return name
}

func TestConcurrentEnsureSchemaCreatesTheTableOnce(t *testing.T) {
	schema := newSchemaName(t)
	for i, err := range ensureConcurrently(t, []string{
		schema + ".leases", schema + ".leases", schema + ".leases", schema + ".leases",
		schema + ".leases", schema + ".leases", schema + ".leases", schema + ".leases",
	}) {
		if err != nil {
			t.Errorf("EnsureSchema %d: %v", i, err)
		}
	}
	n := pgtest.Value[int](t, `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind IN ('r','S')`, schema)
	if n != 4 { // the lease table, its sequence, its waiters and incarnation tables
		t.Fatalf("%d tables and sequences in %s, want 4", n, schema)
	}
}

// Tables created at once in one new schema: CREATE SCHEMA IF NOT EXISTS
// runs under a lock per schema, not per table, so none of them fails on
// the schema's unique index (SQLSTATE 23505 on pg_namespace_nspname_index).
func TestConcurrentEnsureSchemaOfTablesInOneNewSchemaSucceeds(t *testing.T) {
	for round := range 5 {
		schema := newSchemaName(t)
		var tables []string
		for i := range 4 {
			tables = append(tables, fmt.Sprintf("%s.t%d", schema, i))
		}
		for i, err := range ensureConcurrently(t, tables) {
			if err != nil {
				t.Errorf("round %d: EnsureSchema of %s: %v", round, tables[i], err)
			}
		}
	}
}

// A role that may create tables in an existing schema, but not schemas in
// the database, can create the lease table there: CREATE SCHEMA IF NOT
// EXISTS is only sent when the schema is missing (PostgreSQL checks the
// database's CREATE privilege before it looks for the schema).
func TestEnsureSchemaInAnExistingSchemaNeedsNoDatabaseCreate(t *testing.T) {
	ctx := testCtx(t)
	schema := pgtest.Schema(t)
	role := "r_" + schema[len(schema)-20:]
	pgtest.Exec(t, "CREATE ROLE "+role+" LOGIN")
	t.Cleanup(func() { pgtest.Exec(t, "DROP SCHEMA IF EXISTS "+schema+" CASCADE; DROP ROLE "+role) })
	pgtest.Exec(t, "GRANT ALL ON SCHEMA "+schema+" TO "+role)
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.User = role
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := newStore(t, schema+".leases").EnsureSchema(ctx, Pgx(pool)); err != nil {
		t.Errorf("EnsureSchema in an existing schema the role may create in: %v", err)
	}
}

// A renewal never extends a row kept for a minimum hold after its release,
// nor revives a row that has expired.
func TestLateRenewalDoesNotExtendReleasedOrExpiredRow(t *testing.T) {
	ctx := testCtx(t)
	s, db := migrated(t)
	rows := pgtest.LeaseTable(t, pgtest.DSN(t), s.Names.Schema+"."+s.Names.Table)
	const client = "client-id"
	acquire := func(name string, minHold time.Duration) int64 {
		r, err := s.Acquire(ctx, db, AcquireArgs{Name: name, Owner: "o", TTL: 10 * time.Second, MinHold: minHold, Client: client})
		if err != nil || !r.Acquired {
			t.Fatalf("Acquire %s: %+v, %v", name, r, err)
		}
		return r.Token
	}
	renew := func(name string, token int64) bool {
		r, err := s.Renew(ctx, db, map[string]int64{name: token}, client)
		if err != nil {
			t.Fatal(err)
		}
		return r.Renewed[name]
	}

	kept := acquire("kept", 5*time.Second)
	if rel, err := s.Release(ctx, db, "kept", kept); err != nil || !rel.Released {
		t.Fatalf("Release = %v, %v", rel.Released, err)
	}
	before := rows.ExpiresAt("kept")
	if renew("kept", kept) || !rows.ExpiresAt("kept").Equal(before) {
		t.Fatalf("a renewal extended a row kept for its minimum hold after release (expiry %v → %v)", before, rows.ExpiresAt("kept"))
	}

	gone := acquire("gone", 0)
	rows.SetExpiry("gone", -time.Second)
	before = rows.ExpiresAt("gone")
	if renew("gone", gone) || !rows.ExpiresAt("gone").Equal(before) {
		t.Fatal("a renewal revived an expired row")
	}
}

// A release does not wait for its WAL flush (lost in a crash, it only
// delays the next holder); acquire and renew keep the server's setting,
// raising only off and local (TestAcquireAndRenewWaitForTheirFlushWhateverTheSetting).
func TestReleaseSkipsTheFlushWait(t *testing.T) {
	ctx := testCtx(t)
	s, _ := migrated(t)
	pool := pgtest.Pool(t)
	setting := func(run func(q Querier) error) string {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if err := run(Pgx(tx)); err != nil {
			t.Fatal(err)
		}
		var v string
		if err := tx.QueryRow(ctx, "SELECT current_setting('synchronous_commit')").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := setting(func(q Querier) error { _, err := s.Release(ctx, q, "x", 1); return err }); v != "off" {
		t.Fatalf("synchronous_commit after Release = %q, want off", v)
	}
	for what, run := range map[string]func(q Querier) error{
		"Acquire": func(q Querier) error {
			_, err := s.Acquire(ctx, q, AcquireArgs{Name: "x", Owner: "o", TTL: time.Second})
			return err
		},
		"Renew": func(q Querier) error { _, err := s.Renew(ctx, q, map[string]int64{"x": 1}, "c"); return err },
	} {
		if v := setting(run); v != "on" {
			t.Errorf("synchronous_commit after %s = %q, want on", what, v)
		}
	}
}

// An acquisition and a renewal wait for their WAL flush whatever the role,
// the database or the connection set synchronous_commit to: lost in a
// crash, they could hand a token out again or let two holders overlap.
// Settings stronger than on are kept; an attempt that acquires nothing
// still skips the wait.
func TestAcquireAndRenewWaitForTheirFlushWhateverTheSetting(t *testing.T) {
	ctx := testCtx(t)
	s, _ := migrated(t)
	pool := pgtest.Pool(t)
	const client = "client-id"
	// after runs run in a transaction that starts with synchronous_commit
	// set to from, and returns the setting the transaction commits with.
	after := func(from string, run func(q Querier) error) string {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "SELECT set_config('synchronous_commit', $1, true)", from); err != nil {
			t.Fatal(err)
		}
		if err := run(Pgx(tx)); err != nil {
			t.Fatal(err)
		}
		var v string
		if err := tx.QueryRow(ctx, "SELECT current_setting('synchronous_commit')").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	var token int64
	acquire := func(q Querier) error {
		r, err := s.Acquire(ctx, q, AcquireArgs{Name: "x", Owner: "o", TTL: time.Minute, Client: client})
		if err == nil && !r.Acquired {
			err = fmt.Errorf("not acquired: %+v", r)
		}
		token = r.Token
		return err
	}
	renew := func(q Querier) error {
		r, err := s.Renew(ctx, q, map[string]int64{"x": token}, client)
		if err == nil && !r.Renewed["x"] {
			err = fmt.Errorf("not renewed: %+v", r)
		}
		return err
	}
	// The acquisition is rolled back each time; keep one for the renewals.
	if err := acquire(Pgx(pool)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ from, want string }{
		{"off", "on"}, {"local", "on"}, {"on", "on"}, {"remote_write", "remote_write"}, {"remote_apply", "remote_apply"},
	} {
		if v := after(c.from, renew); v != c.want {
			t.Errorf("a renewal with synchronous_commit %s commits with %s, want %s", c.from, v, c.want)
		}
	}
	if _, err := s.Release(ctx, Pgx(pool), "x", token); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ from, want string }{
		{"off", "on"}, {"local", "on"}, {"on", "on"}, {"remote_apply", "remote_apply"},
	} {
		if v := after(c.from, acquire); v != c.want {
			t.Errorf("an acquisition with synchronous_commit %s commits with %s, want %s", c.from, v, c.want)
		}
	}
	// A shared lease's acquisition lowers the setting while it might
	// acquire nothing: the one that acquires commits as a plain one does.
	acquireShared := func(q Querier) error {
		r, _, err := s.AcquireShared(ctx, q, SharedArgs{AcquireArgs: AcquireArgs{Name: "sh", Owner: "o", TTL: time.Minute, Client: client}})
		if err == nil && !r.Acquired {
			err = fmt.Errorf("not acquired: %+v", r)
		}
		return err
	}
	for _, c := range []struct{ from, want string }{
		{"off", "on"}, {"local", "on"}, {"on", "on"}, {"remote_write", "remote_write"}, {"remote_apply", "remote_apply"},
	} {
		if v := after(c.from, acquireShared); v != c.want {
			t.Errorf("a shared acquisition with synchronous_commit %s commits with %s, want %s", c.from, v, c.want)
		}
	}
}

// A renewal never extends a row that another client took over, even when
// the takeover commits while the renewal runs: a row locked in a newer
// version than the statement's snapshot saw is checked again (token and
// client), not only by name and expiry. Here another connection flips the
// row between this client's token and another client's as fast as it can,
// stamping the other client's version with a heartbeat of its own, while
// this client renews; the other client's heartbeat must never change.
func TestRenewalNeverExtendsARowTakenOverMeanwhile(t *testing.T) {
	ctx := testCtx(t)
	s, db := migrated(t)
	pool := pgtest.Pool(t)
	const mine, theirs = "client-a", "client-b"
	r, err := s.Acquire(ctx, db, AcquireArgs{Name: "x", Owner: "a", TTL: time.Minute, Client: mine})
	if err != nil || !r.Acquired {
		t.Fatalf("Acquire: %+v, %v", r, err)
	}
	table := s.Names.QualifiedTable()
	flip := func(client string, token int64) error {
		_, err := pool.Exec(ctx, `UPDATE `+table+` SET "token" = $2, "metadata" = jsonb_build_object('client', $1::text),
			"renewed_at" = CASE WHEN $1 = 'client-b' THEN '2000-01-01' ELSE now() END WHERE "name" = 'x'`, client, token)
		return err
	}
	stop := make(chan struct{})
	flipped := make(chan error, 1)
	go func() {
		var err error
		for i := 0; err == nil; i++ {
			select {
			case <-stop:
				flipped <- nil
				return
			default:
			}
			if i%2 == 0 {
				err = flip(theirs, r.Token+1)
			} else {
				err = flip(mine, r.Token)
			}
		}
		flipped <- err
	}()
	deadline := time.Now().Add(2 * time.Second)
	renewals, extended := 0, 0
	for time.Now().Before(deadline) && extended == 0 {
		if _, err := s.Renew(ctx, db, map[string]int64{"x": r.Token}, mine); err != nil {
			t.Fatal(err)
		}
		renewals++
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE "token" = $1 AND "renewed_at" > '2000-01-01'`, r.Token+1).Scan(&extended); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	if err := <-flipped; err != nil {
		t.Fatal(err)
	}
	if extended > 0 {
		t.Fatalf("a renewal of client %s extended the row client %s had taken over (after %d renewals)", mine, theirs, renewals)
	}
	t.Logf("%d renewals raced with the takeovers", renewals)
}

// connectAs opens a connection of its own with the given application_name
// and, unless empty, search_path; closed when the test ends.
func connectAs(t *testing.T, appName, searchPath string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = appName
	if searchPath != "" {
		cfg.RuntimeParams["search_path"] = searchPath
	}
	conn, err := pgx.ConnectConfig(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// The schema lock belongs to the schema as the server resolves it, not to
// the table's spelling: while a transaction holds it for the unqualified
// table behind a search_path that starts with a missing schema and then
// names the table's, a transaction that wants it for the schema-qualified
// table waits. An unqualified table whose search_path names no existing
// schema is reported as such.
func TestSchemaLockIsTheResolvedSchemas(t *testing.T) {
	ctx := testCtx(t)
	schema := pgtest.Schema(t)
	app := fmt.Sprintf("schema_lock_%d", time.Now().UnixNano())
	bare, qualified := newStore(t, "leases"), newStore(t, schema+".leases")

	holder := connectAs(t, app+"_holder", "pglease_no_such_schema, "+schema)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if err := bare.LockSchema(ctx, Pgx(tx)); err != nil {
		t.Fatal(err)
	}
	waiter := connectAs(t, app+"_waiter", "public")
	done := make(chan error, 1)
	go func() {
		done <- Pgx(waiter).InTx(ctx, func(q Querier) error { return qualified.LockSchema(ctx, q) })
	}()
	pgtest.WaitLockWait(t, app+"_waiter")
	select {
	case err := <-done:
		t.Fatalf("the schema-qualified spelling took the schema lock while the unqualified one held it (%v)", err)
	default:
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pgtest.Receive(t, done, "the schema lock once its holder committed"); err != nil {
		t.Fatal(err)
	}

	nowhere := connectAs(t, app+"_nowhere", "pglease_no_such_schema")
	err = Pgx(nowhere).InTx(ctx, func(q Querier) error { return bare.LockSchema(ctx, q) })
	var se *SchemaError
	if !errors.As(err, &se) || !strings.Contains(se.Msg, "pglease_no_such_schema") || !strings.Contains(se.Msg, "SCHEMA.TABLE") {
		t.Fatalf("LockSchema with no existing schema on the search_path: %v, want a SchemaError naming the search_path and what to do", err)
	}
}

// A client that waited for the schema lock while another created the
// table sees the table, and creates nothing again. Its backend had looked
// the table up before it existed, and waiting for an advisory lock does not
// make a backend take in catalog changes: the existence check read a stale
// cache, and the client ran the whole creation again, whose CREATE INDEX
// IF NOT EXISTS took a SHARE lock on the table and stalled every
// acquisition until its migration committed (a fast-failover acquisition
// gave up and reported the name busy: a flake of
// TestManyClientsStartAtOnceWithMixedSpellings). Here a transaction holds
// a ROW EXCLUSIVE lock on the table, as an acquisition does, and the
// migration must not wait for it.
func TestEnsureSchemaSeesATableCreatedWhileItWaited(t *testing.T) {
	ctx := testCtx(t)
	s := newStore(t, pgtest.Schema(t)+".leases")
	pool := Pgx(pgtest.Pool(t))
	conn := func() *pgx.Conn {
		c, err := pgx.Connect(ctx, pgtest.DSN(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}
	late, holder, writer := conn(), conn(), conn()
	// The late client's backend looks the table up while it is missing.
	var missing bool
	if err := late.QueryRow(ctx, `SELECT to_regclass($1) IS NULL`, s.Names.QualifiedTable()).Scan(&missing); err != nil || !missing {
		t.Fatalf("the table exists already (%v, %v)", missing, err)
	}
	// Another client holds the schema lock.
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.LockSchema(ctx, Pgx(tx)); err != nil {
		t.Fatal(err)
	}
	if _, err := late.Exec(ctx, "SET lock_timeout = '2s'"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.EnsureSchema(ctx, Pgx(late)) }()
	pgtest.WaitFor(t, 10*time.Second, "the late client to wait for the schema lock", func() bool {
		return pgtest.Value[bool](t, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock' AND wait_event = 'advisory')`, int(late.PgConn().PID()))
	})
	// The table is created meanwhile, and a writer holds it.
	for _, stmt := range []string{s.Q.CreateSequence, s.Q.CreateTable, s.Q.CreateSemaphoreIndex, s.Q.CreateWaiters, s.Q.CreateFence, s.Q.CreateFenceTrigger, s.Q.CommentTable} {
		if err := pool.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	wtx, err := writer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = wtx.Rollback(context.Background()) }()
	if _, err := wtx.Exec(ctx, `LOCK TABLE `+s.Names.QualifiedTable()+` IN ROW EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pgtest.Receive(t, done, "the late client's EnsureSchema"); err != nil {
		t.Fatalf("EnsureSchema beside a writer: %v (it ran the creation again?)", err)
	}
}
