package pglease

import (
	"context"
	"errors"

	"github.com/pglease/pglease/internal/store"
)

// TryAcquire makes one attempt to acquire name (with [WithSlots], one on
// every slot) and returns at once. When the lease is held elsewhere (or by
// another goroutine of this client) the error is a *[HeldError] matching
// [ErrNotAcquired]. A transient error on a connection (a server restart, a
// dropped pooled connection) is retried a few times first, as nothing can
// have been acquired twice: a row of this client's whose reply was lost is
// recognised and freed. ctx bounds this call only, never the lease.
// name must be a lease name (see [Config.Plan]). A semaphore whose live slots record another
// slot count fails with a *[KindError] (see [WithSlots]).
func (c *Client) TryAcquire(ctx context.Context, name string, opts ...Option) (*Lease, error) {
	o, err := c.begin(ctx, name, opts)
	if err != nil {
		return nil, err
	}
	l, err := c.acquireName(ctx, name, o, false)
	return l, c.closedErr(err)
}

// Acquire blocks until name is acquired or ctx ends. Waiting is driven by
// notifications when a holder releases, by a timer at the moment the
// holder's lease would expire, by the end of a fast-failover holder's
// session, and by a slow fallback poll. When ctx ends first the error
// matches both [ErrNotAcquired] and ctx.Err(), and nothing of the attempt
// is left behind. ctx bounds this call only, never the lease. A
// semaphore whose live slots record another slot count fails at once with
// a *[KindError] (see [WithSlots]): waiting would not end the mismatch.
func (c *Client) Acquire(ctx context.Context, name string, opts ...Option) (*Lease, error) {
	o, err := c.begin(ctx, name, opts)
	if err != nil {
		return nil, err
	}
	l, err := c.acquireName(ctx, name, o, true)
	if errors.Is(err, ErrNotAcquired) && ctx.Err() != nil {
		return nil, err // gave up: keep the holder and ctx.Err()
	}
	return l, c.closedErr(err)
}

// begin validates a call and makes sure the table exists.
func (c *Client) begin(ctx context.Context, name string, opts []Option) (leaseOptions, error) {
	if err := checkName(name); err != nil {
		return leaseOptions{}, err
	}
	o, err := c.leaseOptions(entryAcquire, opts)
	if err != nil {
		return o, err
	}
	if err := o.checkSlotNames(name); err != nil {
		return o, err
	}
	if err := c.prepare(ctx); err != nil {
		return o, c.closedErr(err)
	}
	if o.session {
		ok, err := c.sessionAvailable(ctx)
		if err != nil {
			return o, opError("open a session", err)
		}
		if !ok {
			return o, errorf("%w: WithFastFailover needs pgx (Open, NewFromPool, or database/sql with the pgx stdlib driver)", ErrSessionUnavailable)
		}
	}
	return o, nil
}

// acquireName runs the acquisition engine for name (a row of the kind of
// lease the options ask for: name itself, any slot of the semaphore name,
// a shared lease of name), once (TryAcquire) or until ctx ends (Acquire).
func (c *Client) acquireName(ctx context.Context, name string, o leaseOptions, wait bool) (*Lease, error) {
	k := kindOf(entryAcquire, &o)
	leases, err := c.runAcquisition(ctx, func() *acquisition {
		a := &acquisition{c: c, name: name, kind: k, o: o, wait: wait}
		a.names = k.rows(name, &a.o) // (&o would move o to the heap: an allocation more)
		return a
	})
	if err != nil {
		return nil, err
	}
	return leases[0], nil
}

// runAcquisition runs an acquisition that newAcq builds, and, when it
// found the lease table gone (tableLost: dropped, or lost in a failover or
// a restore) or one of its functions missing, checks the table again and
// runs a new one once: with auto-migration the check creates what is
// missing, and the call acquires rather than fails; with
// Config.DisableAutoMigrate the check fails at once with ErrNoTable (or
// ErrSchema naming the missing functions).
func (c *Client) runAcquisition(ctx context.Context, newAcq func() *acquisition) ([]*Lease, error) {
	leases, err := newAcq().run(ctx)
	if err == nil || ctx.Err() != nil || !c.tableLost(ctx, err) && store.Classify(err) != store.KindMissingFunction {
		return leases, err
	}
	if err := c.ensureSchema(ctx); err != nil {
		return nil, c.closedErr(err)
	}
	return newAcq().run(ctx)
}
