// Package pgleasegoose lets goose (github.com/pressly/goose/v3) migrate a
// database from many pods at once and run each migration once: the pods
// take turns through a pglease lease.
//
// A [Locker] is both a goose lock.SessionLocker and a lock.Locker. Give it
// to goose.NewProvider with goose.WithSessionLocker (or goose.WithLocker):
// Provider.Up then acquires the lease before it reads the version table
// and releases it once the migrations have run. The pods that start while
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
//     the database for longer than the TTL): goose cannot be stopped in
//     the middle of a migration, so the pod finishes what it runs, and
//     another pod may run the same migration meanwhile. Up reports the
//     loss: its error wraps pglease.ErrLeaseLost. Choose a TTL that your
//     network's partitions do not outlast; renewal keeps a lease held for
//     as long as its pod runs, however long the migrations take.
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

func (l *Locker) lock(ctx context.Context) error {
	// Two providers of one process that share the Locker take turns: the
	// client grants a name to one of its callers at a time.
	lease, err := l.c.Acquire(ctx, l.name, l.opts...)
	if err != nil {
		return fmt.Errorf("pgleasegoose: lock %q for the migrations: %w", l.name, err)
	}
	l.mu.Lock()
	l.lease = lease
	l.mu.Unlock()
	return nil
}

func (l *Locker) unlock(ctx context.Context) error {
	l.mu.Lock()
	lease := l.lease
	l.lease = nil
	l.mu.Unlock()
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
