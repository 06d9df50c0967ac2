package pglease

import (
	"context"
	"errors"
	"slices"
	"sync"
)

// maxSetNames bounds the names of one [LeaseSet]: each is a row written,
// and an advisory lock held, by one transaction.
const maxSetNames = 64

// TryAcquireAll makes one attempt to acquire every one of names (1 to 64
// distinct names) together, all or nothing, and returns at once. When any
// of them is held elsewhere (or by another goroutine of this client)
// nothing is acquired, and the error is a *[HeldError] matching
// [ErrNotAcquired] that names the first such name and its holder (the
// message lists the others). [WithTTL], [WithMinHold], [WithMaxHold] and
// [WithMetadata] apply to every lease of the set; [WithSlots],
// [WithShared] and [WithFastFailover] do not apply and are refused with an
// *[InvalidError], as are an empty set, duplicate names and more than 64
// names. ctx bounds this call only, never the leases.
func (c *Client) TryAcquireAll(ctx context.Context, names []string, opts ...Option) (*LeaseSet, error) {
	sorted, o, err := c.beginAll(ctx, names, opts)
	if err != nil {
		return nil, err
	}
	s, err := c.acquireSet(ctx, sorted, o, false)
	return s, c.closedErr(err)
}

// AcquireAll blocks until every one of names is acquired together, all or
// nothing, or ctx ends; it takes the same names and options as
// [Client.TryAcquireAll]. Clients asking for overlapping sets in any order
// never deadlock: a set is taken in one transaction that locks its names in
// one canonical order, and a set that cannot be taken whole holds nothing
// while it waits. Waiting is driven by the table's release notifications
// for any of the names (not those within another client's burst: see
// "Waiting" in the package documentation), by a timer at the moment the
// holders' leases would expire, and by the fallback poll. A set does not
// queue for its names: a name
// promised to a client queued for it alone (see "Waiting" in the package
// documentation) goes to that client first. When ctx ends first the error
// matches both [ErrNotAcquired] and ctx.Err(), and nothing of the attempt
// is left behind. ctx bounds this call only, never the leases.
func (c *Client) AcquireAll(ctx context.Context, names []string, opts ...Option) (*LeaseSet, error) {
	sorted, o, err := c.beginAll(ctx, names, opts)
	if err != nil {
		return nil, err
	}
	s, err := c.acquireSet(ctx, sorted, o, true)
	if errors.Is(err, ErrNotAcquired) && ctx.Err() != nil {
		return nil, err // gave up: keep the holder and ctx.Err()
	}
	return s, c.closedErr(err)
}

// LeaseSet is a set of leases acquired together by [Client.AcquireAll] or
// [Client.TryAcquireAll], and released together. Each name is a [Lease] of
// its own, with its own fencing token, renewed with the client's other
// leases; the set ends as a whole: when any of its leases ends other than
// by [LeaseSet.Release] (lost, released on its own, or its client closed),
// the set releases the others and its context is cancelled with that
// lease's cause. Safe for concurrent use.
type LeaseSet struct {
	c      *Client
	leases []*Lease // sorted by name
	ctx    context.Context
	cancel context.CancelCauseFunc
	stops  []func() bool // the watches of the leases' ends

	mu     sync.Mutex
	ending bool // Release, or the end of a lease, has ended the set
}

// Leases returns the set's leases, sorted by name.
func (s *LeaseSet) Leases() []*Lease { return slices.Clone(s.leases) }

// Context returns the set's lifetime as a context: its Done channel is
// closed the moment the set ends (released, or one of its leases lost or
// ended), and then context.Cause says why: an error matching
// [ErrReleased] (after [LeaseSet.Release]) or the cause of the lease that
// ended first ([ErrLeaseLost], [ErrClosed], [ErrReleased]), naming it.
// Like a lease's ([Lease.Context]), its Err never returns nil past the
// leases' local deadline. Run the work the set protects under it.
func (s *LeaseSet) Context() context.Context { return s.ctx }

// Release ends the set, cancelling its context first, and then deletes
// the row of every lease (scoped by name and token), waking their waiters.
// It is idempotent and works on a detached, bounded context, so it may be
// called with a cancelled ctx. It returns an error only when a row could
// not be deleted (it then expires after its TTL).
func (s *LeaseSet) Release(ctx context.Context) error {
	s.mu.Lock()
	first := !s.ending
	s.ending = true
	s.mu.Unlock()
	if first {
		for _, stop := range s.stops {
			stop()
		}
		s.cancel(ErrReleased)
	}
	return deleteRows(ctx, s.endAll(ErrReleased))
}

// endAll ends every lease of the set not ended yet, with cause, and
// returns them: their rows are still to be deleted.
func (s *LeaseSet) endAll(cause error) []*Lease {
	var ended []*Lease
	for _, l := range s.leases {
		if l.end(cause) {
			ended = append(ended, l)
		}
	}
	return ended
}

// deleteRows deletes the rows of leases that have just ended.
func deleteRows(ctx context.Context, ended []*Lease) error {
	var errs []error
	for _, l := range ended {
		if err := l.deleteRow(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// memberEnded ends the set when its lease l has ended other than by the
// set's Release: the set's context first, then the other leases, whose
// rows are deleted in the background.
func (s *LeaseSet) memberEnded(l *Lease) {
	s.mu.Lock()
	if s.ending {
		s.mu.Unlock()
		return
	}
	s.ending = true
	s.mu.Unlock()
	cause := errorf("%w (lease %q of the set)", l.err(), l.name)
	s.cancel(cause)
	ended := s.endAll(cause)
	if len(ended) == 0 {
		return
	}
	if !s.c.life.goBackground(func() { _ = deleteRows(context.Background(), ended) }) {
		// Close has begun waiting; the pool may be closing, and past the
		// TTL expiry frees the rows.
		_ = deleteRows(context.Background(), ended)
	}
}

// setContext is the set's context. Like leaseContext, its Err checks the
// leases' local deadlines itself, so that a goroutine resuming from a
// pause sees the set as lost before any deadline timer has run.
type setContext struct {
	context.Context
	s *LeaseSet
}

func (c setContext) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	for _, l := range c.s.leases {
		if l.err() != nil {
			c.s.memberEnded(l)
			break
		}
	}
	return c.Context.Err()
}

// newSet builds the set of leases just registered, and watches them.
func (c *Client) newSet(leases []*Lease) *LeaseSet {
	s := &LeaseSet{c: c, leases: leases}
	inner, cancel := context.WithCancelCause(context.Background())
	s.ctx, s.cancel = setContext{inner, s}, cancel
	s.stops = make([]func() bool, len(leases))
	for i, l := range leases {
		s.stops[i] = context.AfterFunc(l.ctx, func() { s.memberEnded(l) })
	}
	return s
}

// beginAll validates a call and returns the names sorted: the canonical
// order in which their locks, local and on the server, are taken.
func (c *Client) beginAll(ctx context.Context, names []string, opts []Option) ([]string, leaseOptions, error) {
	switch {
	case len(names) == 0:
		return nil, leaseOptions{}, invalid(kindArgument, "a set of leases needs at least one name")
	case len(names) > maxSetNames:
		return nil, leaseOptions{}, invalid(kindArgument, "a set of leases has at most %d names, got %d", maxSetNames, len(names))
	}
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	for i, name := range sorted {
		if err := checkName(name); err != nil {
			return nil, leaseOptions{}, err
		}
		if i > 0 && sorted[i-1] == name {
			return nil, leaseOptions{}, invalid(kindArgument, "name %q appears more than once in the set", name)
		}
	}
	o, err := c.leaseOptions(entrySet, opts)
	if err != nil {
		return nil, o, err
	}
	if err := c.prepare(ctx); err != nil {
		return nil, o, c.closedErr(err)
	}
	return sorted, o, nil
}

// acquireSet runs the acquisition engine for a set (names sorted), once
// (TryAcquireAll) or until ctx ends (AcquireAll).
func (c *Client) acquireSet(ctx context.Context, names []string, o leaseOptions, wait bool) (*LeaseSet, error) {
	leases, err := c.runAcquisition(ctx, func() *acquisition {
		return &acquisition{c: c, names: names, set: true, o: o, wait: wait}
	})
	if err != nil {
		return nil, err
	}
	return c.newSet(leases), nil
}
