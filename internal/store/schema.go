package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// DDL is the complete, idempotent script that creates the objects of this
// table, for users' own migration tools.
func (s *Store) DDL() string {
	var b strings.Builder
	if s.Names.Schema != "" {
		b.WriteString(s.Q.CreateSchema + ";\n\n")
	}
	b.WriteString(s.Q.CreateSequence + ";\n\n")
	b.WriteString(s.Q.CreateTable + ";\n\n")
	b.WriteString(s.Q.CreateSemaphoreIndex + ";\n\n")
	b.WriteString(s.Q.CreateWaiters + ";\n\n")
	b.WriteString(s.Q.CreateAcquire + ";\n\n")
	b.WriteString(s.Q.CreateRelease + ";\n\n")
	b.WriteString(s.Q.CreateAcquireShared + ";\n\n")
	b.WriteString(s.Q.CreateFence + ";\n\n")
	b.WriteString(s.Q.CreateFenceTrigger + ";\n\n")
	b.WriteString(s.Q.CreateIncarnation + ";\n\n")
	b.WriteString(s.Q.CreateIncarnationFunction + ";\n\n")
	b.WriteString(s.Q.CommentTable + ";\n")
	return b.String()
}

// Column is the expected shape of one column.
type column struct {
	name, typ string
	notNull   bool
}

var wantColumns = []column{
	{"name", "text", true}, {"owner", "text", true}, {"token", "bigint", true},
	{"acquired_at", "timestamp with time zone", true},
	{"renewed_at", "timestamp with time zone", true},
	{"expires_at", "timestamp with time zone", true},
	{"hold_until", "timestamp with time zone", true},
	{"ttl", "interval", true}, {"session_pid", "integer", false},
	{"metadata", "jsonb", true}, {"session_server", "text", false},
	{"semaphore", "text", false}, {"slots", "integer", false},
	{"stepdown_at", "timestamp with time zone", false},
}

// upgradeAdds are the columns that schema versions 2 and 4 added;
// UpgradeTable adds them to an older table.
var upgradeAdds = map[string]bool{"session_server": true, "semaphore": true, "slots": true, "stepdown_at": true}

// SchemaError describes a problem with an existing table's layout.
// Migrate is set when a migration repairs it (an older schema version, a
// token sequence behind the table).
type SchemaError struct {
	Msg     string
	Migrate bool
}

func (e *SchemaError) Error() string { return e.Msg }

// EnsureSchema creates the table, its sequence, waiters table and
// functions when missing, upgrades a table of an older schema version
// (replacing the functions), and moves a sequence that is behind the
// table's tokens past them. Concurrent callers serialize on a
// transaction-scoped advisory lock of the table's schema as the server
// resolves it (LockSchema), whatever their spelling of the table; when
// everything is in place nothing is changed, so a role without CREATE
// rights works. An existing table of another shape is reported and left
// untouched.
func (s *Store) EnsureSchema(ctx context.Context, db DB) error {
	ex, err := s.exists(ctx, db)
	if err != nil {
		return err
	}
	if ex.table && ex.seq && ex.waiters && ex.funcs {
		// Usable as it is, or not ours to change: done. Only what a
		// migration repairs goes on to the locked transaction below.
		var se *SchemaError
		if err := s.CheckShape(ctx, db); err == nil || !errors.As(err, &se) || !se.Migrate {
			return err
		}
	}
	err = db.InTx(ctx, func(q Querier) error {
		nsp, err := s.lockSchema(ctx, q)
		if err != nil {
			return err
		}
		ex, err := s.exists(ctx, q)
		if err != nil {
			return err
		}
		var stmts []string
		upgrade := false
		if ex.table {
			// Someone else's table by that name: check it before
			// creating anything beside it or changing it.
			if err := s.checkColumns(ctx, q, true); err != nil {
				return err
			}
			v, err := s.version(ctx, q)
			if err != nil {
				return err
			}
			if upgrade = v < SchemaVersion; upgrade {
				stmts = append(stmts, s.Q.UpgradeTable, s.Q.CreateSemaphoreIndex)
				if ex.waiters {
					stmts = append(stmts, s.Q.UpgradeWaiters)
				}
			}
		}
		if !ex.schema {
			// Only when missing: CREATE SCHEMA IF NOT EXISTS needs CREATE
			// on the database even when the schema is there.
			stmts = append(stmts, s.Q.CreateSchema)
		}
		if !ex.seq {
			stmts = append(stmts, s.Q.CreateSequence)
		}
		if !ex.table {
			stmts = append(stmts, s.Q.CreateTable, s.Q.CreateSemaphoreIndex)
		}
		if !ex.waiters {
			stmts = append(stmts, s.Q.CreateWaiters)
		}
		if !ex.funcs || upgrade {
			// Replaced on an upgrade: an older version's would not do.
			stmts = append(stmts, s.functionsIn(nsp)...)
		}
		if !ex.table || upgrade {
			stmts = append(stmts, s.Q.CommentTable)
		}
		for _, st := range stmts {
			if err := q.Exec(ctx, st); err != nil {
				return err
			}
		}
		if !ex.table {
			return nil
		}
		// A sequence created beside a table that has rows (or one left
		// behind by a restore) must start above every token handed out.
		behind, err := s.tokensBehind(ctx, q)
		if err != nil || !behind {
			return err
		}
		if err := q.Exec(ctx, s.Q.LockTable); err != nil {
			return err
		}
		return q.Query(ctx, s.Q.RepairSequence, nil, func(Row) error { return nil })
	})
	if err != nil {
		return err
	}
	return s.CheckShape(ctx, db)
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
	return []string{q.CreateIncarnation, q.CreateIncarnationFunction, q.CreateAcquire, q.CreateRelease, q.CreateAcquireShared, q.CreateFence, q.CreateFenceTrigger}
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
	return &SchemaError{Migrate: true, Msg: fmt.Sprintf("the token sequence %s is behind the largest token in %s (a table-only restore or a replication cutover?): new leases would get old fencing tokens; migrate the table (Client.Migrate) as a role that owns it to repair the sequence", s.Names.QualifiedSeq(), s.Names.QualifiedTable())}
}

func (s *Store) version(ctx context.Context, q Querier) (int, error) {
	var v int
	err := q.Query(ctx, s.Q.SchemaVersion, []any{s.Names.QualifiedTable()}, func(r Row) error { return r.Scan(&v) })
	return v, err
}

type existing struct{ table, seq, schema, waiters, funcs bool }

// exists reports which of the table, its sequence, their schema, the
// waiters table and the functions (both) exist.
func (s *Store) exists(ctx context.Context, q Querier) (ex existing, err error) {
	n := s.Names
	err = q.Query(ctx, s.Q.TableExists, []any{n.QualifiedTable(), n.QualifiedSeq(), n.QuotedSchema(), n.QualifiedWaiters(), n.AcquireProcedure(), n.ReleaseProcedure(), n.SharedProcedure(), n.FenceProcedure(),
		n.QualifiedIncarnation(), n.IncarnationProcedure()},
		func(r Row) error { return r.Scan(&ex.table, &ex.seq, &ex.schema, &ex.waiters, &ex.funcs) })
	return ex, err
}

// CheckShape compares the existing table with the layout this version
// expects and returns a *SchemaError naming the first mismatch (or an older
// schema version, or a token sequence behind the table, which Migrate
// repairs). It also resolves the table's lock namespace.
func (s *Store) CheckShape(ctx context.Context, q Querier) error {
	v, err := s.version(ctx, q)
	if err != nil {
		return err
	}
	if v > SchemaVersion {
		return s.newerVersion(v)
	}
	// A foreign table is reported as such, whatever its comment says.
	if err := s.checkColumns(ctx, q, v < SchemaVersion); err != nil {
		return err
	}
	if v < SchemaVersion {
		return &SchemaError{Migrate: true, Msg: fmt.Sprintf("table %s has schema version %d, this pglease needs %d; migrate it (Client.Migrate) as a role that owns it", s.Names.QualifiedTable(), v, SchemaVersion)}
	}
	if ex, err := s.exists(ctx, q); err != nil {
		return err
	} else if !ex.waiters {
		return &SchemaError{Migrate: true, Msg: fmt.Sprintf("the waiters table %s of %s is missing; migrate the table (Client.Migrate) as a role that may create it", s.Names.QualifiedWaiters(), s.Names.QualifiedTable())}
	} else if !ex.funcs {
		return &SchemaError{Migrate: true, Msg: fmt.Sprintf("the functions %s, %s, %s, %s and %s of %s, its trigger pglease_fence or the table %s are not all there; migrate the table (Client.Migrate) as a role that may create them", s.Names.AcquireProcedure(), s.Names.ReleaseProcedure(), s.Names.SharedProcedure(), s.Names.FenceProcedure(), s.Names.IncarnationProcedure(), s.Names.QualifiedTable(), s.Names.QualifiedIncarnation())}
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
		return &SchemaError{Msg: fmt.Sprintf("table %s does not exist; create it (Client.Migrate)", s.Names.QualifiedTable())}
	}
	s.ns.Store(&ns)
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
	return true, s.checkColumns(ctx, q, true)
}

// checkColumns compares the table's columns with this version's; with
// upgradable, a column a schema upgrade adds may be missing.
func (s *Store) checkColumns(ctx context.Context, q Querier, upgradable bool) error {
	got := map[string]column{}
	err := q.Query(ctx, s.Q.Columns, []any{s.Names.QualifiedTable()}, func(r Row) error {
		var c column
		if err := r.Scan(&c.name, &c.typ, &c.notNull); err != nil {
			return err
		}
		got[c.name] = c
		return nil
	})
	if err != nil {
		return err
	}
	for _, w := range wantColumns {
		g, ok := got[w.name]
		switch {
		case !ok && upgradable && upgradeAdds[w.name]:
		case !ok:
			return &SchemaError{Msg: fmt.Sprintf("table %s exists but has no column %q; it was not created by pglease or by this version (nothing was changed; pick another table or migrate it)", s.Names.QualifiedTable(), w.name)}
		case g.typ != w.typ || g.notNull != w.notNull:
			return &SchemaError{Msg: fmt.Sprintf("table %s column %q is %s (not null: %v), pglease needs %s (not null: %v); nothing was changed", s.Names.QualifiedTable(), w.name, g.typ, g.notNull, w.typ, w.notNull)}
		}
	}
	return nil
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
