package pgleasegoose

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for goose
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
	"github.com/pglease/pglease/internal/pgtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(podEnv) != "" {
		os.Exit(podMain())
	}
	pgtest.ExportDatabaseURL = true // for the example
	pgtest.Main(m)
}

// testClient opens a pglease client on the table of a fresh schema.
func testClient(t *testing.T, table, owner string) *pglease.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pgtest.Patience)
	defer cancel()
	c, err := pglease.Open(ctx, pgtest.DSN(t), pglease.Config{Table: table, Owner: owner, TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// withParams returns dsn with run-time parameters added.
func withParams(t *testing.T, dsn string, params map[string]string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	for k, v := range params {
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// Two lockers of one name on two clients take turns; a Lock that cannot
// get the lease before its context ends says so and holds nothing.
func TestLockersTakeTurns(t *testing.T) {
	table := pgtest.Schema(t) + ".leases"
	a := New(testClient(t, table, "pod-a"), "goose")
	b := New(testClient(t, table, "pod-b"), "goose")
	ctx := context.Background()
	if err := a.SessionLock(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if a.Lease() == nil || a.Lease().Token() <= 0 {
		t.Fatal("no lease while locked")
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err := b.Lock(short, nil)
	if !errors.Is(err, pglease.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock of a held name: %v; want ErrNotAcquired and DeadlineExceeded", err)
	}
	if b.Lease() != nil {
		t.Fatal("a failed Lock left a lease")
	}
	locked := make(chan error, 1)
	go func() { locked <- b.Lock(ctx, nil) }()
	first := a.Lease().Token()
	if err := a.SessionUnlock(ctx, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-locked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(pgtest.Patience):
		t.Fatal("the waiting Lock did not get the lease after the Unlock")
	}
	if b.Lease().Token() <= first {
		t.Fatalf("token %d after %d", b.Lease().Token(), first)
	}
	if err := b.Unlock(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Unlock(ctx, nil); err == nil {
		t.Fatal("Unlock without a lock succeeded")
	}
}

// A lease lost while goose migrates makes Unlock, and so goose's Up, fail
// with ErrLeaseLost.
func TestUnlockReportsALostLease(t *testing.T) {
	table := pgtest.Schema(t) + ".leases"
	c := testClient(t, table, "pod-a")
	l := New(c, "goose")
	ctx := context.Background()
	if err := l.Lock(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ForceRelease(ctx, testClient(t, table, "operator"), "goose"); err != nil {
		t.Fatal(err)
	}
	if err := l.Lease().Renew(ctx); !errors.Is(err, pglease.ErrLeaseLost) {
		t.Fatalf("Renew after a forced release: %v", err)
	}
	err := l.Unlock(ctx, nil)
	if !errors.Is(err, pglease.ErrLeaseLost) {
		t.Fatalf("Unlock of a lost lease: %v; want ErrLeaseLost", err)
	}
	t.Log(err)
	// The name is free again for this client.
	if err := l.Lock(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

// Two goose providers on two clients run Up at once: each migration is
// applied once, and the second provider finds nothing left to do.
func TestConcurrentUpAppliesEachMigrationOnce(t *testing.T) {
	schema := pgtest.Schema(t)
	table := schema + ".leases"
	dsn := withParams(t, pgtest.DSN(t), map[string]string{"search_path": schema})
	results := make(chan []*goose.MigrationResult, 2)
	errs := make(chan error, 2)
	for _, pod := range []string{"pod-a", "pod-b"} {
		db, err := sql.Open("pgx", withParams(t, dsn, map[string]string{"application_name": pod}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		p, err := goose.NewProvider(goose.DialectPostgres, db, migrations(0),
			goose.WithSessionLocker(New(testClient(t, table, pod), "goose")), goose.WithDisableGlobalRegistry(true))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			r, err := p.Up(context.Background())
			results <- r
			errs <- err
		}()
	}
	applied := 0
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		applied += len(<-results)
	}
	if applied != migrationCount {
		t.Fatalf("%d migrations applied by the two providers, want %d", applied, migrationCount)
	}
	runs := pgtest.Value[int64](t, fmt.Sprintf(`SELECT count(*) FROM %q.runs`, schema))
	distinct := pgtest.Value[int64](t, fmt.Sprintf(`SELECT count(DISTINCT version) FROM %q.runs`, schema))
	if runs != migrationCount || distinct != migrationCount {
		t.Fatalf("runs table: %d rows, %d versions; want %d of each", runs, distinct, migrationCount)
	}
}

// migrationCount is the number of migrations of migrations.
const migrationCount = 5

// migrations returns goose SQL migrations, each in a transaction of its own,
// that record each run in the table runs (version, the run's
// application_name); the even ones sleep for slow first, so that a pod may
// be killed in the middle of one.
func migrations(slow time.Duration) fstest.MapFS {
	fsys := fstest.MapFS{}
	for v := 1; v <= migrationCount; v++ {
		up := ""
		if v == 1 {
			up = "CREATE TABLE runs (version int NOT NULL, pod text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());\n"
		}
		up += fmt.Sprintf("INSERT INTO runs (version, pod) VALUES (%d, current_setting('application_name'));\n", v)
		if v%2 == 0 && slow > 0 {
			up += fmt.Sprintf("SELECT pg_sleep(%g);\n", slow.Seconds())
		}
		fsys[fmt.Sprintf("%05d_step.sql", v)] = &fstest.MapFile{
			Data: []byte("-- +goose Up\n" + up + "-- +goose Down\nDELETE FROM runs WHERE version = " + fmt.Sprint(v) + ";\n"),
		}
	}
	return fsys
}

// The Locker's Store fences goose's version rows with the lease: a lease
// lost during a migration (here force-released by the migration itself)
// rolls that migration back, or, outside a transaction, leaves its version
// unrecorded; goose runs no later migration and Up's error wraps
// pglease.ErrLeaseLost. Without the Locker the Store refuses to record a
// migration at all.
func TestStoreFencesEveryWrite(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tx      bool // migration 2 runs in goose's transaction
		session bool // goose.WithSessionLocker, else goose.WithLocker
		runs    string
	}{
		{"in a transaction", true, true, "{1}"},
		{"in a transaction, db locker", true, false, "{1}"},
		{"no transaction", false, true, "{1,2}"}, // migration 2's own write is not undone
	} {
		t.Run(tc.name, func(t *testing.T) {
			schema := pgtest.Schema(t)
			table := schema + ".leases"
			db, err := sql.Open("pgx", withParams(t, pgtest.DSN(t), map[string]string{"search_path": schema}))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			operator := testClient(t, table, "operator")
			forceRelease := func(ctx context.Context) {
				if _, err := admin.ForceRelease(ctx, operator, "goose"); err != nil {
					t.Error(err)
				}
			}
			up := &goose.GoFunc{RunTx: func(ctx context.Context, tx *sql.Tx) error {
				forceRelease(ctx)
				_, err := tx.ExecContext(ctx, `INSERT INTO runs (version, pod) VALUES (2, 'go')`)
				return err
			}}
			if !tc.tx {
				up = &goose.GoFunc{RunDB: func(ctx context.Context, db *sql.DB) error {
					forceRelease(ctx)
					_, err := db.ExecContext(ctx, `INSERT INTO runs (version, pod) VALUES (2, 'go')`)
					return err
				}}
			}
			all := migrations(0)
			fsys := fstest.MapFS{"00001_step.sql": all["00001_step.sql"], "00003_step.sql": all["00003_step.sql"]}
			locker := New(testClient(t, table, "pod-a"), "goose")
			store, err := locker.Store(database.DialectPostgres, "")
			if err != nil {
				t.Fatal(err)
			}
			lock := goose.WithSessionLocker(locker)
			if !tc.session {
				lock = goose.WithLocker(locker)
			}
			p, err := goose.NewProvider(goose.DialectCustom, db, fsys, goose.WithStore(store), lock,
				goose.WithGoMigrations(goose.NewGoMigration(2, up, nil)), goose.WithDisableGlobalRegistry(true))
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Up(context.Background())
			if !errors.Is(err, pglease.ErrLeaseLost) {
				t.Fatalf("Up with its lease lost in migration 2: %v; want an error wrapping ErrLeaseLost", err)
			}
			t.Log(err)
			versions := pgtest.Value[string](t, fmt.Sprintf(`SELECT array_agg(version_id ORDER BY id)::text FROM %q.goose_db_version`, schema))
			runs := pgtest.Value[string](t, fmt.Sprintf(`SELECT array_agg(version ORDER BY at)::text FROM %q.runs`, schema))
			if versions != "{0,1}" || runs != tc.runs {
				t.Fatalf("after the loss: versions %s, runs %s; want {0,1} and %s", versions, runs, tc.runs)
			}
		})
	}

	t.Run("without the locker", func(t *testing.T) {
		schema := pgtest.Schema(t)
		db, err := sql.Open("pgx", withParams(t, pgtest.DSN(t), map[string]string{"search_path": schema}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		store, err := New(testClient(t, schema+".leases", "pod-a"), "goose").Store(database.DialectPostgres, "")
		if err != nil {
			t.Fatal(err)
		}
		p, err := goose.NewProvider(goose.DialectCustom, db, migrations(0), goose.WithStore(store), goose.WithDisableGlobalRegistry(true))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Up(context.Background()); err == nil || !strings.Contains(err.Error(), "without the lease") {
			t.Fatalf("Up with the Store but no Locker: %v; want a refusal", err)
		}
		if n := pgtest.Value[int64](t, fmt.Sprintf(`SELECT count(*) FROM %q.goose_db_version WHERE version_id > 0`, schema)); n != 0 {
			t.Fatalf("%d versions recorded without the lease", n)
		}
	})
}

// A goose call given the Locker's Context stops at once when its lease is
// lost: the statement running is cancelled and its migration rolled back,
// where the Store alone lets it run to its end before refusing it.
func TestContextStopsTheMigrationInFlight(t *testing.T) {
	schema := pgtest.Schema(t)
	table := schema + ".leases"
	db, err := sql.Open("pgx", withParams(t, pgtest.DSN(t), map[string]string{"search_path": schema}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	operator := testClient(t, table, "operator")
	locker := New(testClient(t, table, "pod-a"), "goose")
	const long = time.Minute // migration 2's statement, far longer than the test waits
	up := &goose.GoFunc{RunTx: func(ctx context.Context, tx *sql.Tx) error {
		l := locker.Lease()
		if l == nil {
			return errors.New("no lease")
		}
		if _, err := admin.ForceRelease(context.Background(), operator, l.Name()); err != nil {
			return err
		}
		if err := l.Renew(context.Background()); !errors.Is(err, pglease.ErrLeaseLost) {
			return fmt.Errorf("Renew after the force-release: %v", err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO runs (version, pod) VALUES (2, 'go')`); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, fmt.Sprintf(`SELECT pg_sleep(%g)`, long.Seconds()))
		return err
	}}
	all := migrations(0)
	store, err := locker.Store(database.DialectPostgres, "")
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectCustom, db, fstest.MapFS{"00001_step.sql": all["00001_step.sql"], "00003_step.sql": all["00003_step.sql"]},
		goose.WithStore(store), goose.WithSessionLocker(locker),
		goose.WithGoMigrations(goose.NewGoMigration(2, up, nil)), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := locker.Context(context.Background())
	defer cancel()
	start := time.Now()
	_, err = p.Up(ctx)
	took := time.Since(start)
	if !errors.Is(err, pglease.ErrLeaseLost) || !errors.Is(context.Cause(ctx), pglease.ErrLeaseLost) {
		t.Fatalf("Up with its lease lost in migration 2: %v (context's cause %v); want ErrLeaseLost", err, context.Cause(ctx))
	}
	if took >= long/2 {
		t.Fatalf("Up returned after %v: migration 2's statement ran on after the loss", took)
	}
	versions := pgtest.Value[string](t, fmt.Sprintf(`SELECT array_agg(version_id ORDER BY id)::text FROM %q.goose_db_version`, schema))
	runs := pgtest.Value[string](t, fmt.Sprintf(`SELECT array_agg(version ORDER BY at)::text FROM %q.runs`, schema))
	if versions != "{0,1}" || runs != "{1}" {
		t.Fatalf("after the loss: versions %s, runs %s; want {0,1} and {1}", versions, runs)
	}
	t.Logf("Up stopped %v after it began, its lease lost in migration 2: %v", took.Round(time.Millisecond), err)
}
