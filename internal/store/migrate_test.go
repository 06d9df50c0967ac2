package store

import (
	"fmt"
	"strings"
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

// Schema version 10 records each row's kind: a version-9 table's rows,
// whose kind "slots" says (NULL plain, 0 shared, n a semaphore of n
// slots), get it from the migration (EnsureSchema) and from the exported
// DDL alike; and the functions by the signatures of versions 7 to 9, which
// clients of those releases call during a rolling upgrade, follow this
// version's rules, write the kind their arguments meant, and report a
// clash by the int code those clients read.
func TestUpgradeRecordsEachRowsKind(t *testing.T) {
	for _, how := range []string{"EnsureSchema", "DDL"} {
		t.Run(how, func(t *testing.T) {
			ctx := testCtx(t)
			s := newStore(t, pgtest.Schema(t)+".leases")
			db := Pgx(pgtest.Pool(t))
			createV9Of703758e(t, s)
			acquireV9, sharedV9 := s.Names.CompatProcedures()
			acquireFn, sharedFn := strings.Split(acquireV9, "(")[0], strings.Split(sharedV9, "(")[0]
			// A call as a client of version 9 makes it (positionally, as
			// versions 7 and 8 do): name, semaphore and slot count; the
			// clash code.
			oldAcquire := func(name, client string, semaphore any, slots any) (bool, int) {
				t.Helper()
				var ok bool
				var clash int
				pgtest.QueryRow(t, `SELECT o_acquired, o_clash FROM `+acquireFn+`($1::text, 'o', 60000::bigint, 0::bigint, false,
					'{}'::jsonb, 'ns'::text, $2::text, 0, false, 0::bigint, 3000::bigint, false, $3::text, $4::integer)`,
					[]any{name, client, semaphore, slots}, &ok, &clash)
				return ok, clash
			}
			oldShared := func(name, client string) (bool, int) {
				t.Helper()
				var ok bool
				var clash int
				pgtest.QueryRow(t, `SELECT o_acquired, o_clash FROM `+sharedFn+`($1::text, 'o', 60000::bigint, 0::bigint, false,
					'{}'::jsonb, 'ns'::text, $2::text, 0, false, 0::bigint, false, '[]'::jsonb)`,
					[]any{name, client}, &ok, &clash)
				return ok, clash
			}
			p, _ := oldAcquire("p", "c1", nil, nil)
			sem, _ := oldAcquire("sem#0", "c1", "sem", 3)
			sh, _ := oldShared("sh", "c1")
			if !p || !sem || !sh {
				t.Fatal("version 9's functions refused a free name")
			}
			// Read before the upgrade and after it, the rows name their
			// kinds alike: from "slots" before (a table of version 9 has no
			// "kind" or "weight"), from "kind" after; and so does a shared
			// lease's wait.
			pgtest.Exec(t, `INSERT INTO `+s.Names.QualifiedWaiters()+` (name, client, since, expires_at, owner, shared, polling)
				VALUES ('sh', 'c3', now(), now() + interval '1 hour', 'reader', true, true)`)
			readKinds := func(when string) {
				t.Helper()
				recs, err := s.List(ctx, db)
				if err != nil {
					t.Fatalf("List %s the upgrade: %v", when, err)
				}
				got := map[string]string{}
				for _, r := range recs {
					got[r.Name] = fmt.Sprint(r.Kind, " ", r.Of, " ", r.Size, " ", r.Weight)
				}
				if want := map[string]string{"p": "plain  0 1", "sem#0": "semaphore sem 3 1", "sh#0": "shared sh 0 1"}; fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("List %s the upgrade: kinds %v, want %v", when, got, want)
				}
				ws, err := s.Waiters(ctx, db, []string{"sh"})
				if err != nil || len(ws) != 1 || ws[0].Kind != RowShared {
					t.Errorf("Waiters %s the upgrade: %+v, %v; want the shared wait of sh", when, ws, err)
				}
			}
			readKinds("before")
			if how == "DDL" {
				pgtest.Exec(t, s.DDL())
			} else if err := s.EnsureSchema(ctx, db); err != nil {
				t.Fatal(err)
			}
			kinds := func() map[string]string {
				out := map[string]string{}
				rows, err := pgtest.Pool(t).Query(ctx, `SELECT name, kind FROM `+s.Names.QualifiedTable())
				if err != nil {
					t.Fatal(err)
				}
				for rows.Next() {
					var n, k string
					if err := rows.Scan(&n, &k); err != nil {
						t.Fatal(err)
					}
					out[n] = k
				}
				return out
			}
			if got, want := kinds(), map[string]string{"p": RowPlain, "sem#0": RowSemaphore, "sh#0": RowShared}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("after the upgrade the rows' kinds are %v, want %v", got, want)
			}
			if err := s.CheckShape(ctx, db); err != nil {
				t.Fatalf("the upgraded table: %v", err)
			}
			readKinds("after")
			pgtest.Exec(t, `DELETE FROM `+s.Names.QualifiedWaiters())
			// This version's calls name the clash by kind and size.
			if r, err := s.Acquire(ctx, db, plain("sem", "c2")); err != nil || r.Acquired || r.Clash != (Clash{RowSemaphore, 3}) {
				t.Fatalf("a plain lease of a semaphore's name: %+v, %v", r, err)
			}
			// A quota, which the older clients cannot ask for and must not
			// overlap: their calls are refused, with the code of the kind
			// they cannot name (shared leases).
			quota := SharedArgs{AcquireArgs: plain("qq", "c3"), Kind: RowQuota, Weight: 2, Capacity: 5}
			if r, row, err := s.AcquireShared(ctx, db, quota); err != nil || !r.Acquired || row != "qq#0" {
				t.Fatalf("2 units of a quota of 5: %+v, %q, %v", r, row, err)
			}
			// The older signatures: this version's rules, the old codes.
			for _, tc := range []struct {
				what  string
				ok    bool
				clash int
				got   func() (bool, int)
			}{
				{"a plain lease of a semaphore's name", false, 3, func() (bool, int) { return oldAcquire("sem", "c2", nil, nil) }},
				{"a slot of another count", false, 3, func() (bool, int) { return oldAcquire("sem#1", "c2", "sem", 2) }},
				{"a slot of a name held shared", false, -1, func() (bool, int) { return oldAcquire("sh#7", "c2", "sh", 2) }},
				{"a plain lease held", false, 0, func() (bool, int) { return oldAcquire("p", "c2", nil, nil) }},
				{"a shared lease of a semaphore's name", false, 3, func() (bool, int) { return oldShared("sem", "c2") }},
				{"a slot of a semaphore whose name a plain lease holds", false, 1, func() (bool, int) { return oldAcquire("p#0", "c2", "p", 2) }},
				{"a plain lease of a quota's name", false, -1, func() (bool, int) { return oldAcquire("qq", "c2", nil, nil) }},
				{"a shared lease of a quota's name", false, -1, func() (bool, int) { return oldShared("qq", "c2") }},
				{"a slot of a quota's name", false, -1, func() (bool, int) { return oldAcquire("qq#3", "c2", "qq", 2) }},
				{"a free slot", true, 0, func() (bool, int) { return oldAcquire("sem#1", "c2", "sem", 3) }},
				{"a second shared lease", true, 0, func() (bool, int) { return oldShared("sh", "c2") }},
				{"a free plain lease", true, 0, func() (bool, int) { return oldAcquire("q", "c2", nil, nil) }},
			} {
				if ok, clash := tc.got(); ok != tc.ok || clash != tc.clash {
					t.Errorf("%s by version 9's signature: acquired %v, clash %d; want %v, %d", tc.what, ok, clash, tc.ok, tc.clash)
				}
			}
			if got, want := kinds(), map[string]string{"p": RowPlain, "q": RowPlain, "qq#0": RowQuota, "sem#0": RowSemaphore, "sem#1": RowSemaphore,
				"sh#0": RowShared, "sh#1": RowShared}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("the rows' kinds are %v, want %v", got, want)
			}
		})
	}
}
