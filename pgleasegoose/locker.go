// Package pgleasegoose lets goose (github.com/pressly/goose/v3) migrate a
// database from many pods at once and run each migration once: the pods
// take turns through a pglease lease.
//
// A [Locker] is both a goose lock.SessionLocker and a lock.Locker. Give it
// to goose.NewProvider with goose.WithSessionLocker (or goose.WithLocker),
// with its [Locker.Store] (goose.WithStore, dialect goose.DialectCustom):
// Provider.Up then acquires the lease before it reads the version table
// and releases it once the migrations have run, and each migration
// commits only while the lease is held. The pods that start while
// another one migrates wait for the lease (pglease.Client.Acquire, woken
// at once by the release), then find the migrations applied and apply
// only what is left.
//
// # Failure model
//
//   - A pod killed mid-migration: its migration's transaction is rolled
//     back by PostgreSQL when the pod's connection closes, and goose's
//     version row, written in the same transaction, with it. The lease is
//     free for the next pod when its TTL runs out, or at once when it was
//     taken with pglease.WithFastFailover (the lease ends with the pod's
//     pglease session). The next pod then applies the migration again,
//     whole. A backend busy in a long statement notices its client's end
//     only when the statement ends, unless the server checks
//     (client_connection_check_interval, PostgreSQL 14 and later): set it
//     on goose's connections so that the killed pod's transaction, and the
//     locks it holds, end at once too.
//   - A pod that loses its lease while it migrates (it was cut off from
//     the database for longer than the TTL, or an operator force-released
//     the lease): give goose the Locker's [Locker.Store] too, and every
//     write of goose's version row is fenced by the lease. The row is
//     written at the end of the migration's transaction, after a
//     pglease.Lease.GuardSQL in the same transaction, so the migration
//     running at the loss cannot commit: it is rolled back, Up stops
//     there, and its error wraps pglease.ErrLeaseLost. A migration that
//     began after the loss is rolled back the same way, so none commits
//     after it. Give Up the Locker's [Locker.Context] too, and the pod
//     stops as soon as it sees the loss: the statement running is
//     cancelled, and no further migration begins. Without the Store, goose cannot be stopped: the pod goes on
//     with every remaining migration while the next pod runs them too, and
//     only Up's error (from SessionUnlock) tells. A migration that runs
//     outside a transaction (-- +goose NO TRANSACTION) cannot be undone:
//     it runs to its end, its version row is refused, and the next pod
//     may run it again.
//   - goose's other entry points that do not lock (Provider.HasPending,
//     Provider.Status) read without the lease, as goose documents.
//
// The lease's fencing token is available to Go migrations through
// [Locker.Lease], for writes that must be fenced (pglease.Lease.Guard).
package pgleasegoose

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/pglease/pglease"
	"github.com/pressly/goose/v3/database"
	"github.com/pressly/goose/v3/lock"
)

// Locker runs goose's migrations under the pglease lease of one name.
// Share one Locker, or one name, among every pod that migrates the same
// database.
type Locker struct {
	c    *pglease.Client
	name string
	opts []pglease.Option

	mu    sync.Mutex
	lease *pglease.Lease
	stop  func() bool // ends the watch of Context's binding, if any
}

var (
	_ lock.SessionLocker = (*Locker)(nil)
	_ lock.Locker        = (*Locker)(nil)
)

// New returns a Locker of the lease name (for example "goose") on c's
// table, acquired with opts (pglease.WithTTL, pglease.WithFastFailover, …).
// The lease name follows pglease's rules; New does not check it, the first
// Lock does.
func New(c *pglease.Client, name string, opts ...pglease.Option) *Locker {
	return &Locker{c: c, name: name, opts: opts}
}

// SessionLock acquires the lease, waiting until it is free or ctx ends
// (goose's lock.SessionLocker). The connection goose passes is not used:
// the lease lives in the pglease client.
func (l *Locker) SessionLock(ctx context.Context, _ *sql.Conn) error { return l.lock(ctx) }

// SessionUnlock releases the lease (goose's lock.SessionLocker). Its error
// wraps pglease.ErrLeaseLost when the lease was lost while goose ran.
func (l *Locker) SessionUnlock(ctx context.Context, _ *sql.Conn) error { return l.unlock(ctx) }

// Lock is SessionLock for goose's lock.Locker.
func (l *Locker) Lock(ctx context.Context, _ *sql.DB) error { return l.lock(ctx) }

// Unlock is SessionUnlock for goose's lock.Locker.
func (l *Locker) Unlock(ctx context.Context, _ *sql.DB) error { return l.unlock(ctx) }

// Lease returns the lease held while goose migrates, or nil.
func (l *Locker) Lease() *pglease.Lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lease
}

// bindKey is the key of the cancel function Context puts in a context.
type bindKey struct{ l *Locker }

// Context returns a context, derived from ctx, to give goose's Up (or
// another goose call that locks): it ends when the lease this Locker takes
// within that call is lost, with a cause wrapping pglease.ErrLeaseLost.
// goose then starts no further migration, and database/sql cancels the
// statement running and rolls its transaction back, instead of letting the
// migration run to its end only to be refused by the [Locker.Store]'s
// guard. The loss is seen when a renewal (or a Guard) finds it: until
// then the Store's guard is what keeps a migration from committing. Call
// cancel when the goose call has returned.
//
//	ctx, cancel := locker.Context(ctx)
//	defer cancel()
//	results, err := provider.Up(ctx)
func (l *Locker) Context(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	return context.WithValue(ctx, bindKey{l}, cancel), func() { cancel(nil) }
}

func (l *Locker) lock(ctx context.Context) error {
	// Two providers of one process that share the Locker take turns: the
	// client grants a name to one of its callers at a time.
	lease, err := l.c.Acquire(ctx, l.name, l.opts...)
	if err != nil {
		return fmt.Errorf("pgleasegoose: lock %q for the migrations: %w", l.name, err)
	}
	stop := func() bool { return false }
	if cancel, ok := ctx.Value(bindKey{l}).(context.CancelCauseFunc); ok {
		stop = context.AfterFunc(lease.Context(), func() {
			if cause := context.Cause(lease.Context()); errors.Is(cause, pglease.ErrLeaseLost) {
				cancel(fmt.Errorf("pgleasegoose: the lease %q was lost while goose migrated: %w", l.name, cause))
			}
		})
	}
	l.mu.Lock()
	l.lease, l.stop = lease, stop
	l.mu.Unlock()
	return nil
}

func (l *Locker) unlock(ctx context.Context) error {
	l.mu.Lock()
	lease, stop := l.lease, l.stop
	l.lease, l.stop = nil, nil
	l.mu.Unlock()
	if stop != nil {
		stop()
	}
	if lease == nil {
		return fmt.Errorf("pgleasegoose: unlock %q: not locked (goose unlocks only what it locked: a Locker shared by two goose providers that do not take turns?)", l.name)
	}
	// Err first: it ends a lease whose deadline passed, so that Cause
	// tells a loss from this release.
	if lctx := lease.Context(); lctx.Err() != nil {
		if cause := context.Cause(lctx); errors.Is(cause, pglease.ErrLeaseLost) {
			_ = lease.Release(ctx) // frees the local slot; the row is not ours
			return fmt.Errorf("pgleasegoose: the lease %q was lost while goose migrated; another pod may have run migrations meanwhile (check goose's version table): %w", l.name, cause)
		}
	}
	if err := lease.Release(ctx); err != nil {
		return fmt.Errorf("pgleasegoose: unlock %q: %w", l.name, err)
	}
	return nil
}

// Store returns goose's store of its version table, table of dialect
// (goose's database.NewStore; table "" is goose's default,
// goose_db_version), whose every write is fenced by the Locker's lease:
// goose writes a migration's version row in the migration's own
// transaction, and the Store calls pglease.Lease.GuardSQL in that
// transaction first. A migration therefore commits only while the lease
// is held with the token it was acquired with, and a takeover waits for
// that commit. When the lease was lost, the write fails with an error
// wrapping pglease.ErrLeaseLost, the migration is rolled back, and goose
// stops. Give it to goose with the Locker, and goose.DialectCustom as
// NewProvider's dialect:
//
//	store, err := locker.Store(database.DialectPostgres, "")
//	provider, err := goose.NewProvider(goose.DialectCustom, db, fsys,
//		goose.WithStore(store), goose.WithSessionLocker(locker))
//
// The Guard runs on goose's connection, so the lease table (the pglease
// client's Config.Table, as goose's connection resolves it) must be in the
// database goose migrates, and goose's role must be allowed to lock its
// rows (SELECT … FOR SHARE). Outside a transaction (a migration marked
// NO TRANSACTION, goose.WithIsolateDDL) the Store opens one of its own for
// the guard and the version row. Goose writes only version 0 without the
// lock (when HasPending or Status create the table); any other write
// without the lease held fails.
func (l *Locker) Store(dialect database.Dialect, table string) (database.Store, error) {
	if table == "" {
		table = "goose_db_version"
	}
	s, err := database.NewStore(dialect, table)
	if err != nil {
		return nil, fmt.Errorf("pgleasegoose: store: %w", err)
	}
	return &fencedStore{Store: s, l: l}, nil
}

// fencedStore is goose's store with its writes fenced by a Locker's lease.
type fencedStore struct {
	database.Store
	l *Locker
}

var _ database.StoreExtender = (*fencedStore)(nil)

// TableExists is the wrapped store's, when it has one.
func (s *fencedStore) TableExists(ctx context.Context, db database.DBTxConn) (bool, error) {
	if x, ok := s.Store.(database.StoreExtender); ok {
		return x.TableExists(ctx, db)
	}
	return false, errors.ErrUnsupported
}

// Insert writes a version row under the lease's guard.
func (s *fencedStore) Insert(ctx context.Context, db database.DBTxConn, req database.InsertRequest) error {
	return s.fenced(ctx, db, req.Version, func(db database.DBTxConn) error { return s.Store.Insert(ctx, db, req) })
}

// Delete removes a version row under the lease's guard.
func (s *fencedStore) Delete(ctx context.Context, db database.DBTxConn, version int64) error {
	return s.fenced(ctx, db, version, func(db database.DBTxConn) error { return s.Store.Delete(ctx, db, version) })
}

// beginner is what goose passes outside a transaction: *sql.Conn or *sql.DB.
type beginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

func (s *fencedStore) fenced(ctx context.Context, db database.DBTxConn, version int64, write func(database.DBTxConn) error) (err error) {
	lease := s.l.Lease()
	if lease == nil {
		if version == 0 {
			return write(db)
		}
		return fmt.Errorf("pgleasegoose: goose wrote version %d without the lease %q: give goose the Locker as well as its Store (goose.WithSessionLocker or goose.WithLocker)", version, s.l.name)
	}
	tx, ok := db.(*sql.Tx)
	if !ok {
		b, ok := db.(beginner)
		if !ok {
			return fmt.Errorf("pgleasegoose: cannot fence version %d on a %T", version, db)
		}
		if tx, err = b.BeginTx(ctx, nil); err != nil {
			return err
		}
		defer func() {
			if err != nil {
				_ = tx.Rollback()
				return
			}
			err = tx.Commit()
		}()
	}
	if err := lease.GuardSQL(ctx, tx); err != nil {
		if errors.Is(err, pglease.ErrNotHeld) {
			return fmt.Errorf("pgleasegoose: the lease %q was lost before version %d was recorded: goose stops here, its migration rolled back if it ran in a transaction (another pod may run it): %w", s.l.name, version, err)
		}
		return fmt.Errorf("pgleasegoose: guard version %d with the lease %q: %w", version, s.l.name, err)
	}
	return write(tx)
}
