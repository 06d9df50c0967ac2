package store

import (
	"strings"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// createdBy703758e makes migrated create its table with the DDL that
// commit 703758e exported at schema version 9 (pgtest.CreateOldTable's
// "9") before EnsureSchema, which then upgrades it: its functions refer
// to their parameters by position, and its rows record their kind in
// "slots" alone; schema version 10 replaces the functions and adds "kind".
var createdBy703758e bool

// createV9Of703758e creates s's table (in schema.leases) with 703758e's DDL.
func createV9Of703758e(t *testing.T, s *Store) {
	t.Helper()
	if s.Names.Table != "leases" {
		t.Fatalf("the DDL of 703758e is for a table named leases, not %s", s.Names.Table)
	}
	pgtest.CreateOldTable(t, s.Names.Schema, "9")
}

// functionsOf reports, for each function of s's table, its argument
// types as regprocedure prints them, its arguments and result as the server prints
// them, and its attributes.
func functionsOf(t *testing.T, s *Store) map[string][4]string {
	t.Helper()
	out := map[string][4]string{}
	for fn, proc := range map[string]string{"acquire": s.Names.AcquireProcedure(), "shared": s.Names.SharedProcedure(), "release": s.Names.ReleaseProcedure()} {
		var f [4]string
		pgtest.QueryRow(t, `SELECT p.oid::regprocedure::text, pg_get_function_arguments(p.oid),
		                           pg_get_function_result(p.oid),
		                           concat_ws(' ', (SELECT l.lanname FROM pg_language AS l WHERE l.oid = p.prolang), p.provolatile, p.prosecdef, p.proretset, p.proconfig)
		                      FROM pg_proc AS p WHERE p.oid = to_regprocedure($1)`, []any{proc}, &f[0], &f[1], &f[2], &f[3])
		f[0] = f[0][strings.Index(f[0], "("):] // the argument types, without the schema
		out[fn] = f
	}
	return out
}

// The signatures params.go renders (parameters, result columns, argument
// types) are the ones the server reports for the functions EnsureSchema
// creates, and for those of a table 703758e's DDL created once
// EnsureSchema upgraded it: the same parameters, result columns and
// attributes.
func TestSignaturesAreTheServers(t *testing.T) {
	s, _ := migrated(t)
	fresh := functionsOf(t, s)
	want := map[string][2]string{
		"acquire": {acquireParams.identity() + ", " + acquireColumns.identity(), acquireParams.types()},
		"shared":  {sharedParams.identity() + ", " + sharedColumns.identity(), sharedParams.types()},
		"release": {releaseParams.identity() + ", " + releaseColumns.identity(), releaseParams.types()},
	}
	for fn, w := range want {
		f := fresh[fn]
		if f[1] != w[0] || f[0] != strings.ReplaceAll(w[1], " ", "") {
			t.Errorf("%s: the server reports %s (%s); rendered %s (%s)", fn, f[0], f[1], w[1], w[0])
		}
	}

	createdBy703758e = true
	defer func() { createdBy703758e = false }()
	t.Run("703758e", func(t *testing.T) {
		s, _ := migrated(t)
		old := functionsOf(t, s)
		if len(old) != len(fresh) {
			t.Fatalf("functions %v, want %v", old, fresh)
		}
		for fn, f := range fresh {
			if old[fn] != f {
				t.Errorf("%s: 703758e's table has\n\t%q\nthis code's\n\t%q", fn, old[fn], f)
			}
		}
	})
}

// A version-9 table created by 703758e, whose functions refer to their
// parameters by position, is upgraded by EnsureSchema (schema version 10
// replaces every function and keeps those of version 9's signatures as
// wrappers), and then serves every call of this code: the store's tests of
// acquisitions, batches, the queue, renewals and releases pass against it.
func TestTablesOf703758eServeTheseCalls(t *testing.T) {
	createdBy703758e = true
	defer func() { createdBy703758e = false }()
	t.Run("UpgradesItsFunctions", func(t *testing.T) {
		s, _ := migrated(t)
		acquireV9, _ := s.Names.CompatProcedures()
		for _, proc := range []string{s.Names.AcquireProcedure(), acquireV9} {
			if pgtest.Value[bool](t, `SELECT prosrc LIKE '%$14%' FROM pg_proc WHERE oid = to_regprocedure($1)`, proc) {
				t.Fatalf("EnsureSchema kept the positional body of %s of a version-9 table", proc)
			}
		}
	})
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"EveryRuleHoldsOnTheFirstPath", TestEveryRuleHoldsOnTheFirstPath},
		{"AnAttemptOnALiveRowOnlyReadsIt", TestAnAttemptOnALiveRowOnlyReadsIt},
		{"AcquireBatchIsOneTransaction", TestAcquireBatchIsOneTransaction},
		{"FailedAcquireBatchLeavesNothing", TestFailedAcquireBatchLeavesNothing},
		{"ASessionBoundRowIsTakenOverOnceItsSessionEnds", TestASessionBoundRowIsTakenOverOnceItsSessionEnds},
		{"OnlyALoneFailedAttemptCommitsAsynchronously", TestOnlyALoneFailedAttemptCommitsAsynchronously},
		{"ReleaseSkipsTheFlushWait", TestReleaseSkipsTheFlushWait},
		{"AcquireAndRenewWaitForTheirFlushWhateverTheSetting", TestAcquireAndRenewWaitForTheirFlushWhateverTheSetting},
		{"RenewalNeverExtendsARowTakenOverMeanwhile", TestRenewalNeverExtendsARowTakenOverMeanwhile},
		{"BurstUntilTheFirstWaitersTurnIsFairAfterOld", TestBurstUntilTheFirstWaitersTurnIsFairAfterOld},
		{"WaiterQueuedThroughALongHoldIsPromisedAtRelease", TestWaiterQueuedThroughALongHoldIsPromisedAtRelease},
		{"QueuedWaitersDoNotOvertakeTheFirst", TestQueuedWaitersDoNotOvertakeTheFirst},
		{"ReleaseWakesThePromisedWaiterAgain", TestReleaseWakesThePromisedWaiterAgain},
		{"SharedLeasesKeepTheirRules", TestSharedLeasesKeepTheirRules},
	} {
		t.Run(tc.name, tc.test)
	}
}

// Shared leases of a name are held at once by several clients, each with
// a row of its own; a plain lease of the name is refused meanwhile and
// acquired once they are released; a slot of a semaphore of the name
// refuses them.
func TestSharedLeasesKeepTheirRules(t *testing.T) {
	ctx := testCtx(t)
	s, db := migrated(t)
	shared := func(client string, mine ...string) (AcquireResult, string) {
		t.Helper()
		r, row, err := s.AcquireShared(ctx, db, SharedArgs{AcquireArgs: plain("n", client), Mine: mine})
		if err != nil {
			t.Fatal(err)
		}
		return r, row
	}
	a, rowA := shared("c1")
	b, rowB := shared("c2")
	if !a.Acquired || !b.Acquired || rowA != "n#0" || rowB != "n#1" || b.Token <= a.Token {
		t.Fatalf("two shared leases: %+v %q, %+v %q", a, rowA, b, rowB)
	}
	if r, err := s.Acquire(ctx, db, plain("n", "c3")); err != nil || r.Acquired || r.OtherToken == 0 {
		t.Fatalf("a plain lease of a name held shared: %+v, %v; want refused, a shared holder reported", r, err)
	}
	for _, h := range []struct {
		row   string
		token int64
	}{{rowA, a.Token}, {rowB, b.Token}} {
		if r, err := s.Release(ctx, db, h.row, h.token); err != nil || !r.Released {
			t.Fatalf("release of %s: %+v, %v", h.row, r, err)
		}
	}
	if r, err := s.Acquire(ctx, db, plain("n", "c3")); err != nil || !r.Acquired {
		t.Fatalf("a plain lease once the shared ones are released: %+v, %v", r, err)
	}
	slot := AcquireArgs{Name: "sem#0", Owner: "o", TTL: time.Minute, Client: "c9", Semaphore: "sem", Slots: 2, FairAfter: FairAfter}
	if r, err := s.Acquire(ctx, db, slot); err != nil || !r.Acquired {
		t.Fatalf("slot: %+v, %v", r, err)
	}
	if r, _, err := s.AcquireShared(ctx, db, SharedArgs{AcquireArgs: plain("sem", "c1")}); err != nil || r.Acquired || r.Clash != (Clash{RowSemaphore, 2}) {
		t.Fatalf("a shared lease beside a slot of its name: %+v, %v; want refused with slot count 2", r, err)
	}
}

// The functions of the older signatures (CreateAcquireCompat,
// CreateAcquireSharedCompat, and CreateReleaseCompat, whose signature
// versions 6 to 11 share), which clients of those versions call during a
// rolling upgrade, have exactly the parameters and result columns of
// those 703758e's DDL created for version 9.
func TestCompatSignaturesAreVersion9s(t *testing.T) {
	compat := func(s *Store) (out [3]string) {
		acquire, shared := s.Names.CompatProcedures()
		for i, proc := range []string{acquire, shared, s.Names.ReleaseCompatProcedure()} {
			out[i] = pgtest.Value[string](t, `SELECT coalesce(pg_get_function_arguments(to_regprocedure($1)) || ' → ' ||
				pg_get_function_result(to_regprocedure($1)), 'missing')`, proc)
		}
		return out
	}
	s := newStore(t, pgtest.Schema(t)+".leases")
	createV9Of703758e(t, s)
	v9 := compat(s)
	if v9[0] == "missing" || v9[1] == "missing" || v9[2] == "missing" {
		t.Fatalf("703758e's table lacks a function of the older signatures: %q", v9)
	}
	fresh, _ := migrated(t)
	if got := compat(fresh); got != v9 {
		t.Fatalf("the older signatures of this version:\n\t%q\nversion 9's:\n\t%q", got, v9)
	}
}
