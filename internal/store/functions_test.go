package store

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver of database/sql

	"github.com/pglease/pglease/internal/pgtest"
)

// plain is a plain, unqueued attempt on name by client.
func plain(name, client string) AcquireArgs {
	return AcquireArgs{Name: name, Owner: "o-" + client, TTL: time.Minute, Client: client, FairAfter: FairAfter}
}

// lastToken is the token sequence's last value.
func lastToken(t *testing.T, s *Store) int64 {
	t.Helper()
	return pgtest.Value[int64](t, `SELECT coalesce(pg_sequence_last_value($1::regclass), 0)`, s.Names.QualifiedSeq())
}

// The acquisition function's first path (a plain, unqueued attempt on a
// name without a row) keeps every rule its second path keeps: a live slot
// of a semaphore of the name refuses it, a registration of another client
// sends it to the second path (which lets it overtake a waiter whose turn
// is young, and refuses it a lease promised to one), an expired row is
// taken over with the previous holder reported, a row of the client's own
// (a lost reply) is reported as the holder, and tokens only grow.
func TestEveryRuleHoldsOnTheFirstPath(t *testing.T) {
	f := newQueueFixture(t, "w1")
	s := f.s

	// A live slot of the semaphore "sem" refuses a plain lease "sem".
	slot := AcquireArgs{Name: "sem#0", Owner: "o", TTL: time.Minute, Client: "c9", Semaphore: "sem", Slots: 3, FairAfter: FairAfter}
	if r, err := s.Acquire(f.ctx, f.db, slot); err != nil || !r.Acquired {
		t.Fatalf("slot: %+v, %v", r, err)
	}
	if r := f.attempt("sem", "c1", false); r.Acquired || r.Clash != (Clash{RowSemaphore, 3}) {
		t.Fatalf("plain lease beside a live slot of its semaphore: %+v, want refused with slot count 3", r)
	}

	// A waiter whose turn is young is overtaken; once the lease is
	// promised to it, it is refused to others (and the waiter is woken).
	f.register("queued", "w1", 0)
	r := f.attempt("queued", "c1", false)
	if !r.Acquired {
		t.Fatalf("overtaking a young waiter: %+v, want acquired", r)
	}
	f.release("queued", r.Token)
	if got := f.next(f.conns["w1"]); got != "queued" {
		t.Fatalf("the waiter heard %q, want the release of queued", got)
	}
	f.turnBegan("w1", 2*FairAfter)
	if r := f.attempt("queued", "c1", false); r.Acquired || r.Ahead != 1 {
		t.Fatalf("a lease promised to a waiter: %+v, want refused, 1 ahead", r)
	}
	if got := f.next(f.conns["w1"]); got != "queued" {
		t.Fatalf("the promised waiter heard %q, want a nudge for queued", got)
	}

	// An expired row is taken over; the result names its holder.
	old, err := s.Acquire(f.ctx, f.db, AcquireArgs{Name: "expired", Owner: "o-old", TTL: time.Millisecond, Client: "c0"})
	if err != nil || !old.Acquired {
		t.Fatalf("%+v, %v", old, err)
	}
	time.Sleep(5 * time.Millisecond)
	if r := f.attempt("expired", "c1", false); !r.Acquired || r.OtherOwner != "o-old" || r.OtherToken != old.Token || r.Token <= old.Token {
		t.Fatalf("takeover of an expired row: %+v, want acquired from o-old's %d with a larger token", r, old.Token)
	}

	// A live row of the client's own is reported as the holder.
	mine := f.attempt("mine", "c1", false)
	if r := f.attempt("mine", "c1", false); r.Acquired || r.OtherClient != "c1" || r.OtherToken != mine.Token || r.OtherRemaining <= 0 {
		t.Fatalf("attempt on the client's own row: %+v, want refused with the row (token %d) as holder", r, mine.Token)
	}

	// Tokens grow across first and second paths.
	a := f.attempt("t", "c1", false)
	f.release("t", a.Token)
	b := f.attempt("t", "c2", false)
	if b.Token <= a.Token || a.Token <= mine.Token {
		t.Fatalf("tokens %d, %d after %d: want them growing", a.Token, b.Token, mine.Token)
	}
}

// An attempt on a live plain row does not lock it: it does not wait for a
// lock another transaction holds on the row (a guarded transaction), and
// reports the holder. (Before version 6 the attempt locked the row to
// evaluate its takeover, and so waited.) Past the first path (whose
// INSERT draws a token before it finds the row), it draws no token.
func TestAnAttemptOnALiveRowOnlyReadsIt(t *testing.T) {
	ctx := testCtx(t)
	s, db := migrated(t)
	held, err := s.Acquire(ctx, db, plain("held", "c1"))
	if err != nil || !held.Acquired {
		t.Fatalf("%+v, %v", held, err)
	}
	pgtest.LeaseTable(t, pgtest.DSN(t), s.Names.Schema+"."+s.Names.Table).LockRow("held")
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for _, queued := range []bool{false, true} {
		before := lastToken(t, s)
		a := plain("held", "c2")
		a.Queued, a.QueueTTL = queued, time.Minute
		r, err := s.Acquire(actx, db, a)
		if err != nil || r.Acquired || r.OtherToken != held.Token || r.OtherOwner != "o-c1" || r.OtherRemaining <= 0 {
			t.Fatalf("queued %v: attempt on a live, locked row: %+v, %v; want refused at once, naming the holder", queued, r, err)
		}
		if after := lastToken(t, s); queued && after != before {
			t.Fatalf("a queued attempt on a live row drew a token: the sequence moved from %d to %d", before, after)
		}
	}
}

// The acquisition runs as one statement on every kind of handle: a
// database/sql connection pool (no transaction of its own) as well as pgx.
func TestAcquireIsOneStatementOnDatabaseSQL(t *testing.T) {
	ctx := testCtx(t)
	s, _ := migrated(t)
	sqldb, err := sql.Open("pgx", pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer sqldb.Close()
	db := SQL(sqldb, func(ctx context.Context) (*sql.Tx, error) { return sqldb.BeginTx(ctx, nil) })
	r, err := s.Acquire(ctx, db, plain("sql", "c1"))
	if err != nil || !r.Acquired {
		t.Fatalf("acquire through database/sql: %+v, %v", r, err)
	}
	if r2, err := s.Acquire(ctx, db, plain("sql", "c2")); err != nil || r2.Acquired || r2.OtherToken != r.Token {
		t.Fatalf("second acquire through database/sql: %+v, %v", r2, err)
	}
	if rel, err := s.Release(ctx, db, "sql", r.Token); err != nil || !rel.Released {
		t.Fatalf("release through database/sql: %v, %v", rel.Released, err)
	}
}

// A table of schema version 5 (no functions) is refused until migrated,
// keeps its leases through the migration, and is usable afterwards; so are
// a table whose function was dropped, one of version 7 (before shared
// leases), one of version 8 (before the fence) and one whose fence's
// trigger was dropped.
func TestVersion5TableIsMigrated(t *testing.T) {
	ctx := testCtx(t)
	s, db := migrated(t)
	held, err := s.Acquire(ctx, db, plain("kept", "c1"))
	if err != nil || !held.Acquired {
		t.Fatalf("%+v, %v", held, err)
	}
	dropFunctions := func() {
		pgtest.Exec(t, `DROP FUNCTION `+s.Names.AcquireProcedure()+`; DROP FUNCTION `+s.Names.ReleaseProcedure())
	}
	for _, tc := range []struct {
		name  string
		setup func()
	}{
		{"version 5", func() {
			dropFunctions()
			pgtest.Exec(t, `COMMENT ON TABLE `+s.Names.QualifiedTable()+` IS 'pglease lease table, schema version 5'`)
		}},
		{"a function dropped", func() {
			pgtest.Exec(t, `DROP FUNCTION `+s.Names.ReleaseProcedure())
		}},
		{"version 7 (no shared leases)", func() {
			pgtest.Exec(t, `DROP FUNCTION `+s.Names.SharedProcedure())
			pgtest.Exec(t, `ALTER TABLE `+s.Names.QualifiedWaiters()+` DROP COLUMN shared`)
			pgtest.Exec(t, `DROP FUNCTION `+s.Names.FenceProcedure()+` CASCADE`)
			pgtest.Exec(t, `COMMENT ON TABLE `+s.Names.QualifiedTable()+` IS 'pglease lease table, schema version 7'`)
		}},
		{"version 8 (no fence)", func() {
			pgtest.Exec(t, `DROP FUNCTION `+s.Names.FenceProcedure()+` CASCADE`)
			pgtest.Exec(t, `COMMENT ON TABLE `+s.Names.QualifiedTable()+` IS 'pglease lease table, schema version 8'`)
		}},
		{"the fence's trigger dropped", func() {
			pgtest.Exec(t, `DROP TRIGGER pglease_fence ON `+s.Names.QualifiedTable())
		}},
	} {
		tc.setup()
		fresh := newStore(t, s.Names.Schema+"."+s.Names.Table)
		var se *SchemaError
		if err := fresh.CheckShape(ctx, db); !errors.As(err, &se) || !se.Migrate || !strings.Contains(se.Msg, "migrate") {
			t.Fatalf("%s: CheckShape: %v, want a SchemaError that a migration repairs", tc.name, err)
		}
		if err := fresh.EnsureSchema(ctx, db); err != nil {
			t.Fatalf("%s: EnsureSchema: %v", tc.name, err)
		}
		if v, err := fresh.version(ctx, db); err != nil || v != SchemaVersion {
			t.Fatalf("%s: version after the migration: %d, %v", tc.name, v, err)
		}
		if rec, ok, err := fresh.Get(ctx, db, "kept"); err != nil || !ok || rec.Token != held.Token {
			t.Fatalf("%s: the lease held across the migration: %+v, %v, %v", tc.name, rec, ok, err)
		}
		if rr, err := fresh.Renew(ctx, db, map[string]int64{"kept": held.Token}, "c1"); err != nil || !rr.Renewed["kept"] {
			t.Fatalf("%s: renewing across the migration: %+v, %v", tc.name, rr, err)
		}
		r, err := fresh.Acquire(ctx, db, plain("new", "c2"))
		if err != nil || !r.Acquired || r.Token <= held.Token {
			t.Fatalf("%s: acquire after the migration: %+v, %v", tc.name, r, err)
		}
		if rel, err := fresh.Release(ctx, db, "new", r.Token); err != nil || !rel.Released {
			t.Fatalf("%s: release after the migration: %v, %v", tc.name, rel.Released, err)
		}
	}
}

// The functions find the table whoever calls them, however the caller
// spells the table: created for an unqualified table behind a search_path
// (by EnsureSchema, and by the exported DDL), they serve a client that
// names the table with its schema and has another search_path. (Their
// bodies once named the objects as the creating client spelled them, and
// such a caller got "relation does not exist".)
func TestFunctionsServeEverySpellingOfTheTable(t *testing.T) {
	ctx := testCtx(t)
	for _, how := range []string{"EnsureSchema", "DDL"} {
		schema := pgtest.Schema(t)
		conn := pgtest.Conn(t)
		if _, err := conn.Exec(ctx, `SET search_path TO `+schema); err != nil {
			t.Fatal(err)
		}
		bare := newStore(t, "leases")
		switch how {
		case "EnsureSchema":
			if err := bare.EnsureSchema(ctx, Pgx(conn)); err != nil {
				t.Fatal(err)
			}
		case "DDL":
			if err := Pgx(conn).Exec(ctx, bare.DDL()); err != nil {
				t.Fatal(err)
			}
		}
		qualified := newStore(t, schema+".leases")
		db := Pgx(pgtest.Pool(t)) // the default search_path
		if err := qualified.CheckShape(ctx, db); err != nil {
			t.Fatalf("%s: %v", how, err)
		}
		r, err := qualified.Acquire(ctx, db, plain("x", "c1"))
		if err != nil || !r.Acquired {
			t.Fatalf("%s: acquire through the schema-qualified spelling: %+v, %v", how, r, err)
		}
		if rel, err := qualified.Release(ctx, db, "x", r.Token); err != nil || !rel.Released {
			t.Fatalf("%s: release through the schema-qualified spelling: %v, %v", how, rel.Released, err)
		}
		// And the unqualified spelling, behind its search_path.
		if err := bare.CheckShape(ctx, Pgx(conn)); err != nil {
			t.Fatal(err)
		}
		if r, err := bare.Acquire(ctx, Pgx(conn), plain("y", "c1")); err != nil || !r.Acquired {
			t.Fatalf("%s: acquire through the unqualified spelling: %+v, %v", how, r, err)
		}
	}
}

// The fence (schema version 9) refuses an INSERT into the lease table that
// this version's acquisitions did not mark, as an earlier release's set
// would write one, with an error that says to upgrade, and writes nothing;
// updates and deletes (renewals and releases) pass, and so does an INSERT
// marked with the table's version, or with an earlier one whose statements
// follow its rules (FencedBefore on: version 12 changed none), not one
// marked with a version before those.
func TestTheFenceRefusesUnmarkedAcquisitions(t *testing.T) {
	ctx := testCtx(t)
	s, db := migrated(t)
	held, err := s.Acquire(ctx, db, plain("held", "c1"))
	if err != nil || !held.Acquired {
		t.Fatalf("%+v, %v", held, err)
	}
	insert := func(marker string) error {
		conn, err := pgtest.Pool(t).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		if _, err := conn.Exec(ctx, `SELECT set_config('pglease.writer', $1, true)`, marker); err != nil {
			t.Fatal(err)
		}
		_, err = conn.Exec(ctx, `INSERT INTO `+s.Names.QualifiedTable()+` ("name", "owner", "token", "acquired_at", "renewed_at", "expires_at", "hold_until", "ttl")
			VALUES ('stolen', 'old', 999, now(), now(), now() + interval '1 minute', now(), interval '1 minute')`)
		return err
	}
	// set_config(…, true) outside a transaction block lasts one statement:
	// the INSERT after it is unmarked.
	for _, marker := range []string{"", strconv.Itoa(SchemaVersion)} {
		if err := insert(marker); err == nil || !strings.Contains(err.Error(), "schema version "+strconv.Itoa(SchemaVersion)) ||
			!strings.Contains(err.Error(), "earlier pglease release") {
			t.Fatalf("an unmarked INSERT: %v, want the fence's error", err)
		}
	}
	if _, ok, err := s.Get(ctx, db, "stolen"); err != nil || ok {
		t.Fatalf("the fenced INSERT wrote a row (%v, %v)", ok, err)
	}
	tx, err := pgtest.Pool(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// Marked by a version from FencedBefore on: accepted (their statements
	// follow this version's rules); by one before: refused.
	for _, marker := range []string{strconv.Itoa(FencedBefore - 1), strconv.Itoa(FencedBefore), strconv.Itoa(SchemaVersion)} {
		if _, err := tx.Exec(ctx, `SAVEPOINT a; SELECT set_config('pglease.writer', '`+marker+`', true)`); err != nil {
			t.Fatal(err)
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+s.Names.QualifiedTable()+` ("name", "owner", "token", "acquired_at", "renewed_at", "expires_at", "hold_until", "ttl")
			VALUES ('marked-`+marker+`', 'new', 1000, now(), now(), now() + interval '1 minute', now(), interval '1 minute')`)
		if want := marker != strconv.Itoa(FencedBefore-1); (err == nil) != want {
			t.Fatalf("an INSERT marked %s: %v, want accepted: %v", marker, err, want)
		}
		if err != nil {
			if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT a`); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE `+s.Names.QualifiedTable()+` SET "renewed_at" = now() WHERE "name" = 'held'`); err != nil {
		t.Fatalf("an update: %v", err)
	}
	if _, err := tx.Exec(ctx, `SELECT set_config('pglease.writer', '', true); DELETE FROM `+s.Names.QualifiedTable()+` WHERE "name" = 'held'`); err != nil {
		t.Fatalf("a delete: %v", err)
	}
}
