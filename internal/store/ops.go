package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"
)

// Store runs the statements of one lease table.
type Store struct {
	Names Names
	Q     Queries
	ns    atomic.Pointer[string] // lock namespace, resolved by CheckShape
}

// New returns the Store of a "[schema.]table" spec.
func New(table string) (*Store, error) {
	n, err := ParseTable(table)
	if err != nil {
		return nil, err
	}
	return &Store{Names: n, Q: Build(n)}, nil
}

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

// EnsureSchema creates the table and sequence when missing, upgrades a
// table of an older schema version, and moves a sequence that is behind the
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
	if ex.table && ex.seq && ex.waiters {
		// Usable as it is, or not ours to change: done. Only what a
		// migration repairs goes on to the locked transaction below.
		var se *SchemaError
		if err := s.CheckShape(ctx, db); err == nil || !errors.As(err, &se) || !se.Migrate {
			return err
		}
	}
	err = db.InTx(ctx, func(q Querier) error {
		if err := s.LockSchema(ctx, q); err != nil {
			return err
		}
		ex, err := s.exists(ctx, q)
		if err != nil {
			return err
		}
		var stmts []string
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
			if v < SchemaVersion {
				stmts = append(stmts, s.Q.UpgradeTable, s.Q.CreateSemaphoreIndex, s.Q.CommentTable)
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
		if !ex.table {
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
	var nsp *string
	var path string
	err := q.Query(ctx, s.Q.SchemaLock, []any{s.Names.Schema}, func(r Row) error { return r.Scan(&nsp, &path) })
	if err != nil {
		return err
	}
	if nsp == nil {
		return &SchemaError{Msg: fmt.Sprintf("table %s names no schema, and none of the search_path's schemas (%s) exists to create it in: create one, set search_path to an existing schema, or name the schema in the table (SCHEMA.TABLE)", s.Names.QualifiedTable(), path)}
	}
	return nil
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

type existing struct{ table, seq, schema, waiters bool }

// exists reports which of the table, its sequence and their schema exist.
func (s *Store) exists(ctx context.Context, q Querier) (ex existing, err error) {
	err = q.Query(ctx, s.Q.TableExists, []any{s.Names.QualifiedTable(), s.Names.QualifiedSeq(), s.Names.QuotedSchema(), s.Names.QualifiedWaiters()},
		func(r Row) error { return r.Scan(&ex.table, &ex.seq, &ex.schema, &ex.waiters) })
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

// AcquireArgs are the inputs of one acquisition attempt.
type AcquireArgs struct {
	Name, Owner  string
	TTL, MinHold time.Duration
	Session      bool   // bind the lease to this database session
	Metadata     []byte // JSON object
	Client       string // the client's random id, added to the metadata
	// LockTimeout bounds this statement's waits for locks (0: the
	// session's setting).
	LockTimeout time.Duration
	// Queued: the attempt belongs to a blocked wait that queues for the
	// name (see the waiters table), and leaves the queue when it acquires;
	// its registration stays fresh for QueueTTL.
	Queued   bool
	QueueTTL time.Duration
	// FairAfter: how long a queued waiter may be overtaken by attempts
	// queued after it before the lease is promised to it.
	FairAfter time.Duration
	// Semaphore and Slots: Name is a slot of the semaphore Semaphore of
	// Slots slots, both recorded in the row. The attempt is refused
	// (AcquireResult.SlotsMismatch) while a live row of another kind holds
	// the name (see Acquire in queries.sql). Empty for a plain lease.
	Semaphore string
	Slots     int
	// inBatch: the statement shares its transaction (AcquireBatch).
	inBatch bool
}

// AcquireResult is the outcome of one attempt.
type AcquireResult struct {
	Acquired     bool
	Token        int64
	SessionBound bool
	// When acquired, Other* describe the row that was taken over, if any.
	// When not acquired, they describe the holder, with its remaining time
	// and whether it is session-bound; OtherRemaining is negative when the
	// holder could not be seen (its row appeared concurrently).
	OtherOwner     string
	OtherToken     int64
	OtherRemaining time.Duration
	// OtherClient is the holder's client id (from its metadata).
	OtherClient string
	// OtherHeartbeatAge is the holder's time since its last renewal.
	OtherHeartbeatAge time.Duration
	HolderInSession   bool
	// HolderWatchable: the session-bound holder's session still holds its
	// session lock, so it can be watched (AwaitSession of HolderSession).
	HolderWatchable bool
	// HolderSession is the backend pid of a session-bound holder's
	// session (0 when none).
	HolderSession int32
	// Ahead is the number of live waiters of other clients queued before a
	// queued attempt; while there are any, a free lease is theirs.
	Ahead int64
	// SlotsMismatch is the slot count of a live row of another kind on the
	// name (1 for a plain lease; for a slot, a slot of its semaphore with
	// another count, or a plain lease on the semaphore's name; for a plain
	// lease, a slot of a semaphore of that name), 0 when none; the attempt
	// then acquired and wrote nothing.
	SlotsMismatch int
}

// Acquire inserts or takes over the lease row in one statement, in a
// transaction that takes the name's lock first (NameLock, see queries.sql;
// a slot's semaphore's): in one round trip on a pgx pool or connection,
// between BEGIN and COMMIT otherwise. q must then be a DB (or a handle
// already in a transaction).
func (s *Store) Acquire(ctx context.Context, q Querier, a AcquireArgs) (AcquireResult, error) {
	sql, args, scan, result, err := s.acquireStmt(a)
	if err != nil {
		return AcquireResult{}, err
	}
	if b, ok := batcher(q); ok {
		rs, err := s.sendAcquire(ctx, b, []AcquireArgs{a}, 0)
		if err != nil {
			return AcquireResult{}, err
		}
		return rs[0], nil
	}
	db, ok := q.(DB)
	if !ok {
		return AcquireResult{}, fmt.Errorf("store: an acquisition of %q needs a transaction, and %T cannot start one (a pglease bug)", a.Name, q)
	}
	lock, largs := s.nameLock(a)
	err = db.InTx(ctx, func(q Querier) error {
		if err := q.Query(ctx, lock, largs, func(Row) error { return nil }); err != nil {
			return err
		}
		return q.Query(ctx, sql, args, scan)
	})
	return result(), err
}

// nameLock is the NameLock statement that precedes an acquisition in its
// transaction: the lock of the name, or of a slot's semaphore.
func (s *Store) nameLock(a AcquireArgs) (sql string, args []any) {
	ns, _ := s.lockNS() // checked by acquireStmt
	name := a.Name
	if a.Semaphore != "" {
		name = a.Semaphore
	}
	return s.Q.NameLock, []any{name, ns, a.LockTimeout.Milliseconds()}
}

// acquireStmt is the one definition of an acquisition statement, shared by
// Acquire and AcquireBatch: its SQL and arguments, the scan of its row, and
// the result once scanned.
func (s *Store) acquireStmt(a AcquireArgs) (sql string, args []any, scan func(Row) error, result func() AcquireResult, err error) {
	var r AcquireResult
	var remMS, hbMS int64
	var sess bool
	meta := a.Metadata
	if len(meta) == 0 {
		meta = []byte("{}")
	}
	ns, err := s.lockNS()
	if err != nil {
		return "", nil, nil, nil, err
	}
	var sem, slots any // NULL for a plain lease
	if a.Semaphore != "" {
		sem, slots = a.Semaphore, a.Slots
	}
	args = []any{a.Name, a.Owner, a.TTL.Milliseconds(), a.MinHold.Milliseconds(), a.Session, string(meta), ns, a.Client, a.LockTimeout.Milliseconds(),
		a.Queued, a.QueueTTL.Milliseconds(), a.FairAfter.Milliseconds(), a.inBatch, sem, slots}
	scan = func(row Row) error {
		return row.Scan(&r.Acquired, &r.Token, &sess, &r.OtherOwner, &r.OtherToken, &remMS, &hbMS, &r.OtherClient,
			&r.HolderWatchable, &r.Ahead, &r.SlotsMismatch, &r.HolderSession)
	}
	result = func() AcquireResult {
		r.OtherRemaining = time.Duration(remMS) * time.Millisecond
		r.OtherHeartbeatAge = time.Duration(hbMS) * time.Millisecond
		if r.Acquired {
			r.SessionBound = sess
		} else {
			r.HolderInSession = sess
		}
		return r
	}
	return s.Q.Acquire, args, scan, result, nil
}

// Renew extends every lease in tokens (name → token) that the client (its random id) still
// holds with its token. It returns the names renewed, and the names still
// held but not renewed because a guarded transaction has their row locked;
// a name in neither was lost.
func (s *Store) Renew(ctx context.Context, q Querier, tokens map[string]int64, client string) (r RenewResult, err error) {
	arg, err := json.Marshal(tokens)
	if err != nil {
		return r, err
	}
	r = RenewResult{Renewed: make(map[string]bool, len(tokens)), Busy: map[string]bool{}, StepDown: map[string]bool{}}
	err = q.Query(ctx, s.Q.Renew, []any{string(arg), client}, func(row Row) error {
		var name string
		var done, stepDown bool
		if err := row.Scan(&name, &done, &stepDown); err != nil {
			return err
		}
		if done {
			r.Renewed[name] = true
		} else {
			r.Busy[name] = true
		}
		if stepDown {
			r.StepDown[name] = true
		}
		return nil
	})
	return r, err
}

// RenewResult is what one renewal statement found, by lease name.
type RenewResult struct {
	Renewed  map[string]bool // renewed
	Busy     map[string]bool // still held, but a guarded transaction had the row locked
	StepDown map[string]bool // renewed, and a step-down was requested of it
}

// StepDownsRequested returns the leases of tokens (name → token), still
// held with that token, of which a step-down was requested.
func (s *Store) StepDownsRequested(ctx context.Context, q Querier, tokens map[string]int64) (map[string]bool, error) {
	arg, err := json.Marshal(tokens)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	err = q.Query(ctx, s.Q.StepDownsRequested, []any{string(arg)}, func(r Row) error {
		var name string
		if err := r.Scan(&name); err != nil {
			return err
		}
		names[name] = true
		return nil
	})
	return names, err
}

// RequestStepDown asks the live holder of name to let go (see the
// statement). ok is false when nothing live holds it.
func (s *Store) RequestStepDown(ctx context.Context, q Querier, name string) (ok bool, err error) {
	err = q.Query(ctx, s.Q.RequestStepDown, []any{name}, func(r Row) error {
		var notified int64
		ok = true
		return r.Scan(&notified)
	})
	return ok, err
}

// FairAfter is how long the first queued waiter may be overtaken once its
// turn began (see the First fragment of queries.sql): until then a free
// lease goes to whoever attempts first, the releasing client taking it
// again at once, say; afterwards it is promised to that waiter.
const FairAfter = 100 * time.Millisecond

// WakeEvery is the margin by which a waiter woken in vain (the releasing
// client took the lease again first) looks again after FairAfter, once the
// lease is promised to it: a release wakes the first waiter the first time
// and once the promise holds, not at every release of a burst.
const WakeEvery = 10 * time.Millisecond

// Release deletes (or, before the minimum hold time, keeps until then) the
// row held with token and notifies waiters. It reports whether the row was
// still ours.
func (s *Store) Release(ctx context.Context, q Querier, name string, token int64) (bool, error) {
	var n, notified, nowait int64
	ns, err := s.lockNS()
	if err != nil {
		return false, err
	}
	err = q.Query(ctx, s.Q.Release, []any{name, token, s.Names.Channel, ns, FairAfter.Milliseconds()},
		func(r Row) error { return r.Scan(&n, &notified, &nowait) })
	return n > 0, err
}

// Guard checks, inside the caller's transaction, that name is held with
// token, and locks the row until that transaction ends; the server ends
// the transaction's session if it then sits idle for longer than idle
// (at most the setting's maximum, about 24 days). When the row is not
// held with token, or held is false (the client knows the lease ended),
// the statement fails, the transaction is aborted (it cannot commit
// whatever the caller does) and the error matches [ErrNotHeld].
func (s *Store) Guard(ctx context.Context, q Querier, name string, token int64, held bool, idle time.Duration) error {
	ms := min(max(idle.Milliseconds(), 1), math.MaxInt32)
	err := q.Query(ctx, s.Q.Guard, []any{name, token, ms, held}, func(r Row) error {
		var setting string
		return r.Scan(&setting)
	})
	// The statement refuses by setting an invalid value, and nothing else
	// in it can be invalid: ms is within the setting's range.
	if sqlState(err) == "22023" { // invalid_parameter_value
		return fmt.Errorf("%w (%w)", ErrNotHeld, err)
	}
	return err
}

// Record is one row as read with the server clock.
type Record struct {
	Name, Owner                           string
	Token                                 int64
	AcquiredAt, RenewedAt, ExpiresAt      time.Time
	TTL, Remaining, HeartbeatAge, HeldFor time.Duration
	SessionBound                          bool
	Metadata                              string
}

func scanRecord(r Row) (Record, error) {
	var rec Record
	var ttl, rem, hb, held int64
	err := r.Scan(&rec.Name, &rec.Owner, &rec.Token, &rec.AcquiredAt, &rec.RenewedAt, &rec.ExpiresAt,
		&ttl, &rem, &hb, &held, &rec.SessionBound, &rec.Metadata)
	ms := time.Millisecond
	rec.TTL, rec.Remaining, rec.HeartbeatAge, rec.HeldFor = time.Duration(ttl)*ms, time.Duration(rem)*ms, time.Duration(hb)*ms, time.Duration(held)*ms
	return rec, err
}

// Get reads one row; ok is false when there is none.
func (s *Store) Get(ctx context.Context, q Querier, name string) (rec Record, ok bool, err error) {
	err = q.Query(ctx, s.Q.Get, []any{name}, func(r Row) error {
		ok = true
		rec, err = scanRecord(r)
		return err
	})
	return rec, ok, err
}

// List reads every row, ordered by name.
func (s *Store) List(ctx context.Context, q Querier) ([]Record, error) {
	var out []Record
	err := q.Query(ctx, s.Q.List, nil, func(r Row) error {
		rec, err := scanRecord(r)
		out = append(out, rec)
		return err
	})
	return out, err
}

// ForceRelease deletes the row of name whoever holds it, notifies waiters,
// and returns what was deleted.
func (s *Store) ForceRelease(ctx context.Context, q Querier, name string) (rec Record, ok bool, err error) {
	ns, err := s.lockNS()
	if err != nil {
		return rec, false, err
	}
	err = q.Query(ctx, s.Q.ForceRelease, []any{name, s.Names.Channel, ns}, func(r Row) error {
		ok = true
		rec, err = scanRecord(r)
		return err
	})
	return rec, ok, err
}

// Cleanup deletes expired rows and returns how many.
func (s *Store) Cleanup(ctx context.Context, q Querier) (int64, error) {
	var n int64
	err := q.Query(ctx, s.Q.Cleanup, nil, func(r Row) error { return r.Scan(&n) })
	return n, err
}

// SessionKeepalive makes the server wait at least ttl before it declares
// this session's peer dead.
func (s *Store) SessionKeepalive(ctx context.Context, q Querier, ttl time.Duration) error {
	secs := int64((ttl + time.Second - 1) / time.Second)
	return q.Query(ctx, s.Q.SessionKeepalive, []any{fmt.Sprint(secs), fmt.Sprint(2 * ttl.Milliseconds())}, func(Row) error { return nil })
}

// SessionSettings bounds every statement of the dedicated connection on the
// server side: statement and lock waits end in an error, never in a broken
// session.
func (s *Store) SessionSettings(ctx context.Context, q Querier, statement, lock time.Duration) error {
	return q.Query(ctx, s.Q.SessionSettings, []any{fmt.Sprint(statement.Milliseconds()), fmt.Sprint(lock.Milliseconds())}, func(Row) error { return nil })
}

// AwaitSession blocks until the dedicated session of backend pid ends (at
// once when it is gone already).
func (s *Store) AwaitSession(ctx context.Context, q Querier, pid int32) error {
	ns, err := s.lockNS()
	if err != nil {
		return err
	}
	return q.Query(ctx, s.Q.AwaitSession, []any{pid, ns}, func(Row) error { return nil })
}

// SessionLock takes the session lock of this session (see SessionLock in
// queries.sql), for as long as the session lives; taking it again is
// harmless. A session must hold it before it acquires anything
// session-bound: the rows it writes are trusted only as long as it does.
func (s *Store) SessionLock(ctx context.Context, q Querier) error {
	ns, err := s.lockNS()
	if err != nil {
		return err
	}
	return q.Query(ctx, s.Q.SessionLock, []any{ns}, func(Row) error { return nil })
}

// ClientLock takes the session lock of this session and then the client
// lock of client, both for as long as the session lives (see queries.sql);
// it fails when the session's lock_timeout passes before the client lock
// is had, with the session lock taken all the same.
func (s *Store) ClientLock(ctx context.Context, q Querier, client string) error {
	ns, err := s.lockNS()
	if err != nil {
		return err
	}
	if err := s.SessionLock(ctx, q); err != nil {
		return err
	}
	return q.Query(ctx, s.Q.ClientLock, []any{ns, client}, func(Row) error { return nil })
}

// Unqueue removes client's registration for name from the queue of
// waiters.
func (s *Store) Unqueue(ctx context.Context, q Querier, client, name string) error {
	return q.Query(ctx, s.Q.Unqueue, []any{client, name}, func(Row) error { return nil })
}
