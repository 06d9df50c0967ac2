package pglease

// The acquisition engine. Every acquisition — a name, the slots of a
// semaphore, a shared lease, a set of names — is one acquisition value run
// by one loop (run), once or until its context ends. Each round of the
// loop makes one attempt (attempt.go) per unit of what is asked for. The
// loop owns the retries and the local slots, and decides after each round
// what to do next (classify); a wait's waker (wake.go) owns the pauses
// between rounds and everything that ends them; the attempt owns the
// detached statement, a lost reply, the events of a refusal, and the
// registration of the leases it grants, or their undo. What depends on
// the kind of lease — the rows and units, whether and how a wait queues,
// the statement, how a refusal is read, whether a lease keeps its local
// slot — the acquisition's kind decides (kind.go, kind_*.go).

import (
	"context"
	"errors"
	"time"
)

// acquisition is one call's acquisition: what it asks for, and its state
// between attempts.
type acquisition struct {
	c *Client
	// name is the name the caller asked for (a semaphore's name for its
	// slots); empty for a set.
	name string
	// names are the rows contended for: name itself, its slot names, or
	// the names of a set, sorted.
	names []string
	// kind is the kind of lease asked for (kind.go): what the loop and
	// its attempts do that depends on it, it does.
	kind kind
	o    leaseOptions
	wait bool // until ctx ends (Acquire), or one attempt (TryAcquire)

	w    *waker     // a blocked wait's wake-ups (wake.go); nil for a single attempt
	mine *localSlot // a single name's local slot, held for the whole acquisition
	// local paces a kind's looks again while another goroutine of this
	// client holds a local slot it needs (see kind.localWait); nil until
	// then.
	local *backoff
	// promised paces a wait queued behind a waiter to which the name is
	// promised (see refusedOne).
	promised *backoff
	// again: the last round found nobody ahead any more (lookAhead), and
	// the wait looked again at once; the next such round pauses.
	again bool
}

// run acquires what a asks for and returns the leases granted: one for a
// name or a semaphore (a slot), one per name, in order, for a set.
//
// A kind that queues (kind.queue) is queued on locally for the whole
// acquisition (FIFO between the goroutines of this client: takeMine) and,
// while the client's dedicated session is live, on the server (FIFO
// between clients: see "Waiting" in the package documentation). Any other
// takes the local slots of each unit for one attempt only, if no other
// goroutine of this client holds them (take).
func (a *acquisition) run(ctx context.Context) ([]*Lease, error) {
	c := a.c
	// The session runs the client's statements, renews its leases, rings
	// its bell and listens: started with the first acquisition, so that
	// the client's statements, whether it waits or tries, share it (a
	// client with DisableNotify opens it for its first wait or renewal).
	if a.wait || !c.cfg.DisableNotify {
		if _, err := c.session(); err != nil {
			return nil, err
		}
	}
	if a.wait {
		a.w = c.newWaker(a.name, a.names, a.kind.queue())
		defer a.w.stop()
	}
	if a.kind.queue() != unqueued {
		if err := a.takeMine(ctx); err != nil {
			return nil, err
		}
	}
	b := retryAcquire.start()
	var last error
	retries := 0
	for {
		began := time.Now()
		if a.w != nil && a.w.bell != "" {
			c.wake.attempting(a.w.bell, a.w.name)
		}
		r := a.round(ctx)
		n := classify(ctx, c.life.bg, &r, a.wait, retries, last)
		var delay time.Duration
		switch n.action {
		case done:
			return a.done(&r)
		case fail:
			return a.fail(n.err)
		case retryNow:
			retries++
		case backOff:
			retries++
			delay = b.next()
			a.kind.logRetry(ctx, a, r.err, delay)
		case wait:
			b.reset()
		}
		last = n.last
		if err := a.pause(ctx, &r, began, delay, last); err != nil {
			return a.fail(err)
		}
	}
}

// done ends an acquisition that acquired r's leases.
func (a *acquisition) done(r *roundResult) ([]*Lease, error) {
	c := a.c
	// A lease that does not keep the name's local slot (a shared one):
	// other goroutines of this client may share the name too. It goes back
	// once the wait left the queue, so that the next local waiter's
	// registration is not undone by this one's.
	then := func() {}
	if !a.kind.keepsLocalSlot() && a.mine != nil {
		then = func() { c.putSlot(a.name, a.mine, true) }
	}
	c.leaveAcquired(a.w, a.name, r.dequeued, then)
	return r.leases, nil
}

// action is what the loop of an acquisition does after a round.
type action int

const (
	// done: the round acquired; return its leases.
	done action = iota
	// fail: end the acquisition with next.err.
	fail
	// retryNow: a late or orphaned reply (see redo); attempt again at once.
	retryNow
	// backOff: the round failed with a retryable error; attempt again
	// after the acquisition's backoff.
	backOff
	// wait: the names are held; wait for a wake-up or the holder's expiry,
	// then attempt again.
	wait
)

// next is the loop's decision after a round: the action, the error to
// fail with (fail), and the error to report should the wait give up
// before its next attempt succeeds (last).
type next struct {
	action action
	err    error
	last   error
}

// classify decides what the loop of an acquisition does after round r,
// given the caller's context, the client's (bg: Close ends it), whether
// the acquisition waits, the retries so far of failed rounds, and last,
// the error it reports should it give up now. It only reads its inputs.
//
//	after the round                       a wait     a single attempt
//	it acquired                           done       done
//	refused (the names are held)          wait       fail: the holder
//	failed as the caller's context ended  fail: gave up (last, and ctx.Err())
//	failed, and the client closed         fail: ErrClosed (ctx live), else the error
//	failed, not retryable                 fail: the error
//	failed late or orphaned (redo)        retryNow   retryNow twice, then fail
//	failed, retryable                     backOff    fail: the error
//
// A backOff keeps last if it is a holder, else names the failure.
func classify(ctx, bg context.Context, r *roundResult, waits bool, retries int, last error) next {
	if r.leases != nil {
		return next{action: done}
	}
	err := r.err
	if err == nil {
		if !waits {
			return next{action: fail, err: r.held}
		}
		return next{action: wait, last: r.held}
	}
	gaveUpNow := ctx.Err() != nil && errors.Is(err, ctx.Err())
	if gaveUpNow {
		err = gaveUp(ctx, last)
	}
	if gaveUpNow || bg.Err() != nil || !IsRetryable(err) || !waits && (retries >= 2 || !redo(err)) {
		if bg.Err() != nil && ctx.Err() == nil {
			err = ErrClosed
		}
		return next{action: fail, err: err}
	}
	if redo(err) {
		return next{action: retryNow, last: last}
	}
	if held := (*HeldError)(nil); !errors.As(last, &held) {
		last = errorf("%w (the last attempt failed: %w)", ErrNotAcquired, err)
	}
	return next{action: backOff, last: last}
}

// takeMine takes the local slot of a single name for the whole wait:
// when another goroutine of this client holds it, a wait queues for it
// (FIFO), and a single attempt fails at once.
func (a *acquisition) takeMine(ctx context.Context) error {
	c := a.c
	if a.mine = c.tryTake(a.name); a.mine != nil {
		return nil
	}
	if !a.wait {
		return c.localHolder(a.name)
	}
	mine := c.reg.getSlot(a.name)
	select {
	case <-mine.tok:
		a.mine = mine
		return nil
	case <-ctx.Done():
		c.putSlot(a.name, mine, false)
		return gaveUp(ctx, c.localHolder(a.name))
	case <-c.life.bg.Done():
		c.putSlot(a.name, mine, false)
		return ErrClosed
	}
}

// fail ends an acquisition without a lease: it leaves the server's queue
// and then frees the local slot of a single name (so that the next local
// waiter's registration is not undone by this one's).
func (a *acquisition) fail(err error) ([]*Lease, error) {
	a.c.leaveQueue(a.w, a.name, true, func() {
		if a.mine != nil {
			a.c.putSlot(a.name, a.mine, true)
		}
	})
	return nil, err
}

// roundResult is the outcome of one attempt on each unit of an
// acquisition.
type roundResult struct {
	leases []*Lease
	// dequeued: the lease came from a queued attempt, whose statement left
	// the queue.
	dequeued bool
	err      error // an attempt failed (not: the names are held)
	// When nothing was acquired: the holder that expires first, its
	// remaining time, and the session-bound holders of this server
	// incarnation whose sessions to watch.
	held      error
	soonest   time.Duration
	inSession []heldBy
	// behind: a name was promised to waiters queued ahead of this wait.
	behind bool
	// refused: the server refused a single name, whose holder (another
	// client, when nobody is queued ahead of this wait) is bellOf; queued:
	// the attempt was a queued one.
	refused, queued bool
	bellOf          string
	// lookAhead: the wait is queued behind others of a holder whose
	// client bellOf names: it watches the bell of the waiter directly
	// ahead instead, once lookAhead found it (ahead).
	lookAhead, ahead bool
}

// note records a holder; the one that expires first is reported.
func (r *roundResult) note(held error, remaining time.Duration) {
	if r.held == nil || (remaining >= 0 && (r.soonest < 0 || remaining < r.soonest)) {
		r.held, r.soonest = held, remaining
	}
}

// round makes one attempt on each unit of the acquisition and returns the
// first leases acquired.
func (a *acquisition) round(ctx context.Context) roundResult {
	c := a.c
	r := roundResult{soonest: -1}
	for _, unit := range a.kind.units(a.names) {
		slots, busy := a.take(unit)
		if slots == nil {
			r.note(c.localHolder(busy), a.kind.localWait(a, busy))
			continue
		}
		leases, rep, err := a.attempt(ctx, unit, slots)
		if errors.Is(err, errOrphan) {
			leases, rep, err = a.attempt(ctx, unit, slots)
		}
		if leases != nil {
			r.leases, r.dequeued = leases, rep.queued
			return r
		}
		a.give(unit, slots)
		if err != nil {
			r.err = err
			return r
		}
		a.kind.refused(a, rep, &r)
	}
	return r
}

// take returns the local slots of unit for an attempt: the wait's own
// for a single name; otherwise all of them if no other goroutine of this
// client holds any, else none and the first name held.
func (a *acquisition) take(unit []string) ([]*localSlot, string) {
	if a.mine != nil {
		return []*localSlot{a.mine}, ""
	}
	slots, busy := a.c.takeAll(unit)
	if slots != nil && a.local != nil {
		a.local.reset()
	}
	return slots, busy
}

// give gives back the local slots of an attempt that acquired nothing
// (a single name keeps its own for the whole wait).
func (a *acquisition) give(unit []string, slots []*localSlot) {
	if a.mine == nil {
		a.c.putAll(unit, slots)
	}
}

// refusedOne reads the refusal of a single name (a lease, a slot of a
// semaphore, a shared lease): its holder, or its place in the queue.
// exclusive: the wait is for an exclusive lease, which watches a
// fast-failover holder's session even behind other waiters.
func (a *acquisition) refusedOne(rep reply, r *roundResult, exclusive bool) {
	res := rep.rows[0]
	a.w.refused(rep.queued)
	r.refused, r.queued = true, rep.queued
	if res.Ahead > 0 {
		// Promised to the waiters ahead: this wait's turn comes with a
		// targeted notification (or, should they vanish, the poll).
		wait := a.c.cfg.PollInterval
		if holderGone(res) {
			// The name is free, or its holder's lease or session ended:
			// the first waiter takes it within milliseconds, unless it
			// ended too (one node running both), and nothing wakes this
			// wait then: look again soon, with backoff.
			if a.promised == nil {
				a.promised = newBackoff(promisedLookFirst, a.c.cfg.PollInterval)
			}
			wait = a.promised.next()
		} else if a.promised != nil {
			a.promised.reset()
		}
		r.behind = true
		watchSession := res.HolderInSession && res.HolderWatchable && exclusive
		if watchSession {
			// Every exclusive waiter watches a fast-failover holder's
			// session, not only the first: the first may die with it (a
			// process, a pod or a node running both, or a client of a
			// shared holder waiting to take the name exclusively), and
			// nothing else would wake the waiters behind before their
			// poll.
			r.inSession = append(r.inSession, heldBy{res.name, res.HolderSession})
		}
		ahead := exclusive && rep.queued && (watchSession || !holderGone(res) && a.c.wake.hub.only(a.name)) &&
			res.OtherClient != "" && res.OtherClient != a.c.id
		if !ahead || holderGone(res) {
			r.note(queuedError(res), wait)
		}
		if ahead {
			// A doorbell serves, on the wait's own dedicated session: the
			// bell of the waiter directly ahead (see lookAhead), which
			// rings as that wait gives up and is freed as its session ends
			// (the holder's, should this wait be second, dying with it)
			// and, once that waiter holds the name, rings at its release.
			// Only it, not every wait, is woken at a hand-off. Failing
			// that, the holder's bell. It listens for nothing, so it also
			// looks at the holder's expiry: a waiter ahead of it may take
			// the name over then (the holder paused, or died), and this
			// wait must then look at the new holder's expiry. Its fallback
			// poll is its watcher's, as the first waiter's is (see
			// waker.watched): polling every PollInterval, each look
			// interrupted the watch and armed it again, two statements a
			// poll (S5: 3.7 statements a second for 1,000 waits in ten
			// clients on one name, against 3.2 allowed).
			//
			// A wait for a plain name does so only while it is all its
			// client waits for (issue 43's seventh stop), and otherwise
			// listens. A bell is a client's, not a name's: a ring wakes
			// every wait that watches it, for any name, and each looks
			// again. Ten clients each waiting for the same hundred names
			// watched each other's bells, and a hand-off of one name
			// took 105 statements and 32 ms instead of 0.8 and 3.3 (CAP),
			// at 12.9 connections per client instead of 6. A client
			// with one wait is the fleet's case (an elector, a replica
			// waiting for its job): no waiting client then listens, and
			// a hand-off signals none of their sessions (a NOTIFY
			// signals every listening backend of the database).
			r.bellOf = res.OtherClient
			// (Only a wait that watches bells looks for the waiter ahead:
			// a quota's, listed, listens.)
			r.lookAhead = a.w != nil && a.w.mode == queues
			r.note(queuedError(res), res.OtherRemaining)
		}
		return
	}
	if rep.queued && res.OtherClient != "" && res.OtherClient != a.c.id {
		r.bellOf = res.OtherClient
	}
	r.note(heldError(res), res.OtherRemaining)
	if res.HolderInSession && res.HolderWatchable {
		// Any contender takes a session-bound row over once the holder's
		// session ends: watch it.
		r.inSession = append(r.inSession, heldBy{res.name, res.HolderSession})
	}
}

// localHolder describes name, held by another goroutine of this client
// (by a lease, or by an attempt or a wait).
func (c *Client) localHolder(name string) error {
	l := c.reg.lease(name)
	info := Info{Name: name, Owner: c.cfg.Owner}
	if l != nil {
		info.Token, info.TTL = l.token, l.ttl
		info.Remaining = time.Until(l.Deadline())
	}
	return &HeldError{Holder: info}
}

// heldError describes the holder of a name that was refused.
func heldError(r nameReply) error {
	return &HeldError{Holder: Info{Name: r.name, Owner: r.OtherOwner, Token: r.OtherToken,
		Remaining: r.OtherRemaining, FastFailover: r.HolderInSession}}
}

// holderGone reports a refusal behind queued waiters of a name that no
// live lease holds: no row, an expired one, or a fast-failover row whose
// session ended.
func holderGone(r nameReply) bool {
	return r.OtherToken == 0 || r.OtherRemaining <= 0 || r.HolderInSession && !r.HolderWatchable
}

// queuedError describes a name whose lease waiters of other clients are
// queued for ahead of this one (it may be free, promised to the first).
func queuedError(r nameReply) error {
	e := heldError(r).(*HeldError)
	if r.OtherToken == 0 {
		e.Holder = Info{Name: r.name}
	}
	e.Queued = int(r.Ahead)
	return e
}

// pause pauses a wait after round r, which began at since, as its waker
// plans (delay: see waker.plan); a single attempt, which only retries a
// late or orphaned reply, not at all. It says whether the caller's
// context or the client's Close ended the acquisition.
func (a *acquisition) pause(ctx context.Context, r *roundResult, since time.Time, delay time.Duration, last error) error {
	c := a.c
	if a.w != nil {
		again := r.lookAhead && a.lookAhead(ctx, r, since) && !a.again
		if a.again = again; !again {
			a.w.pause(ctx, a.w.plan(r, since, delay))
		}
	}
	switch {
	case ctx.Err() != nil:
		return gaveUp(ctx, last)
	case c.life.bg.Err() != nil:
		return ErrClosed
	}
	return nil
}
