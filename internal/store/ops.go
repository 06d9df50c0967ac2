package store

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// Store runs the statements of one lease table.
type Store struct {
	Names Names
	Q     Queries
	// OnBlocked, when set, hears every attempt of a migration
	// (EnsureSchema) that gave up on a lock and will be tried again.
	OnBlocked func(*BlockedError)
	ns        atomic.Pointer[string] // lock namespace, resolved by CheckShape
}

// New returns the Store of a "[schema.]table" spec.
func New(table string) (*Store, error) {
	n, err := ParseTable(table)
	if err != nil {
		return nil, err
	}
	return &Store{Names: n, Q: Build(n)}, nil
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
	// Kind is the row's kind as the row records it ("plain", "semaphore",
	// "shared", or a later version's word as it is); Of the name it
	// belongs to ("" for a plain lease); Size its kind's size (0 for a
	// kind without one); Weight the units of Size it takes (see RowKind
	// and Record in queries.sql).
	Kind, Of     string
	Size, Weight int
}

func scanRecord(r Row) (Record, error) {
	var rec Record
	var ttl, rem, hb, held int64
	err := r.Scan(&rec.Name, &rec.Owner, &rec.Token, &rec.AcquiredAt, &rec.RenewedAt, &rec.ExpiresAt,
		&ttl, &rem, &hb, &held, &rec.SessionBound, &rec.Metadata, &rec.Kind, &rec.Of, &rec.Size, &rec.Weight)
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

// Waiter is one live registration of the queue (see Waiters in
// queries.sql).
type Waiter struct {
	Name, Owner string
	Since       time.Time
	Waited      time.Duration
	// Kind is the kind of lease waited for: "plain" for an exclusive wait,
	// else the kind of the rows that share the name ("shared", or a later
	// version's word; see Waiters in queries.sql).
	Kind string
}

// Waiters reads the live waiters queued for names (every name when
// empty), in queue order per name.
func (s *Store) Waiters(ctx context.Context, q Querier, names []string) ([]Waiter, error) {
	if names == nil {
		names = []string{}
	}
	list, err := json.Marshal(names)
	if err != nil {
		return nil, err
	}
	var out []Waiter
	err = q.Query(ctx, s.Q.Waiters, []any{string(list), s.Names.QualifiedTable()}, func(r Row) error {
		var w Waiter
		var ms int64
		if err := r.Scan(&w.Name, &w.Owner, &w.Since, &ms, &w.Kind); err != nil {
			return err
		}
		w.Waited = time.Duration(ms) * time.Millisecond
		out = append(out, w)
		return nil
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

// Orphan is a live row of a client, by name and token (see Orphans).
type Orphan struct {
	Name  string
	Token int64
}

// Orphans reads the live rows of client named in names, and the rows of
// its shared leases of the names in shared (see Orphans in queries.sql).
func (s *Store) Orphans(ctx context.Context, q Querier, client string, names, shared []string) ([]Orphan, error) {
	args := []any{client}
	for _, list := range [][]string{names, shared} {
		if list == nil {
			list = []string{}
		}
		b, err := json.Marshal(list)
		if err != nil {
			return nil, err
		}
		args = append(args, string(b))
	}
	var out []Orphan
	err := q.Query(ctx, s.Q.Orphans, args, func(r Row) error {
		var o Orphan
		err := r.Scan(&o.Name, &o.Token)
		out = append(out, o)
		return err
	})
	return out, err
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
// once when it is gone already), or for at most wait: then it fails with a
// lock timeout.
func (s *Store) AwaitSession(ctx context.Context, conn Batcher, pid int32, wait time.Duration) error {
	ns, err := s.lockNS()
	if err != nil {
		return err
	}
	return s.await(ctx, conn, wait, s.Q.AwaitSession, pid, ns)
}

// SessionLock takes the session lock of this session (see SessionLock in
// session.sql), for as long as the session lives; taking it again is
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
// lock of client, both for as long as the session lives (see session.sql);
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

// EndEarlierSession ends the backends other than this session's that hold
// the client lock of client (earlier sessions of that client the server
// kept: see EndEarlierSession in session.sql) and returns their pids. A
// role without the privileges to end them gets an error of
// KindPrivilege.
func (s *Store) EndEarlierSession(ctx context.Context, q Querier, client string) ([]int32, error) {
	ns, err := s.lockNS()
	if err != nil {
		return nil, err
	}
	var pids []int32
	err = q.Query(ctx, s.Q.EndEarlierSession, []any{ns, client}, func(r Row) error {
		var pid int32
		var ended bool
		if err := r.Scan(&pid, &ended); err != nil {
			return err
		}
		if ended {
			pids = append(pids, pid)
		}
		return nil
	})
	return pids, err
}

// Unqueue removes client's registration for name from the queue of
// waiters.
func (s *Store) Unqueue(ctx context.Context, q Querier, client, name string) error {
	return q.Query(ctx, s.Q.Unqueue, []any{client, name}, func(Row) error { return nil })
}

// Ahead returns the client of the live waiter queued directly ahead of
// client's registration for name (see Ahead in queries.sql), or "" when
// the registration is first or absent.
func (s *Store) Ahead(ctx context.Context, q Querier, client, name string) (string, error) {
	ns, err := s.lockNS()
	if err != nil {
		return "", err
	}
	var ahead string
	err = q.Query(ctx, s.Q.Ahead, []any{client, name, ns}, func(r Row) error { return r.Scan(&ahead) })
	return ahead, err
}

// Bells is the number of bell locks a client's session rings through (see
// Ring in session.sql).
const Bells = 16

// nextBell is the bell a ring from held takes (see the ring macro).
func nextBell(held int) int { return (held + 1) % Bells }

// Ring rings client's doorbell on its dedicated session, which holds bell
// held: it takes the next one and frees held. It returns the bell now held.
func (s *Store) Ring(ctx context.Context, q Querier, client string, held int) (int, error) {
	ns, err := s.lockNS()
	if err != nil {
		return held, err
	}
	if err := q.Query(ctx, s.Q.Ring, []any{ns, client, held}, func(Row) error { return nil }); err != nil {
		return held, err
	}
	return nextBell(held), nil
}

// ProbeBell returns the bell client's session holds now, and false when it
// holds none (its session is down, or the client rings no bell). While it
// rings (two adjacent bells held), the one about to be freed is returned.
func (s *Store) ProbeBell(ctx context.Context, q Querier, client string) (int, bool, error) {
	ns, err := s.lockNS()
	if err != nil {
		return 0, false, err
	}
	var held []int
	err = q.Query(ctx, s.Q.ProbeBell, []any{ns, client}, func(r Row) error {
		var k int32
		err := r.Scan(&k)
		held = append(held, int(k))
		return err
	})
	if err != nil {
		return 0, false, err
	}
	k, ok := heldBell(held)
	return k, ok, nil
}

// heldBell is the bell a client holding the bells held (in order) holds,
// as ProbeBell reports it.
func heldBell(held []int) (int, bool) {
	switch {
	case len(held) == 0:
		return 0, false
	case len(held) == 2 && held[0] == 0 && held[1] == Bells-1:
		return Bells - 1, true // ringing from the last bell to the first
	}
	return held[0], true
}

// AwaitBell blocks until bell k of client is free (its session rang it, or
// ended), or for at most wait: then it fails with a lock timeout.
func (s *Store) AwaitBell(ctx context.Context, conn Batcher, client string, k int, wait time.Duration) error {
	ns, err := s.lockNS()
	if err != nil {
		return err
	}
	return s.await(ctx, conn, wait, s.Q.AwaitBell, ns, client, k)
}

// AwaitHeldBell is AwaitBell for a bell that client is expected to hold.
// When bell k is free already, it does not wait: rang is false, and now
// and ok are the bell the client holds instead, as ProbeBell reports it.
func (s *Store) AwaitHeldBell(ctx context.Context, conn Batcher, client string, k int, wait time.Duration) (rang bool, now int, ok bool, err error) {
	ns, err := s.lockNS()
	if err != nil {
		return false, 0, false, err
	}
	var held []int32
	err = s.awaitRow(ctx, conn, wait, func(r Row) error { return r.Scan(&rang, &held) }, s.Q.AwaitHeldBell, ns, client, k)
	if err != nil || rang {
		return rang, 0, false, err
	}
	hs := make([]int, len(held))
	for i, h := range held {
		hs[i] = int(h)
	}
	now, ok = heldBell(hs)
	return false, now, ok, nil
}
