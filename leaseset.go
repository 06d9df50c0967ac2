package pglease

// LeaseSet, a recipe on the client's API (see hooks.go): the leases of
// AcquireAll and TryAcquireAll (multilock.go), ended as a whole.

import (
	"context"
	"errors"
	"slices"
	"sync"
)

// LeaseSet is a set of leases acquired together by [Client.AcquireAll] or
// [Client.TryAcquireAll], and released together. Each name is a [Lease] of
// its own, with its own fencing token, renewed with the client's other
// leases; the set ends as a whole: when any of its leases ends other than
// by [LeaseSet.Release] (lost, released on its own, or its client closed),
// the set releases the others and its context is cancelled with that
// lease's cause. Safe for concurrent use.
type LeaseSet struct {
	env    recipeEnv // what the exported API does not give (hooks.go)
	leases []*Lease  // sorted by name
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
	return s.deleteRows(ctx, s.endAll(ErrReleased))
}

// endAll ends every lease of the set not ended yet, with cause, and
// returns them: their rows are still to be deleted.
func (s *LeaseSet) endAll(cause error) []*Lease {
	var ended []*Lease
	for _, l := range s.leases {
		if s.env.end(l, cause) {
			ended = append(ended, l)
		}
	}
	return ended
}

// deleteRows deletes the rows of leases that have just ended.
func (s *LeaseSet) deleteRows(ctx context.Context, ended []*Lease) error {
	var errs []error
	for _, l := range ended {
		if err := s.env.deleteRow(l, ctx); err != nil {
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
	cause := errorf("%w (lease %q of the set)", causeOf(l.Context()), l.Name())
	s.cancel(cause)
	ended := s.endAll(cause)
	if len(ended) == 0 {
		return
	}
	if !s.env.goBackground(func(context.Context) { _ = s.deleteRows(context.Background(), ended) }) {
		// Close has begun waiting; the pool may be closing, and past the
		// TTL expiry frees the rows.
		_ = s.deleteRows(context.Background(), ended)
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
		if causeOf(l.Context()) != nil {
			c.s.memberEnded(l)
			break
		}
	}
	return c.Context.Err()
}

// newLeaseSet builds the set of leases just registered by c, and watches
// them.
func newLeaseSet(c *Client, leases []*Lease) *LeaseSet {
	s := &LeaseSet{env: c.recipe(), leases: leases}
	inner, cancel := context.WithCancelCause(context.Background())
	s.ctx, s.cancel = setContext{inner, s}, cancel
	s.stops = make([]func() bool, len(leases))
	for i, l := range leases {
		s.stops[i] = context.AfterFunc(l.Context(), func() { s.memberEnded(l) })
	}
	return s
}
