package store

import (
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// seqState reads the token sequence of s as the server has it.
func seqState(t *testing.T, s *Store) (last int64, called bool) {
	t.Helper()
	pgtest.QueryRow(t, `SELECT last_value, is_called FROM `+s.Names.QualifiedSeq(), nil, &last, &called)
	return last, called
}

// serverMicros is the server clock in microseconds since the Unix epoch.
func serverMicros(t *testing.T) int64 {
	t.Helper()
	var us int64
	pgtest.QueryRow(t, `SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint`, nil, &us)
	return us
}

// A token sequence that has handed out nothing starts at the server clock
// in microseconds (SeedSequence), whether EnsureSchema or the exported DDL
// creates it, so that a table created anew after a loss hands out tokens
// above the lost one's; a sequence that has handed out tokens is never
// moved, and the seed never moves one back.
func TestTokenSequenceIsSeededAtTheServerClock(t *testing.T) {
	ctx := testCtx(t)
	db := Pgx(pgtest.Pool(t))
	seeded := func(how string, s *Store, from, to int64) int64 {
		t.Helper()
		last, called := seqState(t, s)
		if !called || last < from || last > to {
			t.Fatalf("%s: sequence at %d (is_called %v), want it seeded at the server clock, between %d and %d µs", how, last, called, from, to)
		}
		return last
	}

	// Created by a migration.
	s := newStore(t, pgtest.Schema(t)+".leases")
	from := serverMicros(t)
	if err := s.EnsureSchema(ctx, db); err != nil {
		t.Fatal(err)
	}
	seed := seeded("EnsureSchema", s, from, serverMicros(t))
	r, err := s.Acquire(ctx, db, AcquireArgs{Name: "a", Owner: "o", TTL: time.Minute, Metadata: []byte("{}"), Client: "c"})
	if err != nil || !r.Acquired || r.Token != seed+1 {
		t.Fatalf("the first acquisition: %+v, %v; want token %d", r, err, seed+1)
	}
	// Again on the existing table: nothing moves.
	if err := s.EnsureSchema(ctx, db); err != nil {
		t.Fatal(err)
	}
	if last, _ := seqState(t, s); last != seed+1 {
		t.Fatalf("a second migration moved the sequence from %d to %d", seed+1, last)
	}

	// Created by the exported DDL, run twice: the second run changes nothing.
	d := newStore(t, pgtest.Schema(t)+".leases")
	from = serverMicros(t)
	pgtest.Exec(t, d.DDL())
	seed = seeded("DDL", d, from, serverMicros(t))
	pgtest.Exec(t, d.DDL())
	if last, _ := seqState(t, d); last != seed {
		t.Fatalf("the DDL run again moved the sequence from %d to %d", seed, last)
	}

	// A used sequence is never moved, however low; an unused one whose
	// value is ahead of the clock is never moved back.
	seq := "'" + d.Names.QualifiedSeq() + "'"
	for _, tc := range []struct {
		name, set string
		want      int64
		called    bool
	}{
		{"used, low", `SELECT setval(` + seq + `, 5)`, 5, true},
		{"unused, ahead of the clock", `SELECT setval(` + seq + `, 1000 * (extract(epoch FROM clock_timestamp()) * 1000000)::bigint, false)`, 0, true},
	} {
		pgtest.Exec(t, tc.set)
		want, _ := seqState(t, d)
		pgtest.Exec(t, d.Q.SeedSequence)
		pgtest.Exec(t, d.DDL())
		if last, called := seqState(t, d); last != want || called != tc.called {
			t.Fatalf("%s: the seed moved the sequence from %d to %d (is_called %v)", tc.name, want, last, called)
		}
	}

	// The sequence of an existing table is left alone by a migration but
	// for the repair of one behind the table's tokens: one restarted
	// (unused, at 1) beside an empty table stays so.
	pgtest.Exec(t, `ALTER SEQUENCE `+s.Names.QualifiedSeq()+` RESTART`)
	pgtest.Exec(t, `DELETE FROM `+s.Names.QualifiedTable())
	if err := s.EnsureSchema(ctx, db); err != nil {
		t.Fatal(err)
	}
	if last, called := seqState(t, s); last != 1 || called {
		t.Fatalf("a migration moved the restarted sequence of an existing table to %d (is_called %v)", last, called)
	}
}
