package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// DDL is the complete script that creates the objects of this table, or
// upgrades those of a table of any earlier schema version to this one, for
// users' own migration tools. Every statement is idempotent (IF NOT EXISTS,
// ADD COLUMN IF NOT EXISTS, CREATE OR REPLACE), and RefuseNewer refuses,
// before anything of an existing table is changed, a table that is not
// pglease's or is of a newer schema version.
func (s *Store) DDL() string {
	var b strings.Builder
	if s.Names.Schema != "" {
		b.WriteString(s.Q.CreateSchema + ";\n\n")
	}
	b.WriteString(s.Q.RefuseNewer + ";\n\n")
	for _, st := range []string{s.Q.CreateSequence, s.Q.SeedSequence, s.Q.CreateTable, s.Q.UpgradeTable, s.Q.CreateSemaphoreIndex,
		s.Q.CreateWaiters, s.Q.UpgradeWaiters, s.Q.CreateIncarnation, s.Q.CreateIncarnationFunction,
		s.Q.CreateAcquire, s.Q.CreateRelease, s.Q.CreateReleaseCompat, s.Q.CreateAcquireShared, s.Q.CreateAcquireCompat, s.Q.CreateAcquireSharedCompat,
		s.Q.CreateFence, s.Q.CreateFenceTrigger, s.Q.BackfillKind} {
		b.WriteString(st + ";\n\n")
	}
	b.WriteString(s.Q.CommentTable + ";\n")
	return b.String()
}

// column is the shape pglease needs of one column of its tables.
type column struct {
	name, typ string // the type as format_type prints it
	notNull   bool
	def       string // the default as pg_get_expr prints it; "" when any will do
	key       bool   // part of the primary key
	added     bool   // added by a migration to a table that lacks it (UpgradeTable, UpgradeWaiters)
}

func (c column) String() string {
	s := c.typ
	if c.notNull {
		s += " NOT NULL"
	}
	if c.def != "" {
		s += " DEFAULT " + c.def
	}
	if c.key {
		s += ", in the primary key"
	}
	return s
}

const timestamptz = "timestamp with time zone"

// leaseColumns are the columns of the lease table (CreateTable).
var leaseColumns = []column{
	{name: "name", typ: "text", notNull: true, key: true},
	{name: "owner", typ: "text", notNull: true},
	{name: "token", typ: "bigint", notNull: true},
	{name: "acquired_at", typ: timestamptz, notNull: true},
	{name: "renewed_at", typ: timestamptz, notNull: true},
	{name: "expires_at", typ: timestamptz, notNull: true},
	{name: "hold_until", typ: timestamptz, notNull: true},
	{name: "ttl", typ: "interval", notNull: true},
	{name: "session_pid", typ: "integer"},
	{name: "metadata", typ: "jsonb", notNull: true},
	{name: "session_server", typ: "text", added: true},
	{name: "semaphore", typ: "text", added: true},
	{name: "slots", typ: "integer", added: true},
	{name: "stepdown_at", typ: timestamptz, added: true},
	// Version 10: the row's kind of lease and the units it takes (see
	// UpgradeTable).
	{name: "kind", typ: "text", notNull: true, def: "'plain'::text", added: true},
	{name: "weight", typ: "integer", notNull: true, def: "1", added: true},
}

// waitersColumns are the columns of the waiters table (CreateWaiters).
var waitersColumns = []column{
	{name: "name", typ: "text", notNull: true, key: true},
	{name: "client", typ: "text", notNull: true, key: true},
	{name: "since", typ: timestamptz, notNull: true},
	{name: "expires_at", typ: timestamptz, notNull: true},
	{name: "notified_at", typ: timestamptz, added: true},
	{name: "owner", typ: "text", added: true},
	// The default lets a client of version 7, which knows no shared
	// leases, register as it always did.
	{name: "shared", typ: "boolean", notNull: true, def: "false", added: true},
	// Version 9: a registration that polls (CreateWaiters); the default
	// lets clients of versions 7 and 8 register as they always did.
	{name: "polling", typ: "boolean", notNull: true, def: "false", added: true},
}

// SchemaError describes a problem with an existing table's layout.
// Migrate is set when a migration repairs it (an older schema version, a
// token sequence behind the table).
type SchemaError struct {
	Msg     string
	Migrate bool
}

func (e *SchemaError) Error() string { return e.Msg }

// migrateAdvice ends the message of every problem a migration repairs.
const migrateAdvice = "run 'pglease migrate' (or admin.Migrate) as a role that owns the table"

// Migrations take their locks with a short lock_timeout and try again
// after a pause, so that the statements that queue behind a lock request
// of theirs (renewals among them) never wait longer than the timeout.
const (
	migrationLockTimeout = 200 * time.Millisecond
	migrationRetryFirst  = 250 * time.Millisecond // the pause after the first attempt, doubling up to
	migrationRetryMax    = 4 * time.Second
)

// BlockedError is a migration that could not take the locks it needs
// before its context ended: other sessions held locks of the tables at
// every attempt (an open transaction that read them, a pg_dump).
type BlockedError struct {
	Table    string
	Attempts int
	Blockers string // the sessions that held locks of the tables at the last attempt, "" when none was seen
	Err      error  // the context's error; nil while the migration goes on (Store.OnBlocked)
}

func (e *BlockedError) Error() string {
	msg := fmt.Sprintf("the migration of %s could not take its locks in %d attempt(s), each of which waits %s at most so that no other statement queues behind it for longer", e.Table, e.Attempts, migrationLockTimeout)
	if e.Blockers != "" {
		msg += "; holding locks of its tables: " + e.Blockers
	}
	msg += "; end those transactions or wait for them, then run 'pglease migrate' (or admin.Migrate) again"
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *BlockedError) Unwrap() error { return e.Err }

// EnsureSchema creates the table, its sequence, waiters table and
// functions when missing, upgrades a table of an older schema version
// (replacing the functions) or one that lacks columns a migration adds,
// and moves a sequence that is behind the table's tokens past them.
// Concurrent callers serialize on a transaction-scoped advisory lock of
// the table's schema as the server resolves it (LockSchema), whatever
// their spelling of the table; when everything is in place nothing is
// changed, so a role without CREATE rights works. An existing table of
// another shape is reported and left untouched. Its locks of the tables
// are taken with a short lock_timeout, and the migration is tried again
// until it succeeds or ctx ends (then a *BlockedError).
func (s *Store) EnsureSchema(ctx context.Context, db DB) error {
	table, waiters := s.Names.QualifiedTable(), s.Names.QualifiedWaiters()
	check := "check the lease table " + table
	ex, err := s.exists(ctx, db)
	if err != nil {
		return step("look up the lease table "+table+" and its objects in the catalog", err)
	}
	if ex.table && ex.seq && ex.waiters && ex.funcsMissing == "" {
		// Usable as it is, or not ours to change: done. Only what a
		// migration repairs goes on to the locked transaction below.
		var se *SchemaError
		if err := s.CheckShape(ctx, db); err == nil || !errors.As(err, &se) || !se.Migrate {
			return step(check, err)
		}
	}
	err = s.migrate(ctx, db, func(q Querier) error {
		nsp, err := s.lockSchema(ctx, q)
		if err != nil {
			return step("lock the schema of "+table+" for its migration", err)
		}
		err = q.Query(ctx, s.Q.MigrationLockTimeout, []any{migrationLockTimeout.Milliseconds()}, func(Row) error { return nil })
		if err != nil {
			return step("set the migration's lock_timeout", err)
		}
		ex, err := s.exists(ctx, q)
		if err != nil {
			return step("look up the lease table "+table+" and its objects in the catalog", err)
		}
		var stmts []namedStmt
		add := func(action string, sqls ...string) {
			for _, sql := range sqls {
				stmts = append(stmts, namedStmt{action, sql})
			}
		}
		upgrade, missingCols := false, false
		if ex.table {
			// Someone else's table by that name: check it before
			// creating anything beside it or changing it.
			missing, err := s.checkColumns(ctx, q, "table "+table, table, leaseColumns)
			if err != nil {
				return step(check, err)
			}
			v, err := s.version(ctx, q)
			if err != nil {
				return step(check, err)
			}
			upgrade = v < SchemaVersion
			missingCols = len(missing) > 0
			if missingCols {
				add("add the missing columns to the lease table "+table, s.Q.UpgradeTable)
			}
			if upgrade || len(missing) > 0 {
				add("create the semaphore index of the lease table "+table, s.Q.CreateSemaphoreIndex)
			}
		}
		if ex.waiters {
			missing, err := s.checkColumns(ctx, q, "the waiters table "+waiters, waiters, waitersColumns)
			if err != nil {
				return step("check the waiters table "+waiters, err)
			}
			if len(missing) > 0 {
				add("add the missing columns to the waiters table "+waiters, s.Q.UpgradeWaiters)
			}
		}
		if !ex.schema {
			// Only when missing: CREATE SCHEMA IF NOT EXISTS needs CREATE
			// on the database even when the schema is there.
			add("create the schema "+s.Names.QuotedSchema()+" of the lease table "+table, s.Q.CreateSchema)
		}
		if !ex.seq {
			// Seeded at the server clock: see SeedSequence.
			add("create the token sequence "+s.Names.QualifiedSeq(), s.Q.CreateSequence, s.Q.SeedSequence)
		}
		if !ex.table {
			add("create the lease table "+table, s.Q.CreateTable, s.Q.CreateSemaphoreIndex)
		}
		if !ex.waiters {
			add("create the waiters table "+waiters, s.Q.CreateWaiters)
		}
		if ex.funcsMissing != "" || upgrade {
			// Replaced on an upgrade: an older version's would not do.
			add("create the functions of the lease table "+table+" in the schema "+nsp, s.functionsIn(nsp)...)
		}
		if ex.table && (upgrade || missingCols) {
			// After the functions: see BackfillKind.
			add("upgrade the rows of the lease table "+table, s.Q.BackfillKind)
		}
		if !ex.table || upgrade {
			add("record the schema version in the comment of the lease table "+table, s.Q.CommentTable)
		}
		for _, st := range stmts {
			if err := q.Exec(ctx, st.sql); err != nil {
				return step(st.action, err)
			}
		}
		if !ex.table {
			return nil
		}
		// A sequence created beside a table that has rows (or one left
		// behind by a restore) must start above every token handed out.
		repair := "move the token sequence " + s.Names.QualifiedSeq() + " past the tokens of " + table
		behind, err := s.tokensBehind(ctx, q)
		if err != nil || !behind {
			return step(repair, err)
		}
		if err := q.Exec(ctx, s.Q.LockTable); err != nil {
			return step(repair, err)
		}
		return step(repair, q.Query(ctx, s.Q.RepairSequence, nil, func(Row) error { return nil }))
	})
	if err != nil {
		return err
	}
	return step(check, s.CheckShape(ctx, db))
}

// namedStmt is a statement of a migration and what it does, for errors.
type namedStmt struct{ action, sql string }

// StepError is an error of one step of EnsureSchema: Action says what
// that step did, naming the object ("create the schema \"ops\" of the
// lease table ...", "check the lease table ..."), so that an error is
// reported as that action's, never as a creation that was not attempted.
type StepError struct {
	Action string
	Err    error
}

func (e *StepError) Error() string { return e.Action + ": " + e.Err.Error() }
func (e *StepError) Unwrap() error { return e.Err }

// step returns err as action's *StepError; nil, and the errors that say
// what they are by themselves (a *SchemaError, a *BlockedError, one step
// already named), unchanged.
func step(action string, err error) error {
	var se *SchemaError
	var be *BlockedError
	var st *StepError
	if err == nil || errors.As(err, &se) || errors.As(err, &be) || errors.As(err, &st) {
		return err
	}
	return &StepError{Action: action, Err: err}
}

// migrate runs the migration's transaction, fn, until it commits, pausing
// between attempts that gave up on a lock (see migrationLockTimeout).
func (s *Store) migrate(ctx context.Context, db DB, fn func(Querier) error) error {
	var blocked *BlockedError
	pause := migrationRetryFirst
	for attempt := 1; ; attempt++ {
		err := db.InTx(ctx, fn)
		switch {
		case err == nil:
			return nil
		case Classify(err) == KindLockTimeout:
			blocked = &BlockedError{Table: s.Names.QualifiedTable(), Attempts: attempt, Blockers: s.blockers(ctx, db)}
		case blocked != nil && ctx.Err() != nil: // ended while waiting for a lock again
			blocked.Attempts, blocked.Err = attempt, ctx.Err()
			return blocked
		default:
			return err
		}
		if s.OnBlocked != nil {
			s.OnBlocked(blocked)
		}
		t := time.NewTimer(pause/2 + rand.N(pause/2))
		select {
		case <-ctx.Done():
			t.Stop()
			blocked.Err = ctx.Err()
			return blocked
		case <-t.C:
		}
		pause = min(2*pause, migrationRetryMax)
	}
}

// blockers describes the sessions holding locks of the tables, for a
// migration that gave up on one; "" when none is seen or they cannot be
// read.
func (s *Store) blockers(ctx context.Context, q Querier) string {
	var out []string
	err := q.Query(ctx, s.Q.MigrationBlockers, []any{s.Names.QualifiedTable(), s.Names.QualifiedWaiters()}, func(r Row) error {
		var pid int32
		var app, state, query string
		var ms int64
		if err := r.Scan(&pid, &app, &state, &ms, &query); err != nil {
			return err
		}
		d := fmt.Sprintf("pid %d (application_name %q, %s", pid, app, state)
		if ms >= 0 {
			d += fmt.Sprintf(", in a transaction for %s", (time.Duration(ms) * time.Millisecond).Round(100*time.Millisecond))
		}
		out = append(out, d+fmt.Sprintf(", last statement %q)", query))
		return nil
	})
	if err != nil {
		return ""
	}
	return strings.Join(out, ", ")
}

// LockSchema takes, in q's transaction, the lock that serializes the
// creation and upgrade of pglease's objects in the table's schema: one lock
// per schema as the server resolves it (see SchemaLock in queries.sql), so
// that every spelling of the table ("leases", "public.leases", another
// search_path) and every table of one new schema waits for the others, and
// no CREATE races on the catalog. An unqualified table whose search_path
// names no existing schema is reported as a *SchemaError, with nothing
// locked or created.
func (s *Store) LockSchema(ctx context.Context, q Querier) error {
	_, err := s.lockSchema(ctx, q)
	return err
}

// lockSchema is LockSchema, returning the schema it locked.
func (s *Store) lockSchema(ctx context.Context, q Querier) (string, error) {
	var nsp *string
	var path string
	err := q.Query(ctx, s.Q.SchemaLock, []any{s.Names.Schema}, func(r Row) error { return r.Scan(&nsp, &path) })
	if err != nil {
		return "", err
	}
	if nsp == nil {
		return "", &SchemaError{Msg: fmt.Sprintf("table %s names no schema, and none of the search_path's schemas (%s) exists to create it in: create one, set search_path to an existing schema, or name the schema in the table (SCHEMA.TABLE)", s.Names.QualifiedTable(), path)}
	}
	return *nsp, nil
}

// functionsIn are the statements that create the functions of the table
// in schema, the one the server resolved for it, whose name their bodies
// then give every object (see functions.sql), with the fence's trigger and
// the incarnation table they use.
func (s *Store) functionsIn(schema string) []string {
	n := s.Names
	n.Schema = schema
	q := Build(n)
	return []string{q.CreateIncarnation, q.CreateIncarnationFunction, q.CreateAcquire, q.CreateRelease, q.CreateReleaseCompat, q.CreateAcquireShared,
		q.CreateAcquireCompat, q.CreateAcquireSharedCompat, q.CreateFence, q.CreateFenceTrigger}
}

// tokensBehind reports whether the token sequence is behind the largest
// token in the table, so that it would hand out a token already used.
func (s *Store) tokensBehind(ctx context.Context, q Querier) (bool, error) {
	var maxTok, last int64
	err := q.Query(ctx, s.Q.TokenState, nil, func(r Row) error { return r.Scan(&maxTok, &last) })
	return maxTok > last, err
}

// tokenSequenceBehind: the table holds tokens the sequence has not reached;
// Migrate (as a role that may alter the sequence) repairs it.
func tokenSequenceBehind(s *Store) error {
	return &SchemaError{Migrate: true, Msg: fmt.Sprintf("the token sequence %s is behind the largest token in %s (a table-only restore or a replication cutover?): new leases would get old fencing tokens; migrate the table (admin.Migrate) as a role that owns it to repair the sequence", s.Names.QualifiedSeq(), s.Names.QualifiedTable())}
}

func (s *Store) version(ctx context.Context, q Querier) (int, error) {
	var v int
	err := q.Query(ctx, s.Q.SchemaVersion, []any{s.Names.QualifiedTable()}, func(r Row) error { return r.Scan(&v) })
	return v, err
}

type existing struct {
	table, seq, schema, waiters bool
	funcsMissing                string // the functions (as to_regprocedure reads them), the fence's trigger and the incarnation table missing; "" when none
}

// exists reports which of the table, its sequence, their schema, the
// waiters table and the functions exist.
func (s *Store) exists(ctx context.Context, q Querier) (ex existing, err error) {
	n := s.Names
	acquireV9, sharedV9 := n.CompatProcedures()
	err = q.Query(ctx, s.Q.TableExists, []any{n.QualifiedTable(), n.QualifiedSeq(), n.QuotedSchema(), n.QualifiedWaiters(),
		n.AcquireProcedure(), n.ReleaseProcedure(), n.SharedProcedure(), n.FenceProcedure(),
		n.QualifiedIncarnation(), n.IncarnationProcedure(), acquireV9, sharedV9, n.ReleaseCompatProcedure()},
		func(r Row) error { return r.Scan(&ex.table, &ex.seq, &ex.schema, &ex.waiters, &ex.funcsMissing) })
	return ex, err
}

// CheckShape compares the existing objects of the table with those this
// version expects: every column of the lease and waiters tables (type,
// nullability, default where it matters, primary key), the token
// sequence and the functions with their signatures. It returns a
// *SchemaError naming the first mismatch (Migrate set when a migration
// repairs it: an older schema version, a column or object a migration
// adds, a token sequence behind the table). It also resolves the table's
// lock namespace.
func (s *Store) CheckShape(ctx context.Context, q Querier) error {
	v, err := s.version(ctx, q)
	if err != nil {
		return err
	}
	if v > SchemaVersion {
		return s.newerVersion(v)
	}
	// A foreign table is reported as such, whatever its comment says.
	table := "table " + s.Names.QualifiedTable()
	missing, err := s.checkColumns(ctx, q, table, s.Names.QualifiedTable(), leaseColumns)
	if err != nil {
		return err
	}
	if v < SchemaVersion {
		return &SchemaError{Migrate: true, Msg: fmt.Sprintf("%s has schema version %d, this pglease needs %d; %s", table, v, SchemaVersion, migrateAdvice)}
	}
	if len(missing) > 0 {
		return lacks(table, missing)
	}
	ex, err := s.exists(ctx, q)
	if err != nil {
		return err
	}
	if !ex.seq {
		return &SchemaError{Migrate: true, Msg: fmt.Sprintf("the token sequence %s of %s is missing; %s", s.Names.QualifiedSeq(), table, migrateAdvice)}
	}
	if err := s.checkSequence(ctx, q); err != nil {
		return err
	}
	waiters := "the waiters table " + s.Names.QualifiedWaiters()
	if !ex.waiters {
		return &SchemaError{Migrate: true, Msg: fmt.Sprintf("%s of %s is missing; %s", waiters, table, migrateAdvice)}
	}
	if missing, err := s.checkColumns(ctx, q, waiters, s.Names.QualifiedWaiters(), waitersColumns); err != nil {
		return err
	} else if len(missing) > 0 {
		return lacks(waiters, missing)
	}
	if ex.funcsMissing != "" {
		return &SchemaError{Migrate: true, Msg: fmt.Sprintf("these objects of %s are missing: %s; %s", table, ex.funcsMissing, migrateAdvice)}
	}
	behind, err := s.tokensBehind(ctx, q)
	if err != nil {
		return err
	}
	if behind {
		return tokenSequenceBehind(s)
	}
	var ns string
	if err := q.Query(ctx, s.Q.LockNamespace, []any{s.Names.QualifiedTable()}, func(r Row) error { return r.Scan(&ns) }); err != nil {
		return err
	}
	if ns == "" {
		return &SchemaError{Msg: fmt.Sprintf("%s does not exist; create it (admin.Migrate)", table)}
	}
	s.ns.Store(&ns)
	return nil
}

// lacks reports the columns a migration adds that what lacks at the
// current schema version (the DDL of an earlier pglease applied over it?).
func lacks(what string, missing []string) error {
	return &SchemaError{Migrate: true, Msg: fmt.Sprintf("%s lacks the column(s) %s that this pglease needs; %s, which adds them", what, strings.Join(missing, ", "), migrateAdvice)}
}

// checkSequence checks that the token sequence can only hand out growing
// tokens: a bigint sequence that increments and never cycles.
func (s *Store) checkSequence(ctx context.Context, q Querier) error {
	var typ string
	var inc int64
	var cycle, found bool
	err := q.Query(ctx, s.Q.SequenceShape, []any{s.Names.QualifiedSeq()}, func(r Row) error {
		found = true
		return r.Scan(&typ, &inc, &cycle)
	})
	switch {
	case err != nil:
		return err
	case !found:
		return &SchemaError{Msg: fmt.Sprintf("%s, the token sequence of %s, is not a sequence; nothing was changed", s.Names.QualifiedSeq(), s.Names.QualifiedTable())}
	case typ != "bigint" || inc <= 0 || cycle:
		return &SchemaError{Msg: fmt.Sprintf("the token sequence %s of %s is a %s sequence that increments by %d and cycles: %v; pglease needs a bigint sequence that increments and never cycles, or fencing tokens could repeat; nothing was changed", s.Names.QualifiedSeq(), s.Names.QualifiedTable(), typ, inc, cycle)}
	}
	return nil
}

func (s *Store) newerVersion(v int) error {
	return &SchemaError{Msg: fmt.Sprintf("table %s has schema version %d, newer than this pglease (%d); upgrade pglease", s.Names.QualifiedTable(), v, SchemaVersion)}
}

// CheckReadable reports whether the table exists and, when it does, checks
// that this version can read its rows: a schema version no newer than this
// one and the columns Get and List read (a table of an older version that
// Migrate would upgrade is readable; so is one whose token sequence is
// behind, which only matters to acquisitions). A missing table (or schema)
// is not an error. It reads only the catalog and changes nothing; the role
// needs no privilege beyond USAGE on the table's schema.
func (s *Store) CheckReadable(ctx context.Context, q Querier) (exists bool, err error) {
	ex, err := s.exists(ctx, q)
	if err != nil || !ex.table {
		return false, err
	}
	v, err := s.version(ctx, q)
	if err != nil {
		return true, err
	}
	if v > SchemaVersion {
		return true, s.newerVersion(v)
	}
	// A foreign table is reported as such, whatever its comment says.
	_, err = s.checkColumns(ctx, q, "table "+s.Names.QualifiedTable(), s.Names.QualifiedTable(), leaseColumns)
	return true, err
}

// checkColumns compares the columns of the table rel (what names it in
// messages) with want. It returns the columns a migration adds that the
// table lacks, or a *SchemaError for what no migration repairs: a column
// missing that pglease never adds, or one of another type, nullability,
// default or primary key. A table that is not pglease's, or was changed by
// hand, is never altered.
func (s *Store) checkColumns(ctx context.Context, q Querier, what, rel string, want []column) (missing []string, err error) {
	got := map[string]column{}
	err = q.Query(ctx, s.Q.Columns, []any{rel}, func(r Row) error {
		var c column
		var def *string
		if err := r.Scan(&c.name, &c.typ, &c.notNull, &def, &c.key); err != nil {
			return err
		}
		if def != nil {
			c.def = *def
		}
		got[c.name] = c
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, w := range want {
		g, ok := got[w.name]
		if !ok && w.added {
			missing = append(missing, fmt.Sprintf("%q", w.name))
			continue
		}
		if !ok {
			return nil, &SchemaError{Msg: fmt.Sprintf("%s exists but has no column %q; it was not created by pglease or by this version (nothing was changed; pick another table or migrate it)", what, w.name)}
		}
		g.added = w.added
		if w.def == "" {
			g.def = "" // any default will do
		}
		if g != w {
			return nil, &SchemaError{Msg: fmt.Sprintf("%s column %q is %s, pglease needs %s; nothing was changed", what, w.name, g, w)}
		}
	}
	return missing, nil
}

// LockNamespace is the table's advisory-lock namespace (see lockNS).
func (s *Store) LockNamespace() (string, error) { return s.lockNS() }

// lockNS is the table's advisory-lock namespace: its schema and name as the
// server resolved them in CheckShape, whatever spelling the client was
// configured with, so that every client of one table shares one key space.
func (s *Store) lockNS() (string, error) {
	if ns := s.ns.Load(); ns != nil {
		return *ns, nil
	}
	return "", &SchemaError{Msg: fmt.Sprintf("table %s was not checked before use (a pglease bug)", s.Names.QualifiedTable())}
}
