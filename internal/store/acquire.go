package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

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
	// its registration stays fresh for QueueTTL. A QueueTTL without Queued
	// (a plain lease's wait without a session) registers the wait as a
	// polling one when shared holders refuse it (see CreateAcquire).
	Queued   bool
	QueueTTL time.Duration
	// FairAfter: how long a queued waiter may be overtaken by attempts
	// queued after it before the lease is promised to it.
	FairAfter time.Duration
	// Semaphore and Slots: Name is a slot of the semaphore Semaphore of
	// Slots slots, both recorded in the row (its kind, RowSemaphore). The
	// attempt is refused (AcquireResult.Clash) while a live row of another
	// kind holds the name (see CreateAcquire in functions.sql). Empty for a
	// plain lease (RowPlain).
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
	// Holders, when a quota refused the attempt, are the quota's live
	// session-bound holders, by row, with their backend pids: the death
	// of any of them may free the units the attempt needs (nil for the
	// other kinds, whose refusal names the one holder that matters).
	Holders map[string]int32
	// Ahead is the number of live waiters of other clients queued before a
	// queued attempt; while there are any, a free lease is theirs.
	Ahead int64
	// Clash is a live row of another kind on the name (for a slot, a slot
	// of its semaphore with another count, shared leases of the semaphore's
	// name, or a plain lease on it; for a plain lease, a slot of a
	// semaphore of that name; for a shared lease, a slot of a semaphore of
	// its name); the attempt then acquired and wrote nothing. The zero
	// Clash when none.
	Clash Clash
}

// The kinds of lease as a row records them in the table's "kind" column
// (schema version 10) and a Clash names them. A kind with rules of its own
// has its own acquisition function, which records its own word here.
const (
	RowPlain     = "plain"     // a plain (exclusive) lease; "slots" is NULL
	RowSemaphore = "semaphore" // a slot of a semaphore ("semaphore"), of "slots" slots
	RowShared    = "shared"    // one shared lease of the name "semaphore"; "slots" is 0
	RowQuota     = "quota"     // "weight" units of the quota "semaphore", of "slots" units
)

// Clash is the live lease of another kind that refused an attempt, as the
// server names it: its kind (RowPlain, RowSemaphore, RowShared, or the
// word of a kind a later version added) and its size (a semaphore's slot
// count; 0 for a kind without a size). The zero Clash is none.
type Clash struct {
	Kind string
	Size int
}

// kind is the kind of lease the call asks for.
func (c acquireCall) kind() string {
	if c.Semaphore != "" {
		return RowSemaphore
	}
	return RowPlain
}

// Acquire inserts or takes over the lease row: one call of the table's
// acquisition function (CreateAcquire in functions.sql), which takes the
// name's lock and then reads and writes, in one statement and one round
// trip on every kind of handle (a pool, a connection, database/sql, or a
// caller's transaction).
func (s *Store) Acquire(ctx context.Context, q Querier, a AcquireArgs) (AcquireResult, error) {
	sql, args, scan, result, err := s.acquireStmt(a)
	if err != nil {
		return AcquireResult{}, err
	}
	rows := 0
	err = q.Query(ctx, sql, args, func(r Row) error { rows++; return scan(r) })
	if err == nil && rows != 1 {
		err = fmt.Errorf("store: the acquisition of %q returned %d rows (a pglease bug)", a.Name, rows)
	}
	if err != nil {
		return AcquireResult{}, err
	}
	return result(), nil
}

// acquireStmt is the one definition of an acquisition statement, shared by
// Acquire and AcquireBatch: its SQL and arguments, the scan of its row, and
// the result once scanned.
func (s *Store) acquireStmt(a AcquireArgs) (sql string, args []any, scan func(Row) error, result func() AcquireResult, err error) {
	ns, err := s.lockNS()
	if err != nil {
		return "", nil, nil, nil, err
	}
	var x acquireRow
	scan = func(row Row) error { return row.Scan(acquireColumns.dest(&x)...) }
	return s.Q.Acquire, acquireParams.args(acquireCall{AcquireArgs: a, meta: metadata(a.Metadata), ns: ns}), scan, x.result, nil
}

// metadata is a lease's metadata as the functions take it: a JSON object,
// "{}" when none.
func metadata(meta []byte) string {
	if len(meta) == 0 {
		return "{}"
	}
	return string(meta)
}

// SharedArgs are the arguments of an acquisition attempt at a row of its
// own among a name's (AcquireShared): those of AcquireArgs that apply
// (Name is the name, not a row's), Mine, the rows of the name this client
// holds, and the kind: a shared lease (Kind "" or RowShared), or Weight
// units of a quota of Capacity units (RowQuota).
type SharedArgs struct {
	AcquireArgs
	Mine             []string
	Kind             string
	Weight, Capacity int
}

// AcquireShared makes one attempt at a row of its own among a.Name's (a
// shared lease, or units of a quota): one call of the table's shared
// acquisition function (CreateAcquireShared in functions.sql). It returns
// the outcome, as Acquire does, and the row acquired ("name#i").
func (s *Store) AcquireShared(ctx context.Context, q Querier, a SharedArgs) (AcquireResult, string, error) {
	ns, err := s.lockNS()
	if err != nil {
		return AcquireResult{}, "", err
	}
	mine := a.Mine
	if mine == nil {
		mine = []string{}
	}
	list, err := json.Marshal(mine)
	if err != nil {
		return AcquireResult{}, "", err
	}
	var x acquireRow
	rows := 0
	err = q.Query(ctx, s.Q.AcquireShared, sharedParams.args(sharedCall{SharedArgs: a, meta: metadata(a.Metadata), ns: ns, mine: string(list)}),
		func(r Row) error { rows++; return r.Scan(sharedColumns.dest(&x)...) })
	if err == nil && rows != 1 {
		err = fmt.Errorf("store: the shared acquisition of %q returned %d rows (a pglease bug)", a.Name, rows)
	}
	if err != nil {
		return AcquireResult{}, "", err
	}
	return x.result(), x.name, nil
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
// row held with token and notifies waiters: one call of the table's
// release function (CreateRelease in functions.sql). It reports whether
// the row was still ours.
func (s *Store) Release(ctx context.Context, q Querier, name string, token int64) (ReleaseResult, error) {
	return s.release(ctx, q, releaseCall{name: name, token: token, bell: -1})
}

// ReleaseAndRing is Release run on the dedicated session of client, which
// holds the bell held of its doorbell: a release that wakes the first
// waiter rings it in the same statement (see CreateRelease), and the
// result says so (Rang) and which bell the session holds then (Bell).
func (s *Store) ReleaseAndRing(ctx context.Context, q Querier, name string, token int64, client string, held int) (ReleaseResult, error) {
	r, err := s.release(ctx, q, releaseCall{name: name, token: token, client: client, bell: held})
	r.Bell = held
	if r.Rang {
		r.Bell = nextBell(held)
	}
	return r, err
}

func (s *Store) release(ctx context.Context, q Querier, c releaseCall) (ReleaseResult, error) {
	ns, err := s.lockNS()
	if err != nil {
		return ReleaseResult{}, err
	}
	c.channel, c.ns, c.fairAfter = s.Names.Channel, ns, FairAfter.Milliseconds()
	var x releaseRow
	err = q.Query(ctx, s.Q.Release, releaseParams.args(c), func(r Row) error { return r.Scan(releaseColumns.dest(&x)...) })
	// The release function notifies the first waiter's channel and the
	// table's together, and only so, when it wakes the first waiter; it
	// notifies nothing when it deletes the row while that waiter, woken
	// already in its turn, looks again by itself, or keeps the row.
	return ReleaseResult{Released: x.released > 0, WokeFirst: x.notified == 2, Unannounced: x.released > 0 && x.notified == 0,
		Rang: err == nil && x.rang}, err
}

// ReleaseResult is the outcome of a release.
type ReleaseResult struct {
	Released bool // the row was deleted, or kept until its minimum hold
	// WokeFirst: the release woke the first waiter of the queue, whose
	// client may watch the releasing client's doorbell: ring it, unless
	// the release did (Rang).
	WokeFirst bool
	// Rang: the release rang the doorbell itself (ReleaseAndRing); Bell
	// is the bell the session holds after it.
	Rang bool
	Bell int
	// Unannounced: the release woke nobody, as the name's first waiter,
	// woken already in its turn (within FairAfter), looks again by itself
	// (or the row was kept until its minimum hold). Waiters behind it that
	// watch the releasing client's doorbell learn from no ring that
	// another client may take the name now.
	Unannounced bool
}
