package pglease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pglease/pglease/internal/store"
)

// maxSetNames bounds the names of one [LeaseSet]: each is a row written,
// and an advisory lock held, by one transaction.
const maxSetNames = 64

// TryAcquireAll makes one attempt to acquire every one of names (1 to 64
// distinct names) together, all or nothing, and returns at once. When any
// of them is held elsewhere (or by another goroutine of this client)
// nothing is acquired, and the error is a *[HeldError] matching
// [ErrNotAcquired] that names the first such name and its holder (the
// message lists the others). [WithTTL], [WithMinHold] and [WithMetadata]
// apply to every lease of the set; [WithSlots] and [WithFastFailover] do
// not apply and are refused with [ErrInvalidArgument], as are an empty
// set, duplicate names and more than 64 names. ctx bounds this call only,
// never the leases.
func (c *Client) TryAcquireAll(ctx context.Context, names []string, opts ...Option) (*LeaseSet, error) {
	sorted, o, err := c.beginAll(ctx, names, opts)
	if err != nil {
		return nil, err
	}
	s, err := c.acquireAll(ctx, sorted, o, false)
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
	s, err := c.acquireAll(ctx, sorted, o, true)
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

// Lease returns the set's lease of name, or nil when name is not in the
// set.
func (s *LeaseSet) Lease(name string) *Lease {
	i, ok := slices.BinarySearchFunc(s.leases, name, func(l *Lease, n string) int { return strings.Compare(l.name, n) })
	if !ok {
		return nil
	}
	return s.leases[i]
}

// Context returns a context cancelled when the set ends; its
// context.Cause is the same as [LeaseSet.Err]. Run the work the set
// protects under it.
func (s *LeaseSet) Context() context.Context { return s.ctx }

// Done returns a channel closed the moment the set ends: released, or one
// of its leases lost or ended.
func (s *LeaseSet) Done() <-chan struct{} { return s.ctx.Done() }

// Err returns nil while every lease of the set is held, and afterwards an
// error matching [ErrReleased] (after [LeaseSet.Release]) or the cause of
// the lease that ended first ([ErrLeaseLost], [ErrClosed], [ErrReleased]),
// naming it. Like [Lease.Err], it never returns nil past the leases' local
// deadline.
func (s *LeaseSet) Err() error {
	if s.ctx.Err() == nil {
		return nil
	}
	return context.Cause(s.ctx)
}

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
	cause := errorf("%w (lease %q of the set)", l.Err(), l.name)
	s.cancel(cause)
	ended := s.endAll(cause)
	if len(ended) == 0 {
		return
	}
	if !s.c.goBackground(func() { _ = deleteRows(context.Background(), ended) }) {
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
		if l.Err() != nil {
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
		return nil, leaseOptions{}, invalid(ErrInvalidArgument, "a set of leases needs at least one name")
	case len(names) > maxSetNames:
		return nil, leaseOptions{}, invalid(ErrInvalidArgument, "a set of leases has at most %d names, got %d", maxSetNames, len(names))
	}
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	for i, name := range sorted {
		if err := CheckName(name); err != nil {
			return nil, leaseOptions{}, err
		}
		if i > 0 && sorted[i-1] == name {
			return nil, leaseOptions{}, invalid(ErrInvalidArgument, "name %q appears more than once in the set", name)
		}
	}
	o, err := c.leaseOptions(opts)
	switch {
	case err != nil:
		return nil, o, err
	case o.slots > 1:
		return nil, o, invalid(ErrInvalidArgument, "WithSlots does not apply to a set of leases (name the slots, or acquire the semaphore with Acquire)")
	case o.session:
		return nil, o, invalid(ErrInvalidArgument, "WithFastFailover is not supported for a set of leases: its leases are plain ones, freed by expiry when their holder dies")
	}
	if err := c.prepare(ctx); err != nil {
		return nil, o, c.closedErr(err)
	}
	return sorted, o, nil
}

// acquireAll is the acquisition loop of a set (names sorted), once
// (TryAcquireAll) or until ctx ends (AcquireAll). Each round takes the
// local slots of every name or none, and holds them only for the round's
// one attempt on the server; a wait holds nothing, locally or on the
// server, so two goroutines of this client asking for overlapping sets (or
// a set and a single name) never wait for each other in a cycle.
func (c *Client) acquireAll(ctx context.Context, names []string, o leaseOptions, wait bool) (*LeaseSet, error) {
	var wakeups <-chan struct{}
	if wait {
		if _, err := c.session(); err != nil { // starts the listener
			return nil, err
		}
		// Taken before the first attempt: a release between an attempt and
		// the pause still wakes the pause.
		sub, unsubscribe := c.hub.subscribe(names...)
		defer unsubscribe()
		wakeups = sub.ch
	}
	failing := newBackoff(50*time.Millisecond, 2*time.Second)
	// A name whose local slot another goroutine holds, without holding its
	// lease, is free again after that goroutine's attempt or wait; no
	// notification says when, so look again with backoff.
	local := newBackoff(5*time.Millisecond, 500*time.Millisecond)
	var last error
	retries := 0
	for {
		var delay time.Duration
		slots, busy := c.takeAll(names)
		if slots == nil {
			last = c.localHolder(busy)
			if !wait {
				return nil, last
			}
			delay = local.next()
			c.mu.Lock()
			l := c.held[busy]
			c.mu.Unlock()
			if l != nil {
				// Held by a lease of this client: its release notifies.
				delay = c.expiryWait(time.Until(l.Deadline()))
			}
		} else {
			local.reset()
			s, r, err := c.attemptAll(ctx, names, o, slots)
			if s != nil {
				return s, nil
			}
			c.putAll(names, slots)
			switch {
			case err == nil:
				failing.reset()
				last = r.held
				if !wait {
					return nil, last
				}
				delay = c.expiryWait(r.wait)
			case ctx.Err() != nil && errors.Is(err, ctx.Err()):
				return nil, gaveUp(ctx, last)
			case c.bg.Err() != nil:
				return nil, ErrClosed
			case !IsRetryable(err), !wait && (retries >= 2 || !redo(err)):
				return nil, err
			case redo(err):
				retries++
			default:
				retries++
				delay = failing.next()
				if held := (*HeldError)(nil); !errors.As(last, &held) {
					last = errorf("%w (the last attempt failed: %w)", ErrNotAcquired, err)
				}
				c.cfg.Logger.WarnContext(ctx, "pglease: acquire of a set failed; retrying", "names", names, "err", err, "in", delay)
			}
		}
		if _, err := c.pause(ctx, wakeups, delay, last); err != nil {
			return nil, err
		}
	}
}

// takeAll takes the local slots of every one of names if no other
// goroutine of this client holds any of them, and returns them; otherwise
// it takes none and returns the first name held.
func (c *Client) takeAll(names []string) ([]*localSlot, string) {
	slots := make([]*localSlot, 0, len(names))
	for _, name := range names {
		s := c.tryTake(name)
		if s == nil {
			c.putAll(names, slots)
			return nil, name
		}
		slots = append(slots, s)
	}
	return slots, ""
}

// putAll gives back the local slots taken by takeAll (slots[i] is names[i]'s).
func (c *Client) putAll(names []string, slots []*localSlot) {
	for i, s := range slots {
		c.putSlot(names[i], s, true)
	}
}

// setRefusal is why a set was not acquired, when every statement ran.
type setRefusal struct {
	held error // a *HeldError naming the first name not free
	// wait is the longest remaining time of the holders (negative when a
	// holder could not be seen): the set cannot be taken by expiry alone
	// before then, and a release of any name notifies sooner.
	wait time.Duration
}

// attemptAll runs one all-or-nothing acquisition of names, whose local
// slots the caller holds (they go to the leases when the set is acquired,
// and otherwise stay the caller's). Like attempt, it runs on a detached
// context: when ctx ends first it returns at once with ctx.Err(), and a
// set the transaction still commits is released by token.
func (c *Client) attemptAll(ctx context.Context, names []string, o leaseOptions, slots []*localSlot) (*LeaseSet, setRefusal, error) {
	type result struct {
		res  store.AcquireAllResult
		sent time.Time
		err  error
	}
	if err := ctx.Err(); err != nil {
		return nil, setRefusal{}, err // see attempt
	}
	args := store.AcquireAllArgs{Names: names, Owner: c.cfg.Owner, TTL: o.ttl, MinHold: o.minHold, Metadata: o.metadata,
		Client: c.id, FairAfter: fairAfter}
	// As in attempt: a transaction whose commit's reply was lost left rows
	// of this client's, which the retry takes over.
	r, err := detached(c, ctx, func(sctx context.Context) (r result) {
		r.sent = time.Now()
		r.res, r.err = c.st.AcquireAll(sctx, c.db, args)
		return r
	}, func(r result) error { return r.err }, func(r result) {
		if r.err == nil && r.res.Acquired {
			rctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
			defer cancel()
			for _, n := range r.res.Names {
				_, _ = c.st.Release(rctx, c.db, n.Name, n.Token)
			}
		}
	})
	if err != nil {
		return nil, setRefusal{}, err
	}
	if r.err != nil {
		return nil, setRefusal{}, opError(fmt.Sprintf("acquire the set %q", names), r.err)
	}
	if !r.res.Acquired {
		for _, n := range r.res.Names {
			if n.Clash != 0 {
				// Not retryable: the acquisition loop returns it at once.
				return nil, setRefusal{}, &SlotsError{Name: n.Name, Want: 1, Have: n.Clash}
			}
		}
		return nil, c.refused(ctx, r.res), nil
	}
	leases := make([]*Lease, len(r.res.Names))
	for i, n := range r.res.Names {
		leases[i] = c.newLease(n.Name, n.Token, o, r.sent, 0, false, slots[i])
	}
	if !time.Now().Before(leases[0].Deadline()) {
		// See attempt: the reply came too late to be trusted.
		c.giveUpAll(leases, &lostError{why: "the acquisition's reply arrived after its safety deadline"})
		return nil, setRefusal{}, errorf("acquire the set %q: %w", names, errLate)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.giveUpAll(leases, ErrClosed)
		return nil, setRefusal{}, ErrClosed
	}
	for _, l := range leases {
		c.held[l.name] = l
		l.arm()
		c.startRenewer(l)
	}
	c.mu.Unlock()
	for i, l := range leases {
		previous := ""
		if n := r.res.Names[i]; n.OtherToken != 0 && n.OtherClient != c.id {
			previous = n.OtherOwner
		}
		l.announce(ctx, o.called, previous)
	}
	return c.newSet(leases), setRefusal{}, nil
}

// giveUpAll gives up the leases of a set that cannot be handed out (see
// giveUp); the caller frees the local slots.
func (c *Client) giveUpAll(leases []*Lease, cause error) {
	for _, l := range leases {
		c.giveUp(l, cause)
	}
}

// refused reports a set that was not acquired: the names not free, as
// *HeldErrors (the first one returned, the others named in its message),
// and how long to wait.
func (c *Client) refused(ctx context.Context, res store.AcquireAllResult) setRefusal {
	var first error
	var others []string
	var r setRefusal
	for _, n := range res.Names {
		if n.Free && n.Ahead == 0 {
			continue
		}
		e := &HeldError{Holder: Info{Name: n.Name}, Queued: int(n.Ahead)}
		remaining := n.OtherRemaining
		switch {
		case !n.Free:
			e.Holder = Info{Name: n.Name, Owner: n.OtherOwner, Token: n.OtherToken, Remaining: n.OtherRemaining}
			c.events.send(Event{Kind: EventContended, Name: n.Name, Owner: c.cfg.Owner, Previous: n.OtherOwner, Token: n.OtherToken, Context: ctx})
			if c.cfg.AlertAfter > 0 && n.OtherHeartbeatAge > c.cfg.AlertAfter && n.OtherRemaining > 0 {
				c.cfg.Logger.WarnContext(ctx, "pglease: holder's heartbeat is old", "name", n.Name, "holder", n.OtherOwner, "age", n.OtherHeartbeatAge)
				c.events.send(Event{Kind: EventAlert, Name: n.Name, Owner: n.OtherOwner, Token: n.OtherToken, Age: n.OtherHeartbeatAge, Context: ctx})
			}
			if n.Ahead > 0 {
				remaining = max(remaining, c.cfg.PollInterval)
			}
		default:
			// Free but promised to the waiters ahead: the one woken takes
			// it, and its release notifies.
			remaining = c.cfg.PollInterval
		}
		if first == nil {
			first, r.wait = e, remaining
		} else {
			others = append(others, n.Name)
		}
		if r.wait >= 0 && (remaining < 0 || remaining > r.wait) {
			r.wait = remaining
		}
	}
	if first == nil { // not reached: a refused set has a name not free
		first = ErrNotAcquired
	}
	r.held = first
	if len(others) > 0 {
		r.held = errorf("%w (also not free: %q)", first, others)
	}
	return r
}
