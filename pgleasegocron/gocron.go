// Package pgleasegocron runs the jobs of gocron v2
// (github.com/go-co-op/gocron/v2) on one replica of many, through
// pglease: a [Locker] (one run of a job at a time, fleet-wide) and an
// [Elector] (only the leader's scheduler runs jobs).
//
// # Which one
//
// gocron asks a Locker for a job's lock each time the job fires, by the
// job's name, and gives it back when the run ends. Replicas' firings of
// one tick come apart by their clocks' skew and, for interval jobs, by
// when each scheduler started: a short run is over before a later replica
// fires, which then takes the free lock and runs the tick again (gocron
// issue #841). A lock has no way to tell ticks apart, as gocron passes it
// only the job's name. So keep the lease past the run with
// pglease.WithMinHold(d): a firing less than d after a run began, on any
// replica, finds the lease held and skips. Choose d above the replicas'
// spread and below the job's period. Runs then do not double, and the
// replica that fired first keeps the job's cadence.
//
// An Elector has no such window: one replica leads, and only its
// scheduler runs jobs. When the leader dies, another replica leads once
// the lease is free: after its TTL, or at once with
// pglease.WithFastFailover. Fast failover may run again the tick the dead
// leader ran last, if the new leader's scheduler fires that tick after it
// took over. Replicas that start together run a job that starts
// immediately once between them: a replica's IsLeader waits for its first
// election (at most 5 s) rather than answering "not the leader" while
// nobody leads yet.
//
// Any job name gocron accepts works with the Locker: a name that does not
// make a valid lease name as it is ("shard#1", the form of a slot's name;
// one longer than a lease name may be; one that is not UTF-8) is fitted
// into one of its own by pglease.FitName ([LeaseName]).
//
// # Failure model
//
//   - A replica killed while it holds a job's lease: the lease frees at its
//     TTL (or, with pglease.WithFastFailover, as soon as its session ends),
//     and the next firing anywhere runs the job. Without fast failover, the
//     other replicas' firings of the tick the kill cut short find the lease
//     still held and skip it; with it, a replica that fires that tick after
//     the kill runs it again.
//   - A lease lost while the job runs (the replica was cut off for longer
//     than the TTL): gocron cannot stop the job; another replica may run the
//     job meanwhile. The Lock's Unlock then reports the loss, and gocron
//     ignores Unlock's error.
//   - Leadership lost while the leader's jobs run: the same. IsLeader says
//     "not the leader" from the moment the lease is lost or its local
//     deadline passes, so no new run starts.
package pgleasegocron

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/pglease/pglease"
)

// LeasePrefix starts the lease name of a job's lock: "gocron:" and the
// job's name (gocron's key), as pglease.FitName(LeasePrefix, name, 0)
// makes it: the name itself when "gocron:" and the name make a valid
// lease name, so that any name gocron accepts works, "shard#1" and names
// of any length among them ([LeaseName]).
const LeasePrefix = "gocron:"

// LeaseName is the lease name of the lock of the job named job: for
// pglease ls, admin.ForceRelease and the like.
func LeaseName(job string) string { return pglease.FitName(LeasePrefix, job, 0) }

// NewLocker returns a gocron.Locker whose locks are pglease leases on c's
// table, taken with opts: pglease.WithMinHold(d) keeps a job's lease for
// d after a run began, so that the other replicas' firings of the same
// tick skip (see the package's documentation); pglease.WithTTL and
// pglease.WithFastFailover decide how soon a killed replica's lease frees.
// A firing that finds the lease held is skipped: gocron counts it as such
// and calls the job's AfterLockError hook with an error matching
// pglease.ErrNotAcquired.
func NewLocker(c *pglease.Client, opts ...pglease.Option) gocron.Locker {
	return &locker{c: c, opts: opts}
}

type locker struct {
	c    *pglease.Client
	opts []pglease.Option
}

func (l *locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	lease, err := l.c.TryAcquire(ctx, LeaseName(key), l.opts...)
	if err != nil {
		return nil, fmt.Errorf("pgleasegocron: lock job %q: %w", key, err)
	}
	return lock{lease}, nil
}

// lock is a job's run's lease.
type lock struct{ lease *pglease.Lease }

func (k lock) Unlock(ctx context.Context) error {
	lctx := k.lease.Context()
	if lctx.Err() != nil && errors.Is(context.Cause(lctx), pglease.ErrLeaseLost) {
		_ = k.lease.Release(ctx)
		return fmt.Errorf("pgleasegocron: the lease %q was lost while the job ran; another replica may have run it meanwhile: %w", k.lease.Name(), context.Cause(lctx))
	}
	if err := k.lease.Release(ctx); err != nil {
		return fmt.Errorf("pgleasegocron: unlock %q: %w", k.lease.Name(), err)
	}
	return nil
}

// ErrNotLeader is IsLeader's error on a replica that does not lead.
var ErrNotLeader = errors.New("pgleasegocron: this replica does not lead the election")

// Elector is a gocron.Elector backed by a pglease.Elector: give it to
// gocron.WithDistributedElector, and run Run for as long as the scheduler
// runs.
type Elector struct {
	e    *pglease.Elector
	c    *pglease.Client
	name string
	// elected is closed when this replica first leads; settled is set
	// once the first election is over for this replica (it led, another
	// was seen leading, or firstElectionWait passed), after which
	// IsLeader never waits.
	elected chan struct{}
	once    sync.Once
	settled atomic.Bool
}

// firstElectionWait bounds how long IsLeader waits for the first
// election of a replica that just started.
const firstElectionWait = 5 * time.Second

var _ gocron.Elector = (*Elector)(nil)

// NewElector returns an Elector of the lease name on c's table, for
// every replica's scheduler. cfg is the pglease election's (its
// LeaseOptions: pglease.WithTTL, pglease.WithFastFailover); a refused
// name or configuration is an *pglease.InvalidError.
func NewElector(c *pglease.Client, name string, cfg pglease.ElectorConfig) (*Elector, error) {
	el := &Elector{c: c, name: name, elected: make(chan struct{})}
	e, err := c.NewElector(name, func(ctx context.Context) error {
		el.once.Do(func() { close(el.elected) })
		<-ctx.Done() // a term lasts as long as the lease, or until Run ends
		return nil
	}, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgleasegocron: %w", err)
	}
	el.e = e
	return el, nil
}

// Run campaigns until ctx ends (pglease.Elector.Run), then releases the
// leadership. Call it in a goroutine of its own, once.
func (e *Elector) Run(ctx context.Context) error { return e.e.Run(ctx) }

// IsLeader returns nil while this replica leads, else ErrNotLeader
// (gocron's Elector: the scheduler runs a job only when it is nil).
//
// Until the first election is over for this replica, IsLeader waits for
// it, at most firstElectionWait (5 s) and no longer than ctx: replicas
// that start together would otherwise each skip a job that starts
// immediately (gocron.WithStartImmediately), as none leads yet. The first
// election is over once this replica leads, another is seen leading, or
// the wait ran out (the database unreachable, or Run not called); after
// that IsLeader answers at once.
func (e *Elector) IsLeader(ctx context.Context) error {
	if e.e.IsLeader() {
		return nil
	}
	if e.settled.Load() {
		return ErrNotLeader
	}
	ctx, cancel := context.WithTimeout(ctx, firstElectionWait)
	defer cancel()
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	elected := e.elected
	for {
		if e.e.IsLeader() {
			e.settled.Store(true)
			return nil
		}
		if info, err := e.c.Get(ctx, e.name); err == nil && info.Remaining > 0 && info.Owner != e.c.Owner() {
			e.settled.Store(true) // another replica leads
			return ErrNotLeader
		}
		select {
		case <-elected:
			elected = nil // looked at once: a term that ended at once is polled for
		case <-poll.C:
		case <-ctx.Done():
			e.settled.Store(true)
			return ErrNotLeader
		}
	}
}

// Election returns the pglease.Elector behind e: its Observe, Resign,
// and its health check (ServeHTTP) for a liveness probe.
func (e *Elector) Election() *pglease.Elector { return e.e }
