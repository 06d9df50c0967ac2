package pglease

// One attempt of the acquisition engine (engine.go): one statement for one
// unit of an acquisition (a name, a slot, or every name of a set), run on
// a detached context, and what follows from its reply: a lost reply
// recognised, the events of a refusal, or the leases it granted checked,
// registered with the client and announced — or undone.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/pglease/pglease/internal/store"
)

// reply is what an attempt's statement answered.
type reply struct {
	rows    []nameReply // one per name asked for, in order
	granted bool        // every name was acquired (or, if false, none)
	sent    time.Time   // when the statement was sent
	epoch   uint64      // the dedicated session it ran on (session-bound)
	queued  bool        // the attempt was a queued one (see waiting)
	err     error
}

// nameReply is one name's part of a reply.
type nameReply struct {
	name string
	acquireResult
	// free: a name of a set that could have been taken (no row, an
	// expired one, or this client's own); a set is refused for the others.
	// A row of this client's that its statement counts free is taken
	// over: it is no orphan (refusal), and its previous holder is not
	// reported (attempt).
	free bool
}

// acquireResult is one name's outcome of a single name's statement as the
// client sees it.
type acquireResult struct {
	store.AcquireResult
	// busy: a session-bound attempt gave up waiting for a lock on the row
	// (a guarded transaction, a contender's acquisition); the holder is
	// unknown.
	busy bool
}

// attempt runs one acquisition statement for unit, whose local slots the
// caller holds (they go to the leases granted, and otherwise stay the
// caller's), and returns the leases granted, registered and announced, in
// the order of unit. When nothing was granted, the error says why, or is
// nil when the names are held (the reply says by whom; the contended and
// alert events are sent). The statement runs on a detached context: when
// ctx ends first, attempt returns at once with ctx.Err(), and whatever the
// statement still grants is released by token, so nothing of a cancelled
// attempt is left behind.
func (a *acquisition) attempt(ctx context.Context, unit []string, slots []*localSlot) ([]*Lease, reply, error) {
	c := a.c
	if err := ctx.Err(); err != nil {
		// Checked before the statement starts, not only while it runs: a
		// statement that completed before this goroutine reached the
		// select of detached would otherwise be delivered, and a caller
		// whose context had already ended would get a lease.
		return nil, reply{}, err
	}
	// Close waits for the attempt to hand out or give back what its reply
	// grants (and for the statement itself, should ctx end first: detached).
	if !c.life.calls.begin() {
		return nil, reply{}, ErrClosed
	}
	defer c.life.calls.end()
	// Even if a statement that failed with its connection committed, the
	// retry cannot acquire twice: it finds the rows as this client's own,
	// and frees them (errOrphan) or, for a set, takes them over; should
	// no retry come, the client frees them in the background (sweep), or
	// Close does (releaseOrphans).
	stmt := a.kind.statement(a, unit)
	// A kind whose leases keep no local slot shares the name: the rows a
	// lost reply may have granted are the name's "name#i".
	shares := !a.kind.keepsLocalSlot()
	var unsure atomic.Bool // a try failed after it may have committed
	run := func(sctx context.Context) reply {
		r := stmt(sctx)
		if hook := testHookLoseReply.Load(); hook != nil {
			if err := (*hook)(c.id); err != nil {
				r = reply{sent: r.sent, err: err}
			}
		}
		if r.err != nil && !store.FromServer(r.err) {
			unsure.Store(true)
			c.life.calls.unknown(unit, shares)
		}
		return r
	}
	r, ended, err := detached(c, ctx, run, func(r reply) error { return r.err }, func(r reply) {
		if r.err == nil && r.granted {
			c.giveUp(a.leases(r, nil), ErrReleased)
		}
		if unsure.Load() {
			c.sweepLater(unit, shares)
		}
	})
	if err != nil {
		if ended != nil && a.w != nil {
			// The statement goes on, and may register the wait again: it
			// leaves the queue once the statement has ended.
			a.w.inflight = ended
		}
		return nil, reply{}, err
	}
	if unsure.Load() {
		defer c.sweepLater(unit, shares) // it waits for the local slots
	}
	if r.err != nil {
		if errors.Is(r.err, ErrSessionUnavailable) {
			return nil, r, r.err
		}
		if errors.Is(r.err, context.DeadlineExceeded) && ctx.Err() == nil {
			// The statement outlived the client's own bound
			// (StatementTimeout), not the caller's: a slow server, as
			// statement_timeout would say; a waiting acquisition tries
			// again (its outcome is swept as unknown).
			r.err = fmt.Errorf("%w: %w", errSlow, r.err)
		}
		return nil, r, opError("acquire "+a.kind.describe(unit), r.err)
	}
	if !r.granted {
		return nil, r, a.refusal(ctx, r)
	}
	if hook := testHookAcquired.Load(); hook != nil {
		for _, n := range r.rows {
			(*hook)(n.name, r.epoch)
		}
	}
	leases := a.leases(r, slots)
	if !time.Now().Before(leases[0].Deadline()) {
		// The reply came so late (a partition that healed, a pause) that
		// the leases' safety deadline has passed: they cannot be trusted.
		c.giveUp(leases, &lostError{why: "the acquisition's reply arrived after its safety deadline"})
		return nil, r, errorf("acquire %s: %w", a.kind.describe(unit), errLate)
	}
	switch err := c.register(leases); {
	case errors.Is(err, ErrClosed):
		c.giveUp(leases, ErrClosed)
		return nil, r, ErrClosed
	case err != nil:
		// The session ended between the commit and now, and sessionLost
		// ran without these leases: a waiter may hold the name.
		c.giveUp(leases, sessionEnded("its database session ended right after the acquisition"))
		return nil, r, errorf("acquire %s: %w", a.kind.describe(unit), err)
	}
	for i, l := range leases {
		previous := ""
		// A statement that counts this client's own rows free (a set's)
		// takes them over (rows of an acquisition whose reply was lost):
		// no previous holder.
		if n := r.rows[i]; n.OtherToken != 0 && !(n.free && n.OtherClient == c.id) {
			previous = n.OtherOwner
		}
		l.announce(ctx, a.o.called, previous)
	}
	return leases, r, nil
}

// refusal handles a reply that granted nothing. A single name's row of
// this client's (one its statement does not count free) is an orphan,
// freed (errOrphan: the caller tries again); a
// name of another kind (a semaphore and a plain lease) refuses at once (a
// *KindError). Otherwise the names are held: refusal reports each holder
// (EventContended, and EventAlert when its heartbeat is old) and returns
// nil.
func (a *acquisition) refusal(ctx context.Context, r reply) error {
	c := a.c
	if n := r.rows[0]; !n.free && c.orphan(n.name, n.AcquireResult) {
		// A row of this client that no lease of it holds (the caller holds
		// the name's local slot): an earlier acquisition of ours committed
		// but its reply was lost. Free it by token; the caller retries.
		c.cfg.Logger.WarnContext(ctx, "pglease: releasing a lease row whose acquisition reply was lost", "name", n.name, "token", n.OtherToken)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.StatementTimeout)
		err := c.release(rctx, n.name, n.OtherToken)
		cancel()
		if err != nil {
			return opError(fmt.Sprintf("release an orphaned row of %q", n.name), err)
		}
		return errorf("acquire %q: %w", n.name, errOrphan)
	}
	for _, n := range r.rows {
		if n.Clash != (store.Clash{}) {
			// Not retryable: the acquisition loop returns it at once.
			return &KindError{Name: cmp.Or(a.name, n.name), Want: a.o.kind().String(), Have: clashKind(n.Clash).String()}
		}
	}
	for _, n := range r.rows {
		if n.busy || n.free {
			continue // no holder seen
		}
		c.events.send(Event{Kind: EventContended, Name: n.name, Owner: c.cfg.Owner, Previous: n.OtherOwner, Token: n.OtherToken, Context: ctx})
		if c.cfg.AlertAfter > 0 && n.OtherHeartbeatAge > c.cfg.AlertAfter && n.OtherRemaining > 0 {
			c.cfg.Logger.WarnContext(ctx, "pglease: holder's heartbeat is old", "name", n.name, "holder", n.OtherOwner, "age", n.OtherHeartbeatAge)
			c.events.send(Event{Kind: EventAlert, Name: n.name, Owner: n.OtherOwner, Token: n.OtherToken, Age: n.OtherHeartbeatAge, Context: ctx})
		}
	}
	return nil
}

// leases builds the leases a reply granted, with the local slots of their
// names (nil: none, for leases only built to be given up), or none for a
// kind whose leases keep no local slot (see done): those record the name
// they share instead.
func (a *acquisition) leases(r reply, slots []*localSlot) []*Lease {
	keeps := a.kind.keepsLocalSlot()
	leases := make([]*Lease, len(r.rows))
	for i, n := range r.rows {
		var slot *localSlot
		if slots != nil && keeps {
			slot = slots[i]
		}
		l := a.c.newLease(n.name, n.Token, a.o, r.sent, r.epoch, n.SessionBound, slot)
		l.kind = a.kind
		if !keeps {
			l.of = a.name
		}
		leases[i] = l
	}
	return leases
}

// giveUp ends leases that were granted but cannot be handed out (an
// abandoned, late or refused registration), after freeing their rows by
// token on a detached, bounded context; the caller frees the local slots.
func (c *Client) giveUp(leases []*Lease, cause error) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	for _, l := range leases {
		l.slot = nil
		if err := c.releaseRow(ctx, l); err != nil {
			c.life.calls.unknown([]string{l.name}, false) // for Close to try again
		}
		l.end(cause)
	}
}

// orphan reports whether a failed attempt on name found a row written by
// this client that no lease of the client holds: the row is left from an
// acquisition whose reply was lost (the connection failed after the
// commit). The caller holds the name's local slot, so no exclusive lease
// of this client holds the name, but a shared lease's row may be the
// client's (see WithShared).
func (c *Client) orphan(name string, r store.AcquireResult) bool {
	if r.Acquired || r.OtherClient != c.id || r.OtherToken == 0 || r.OtherRemaining <= 0 || r.Clash != (store.Clash{}) {
		return false
	}
	// A shared lease's row ("name#i") holds no local slot: a slot attempt
	// of a semaphore of the same name may find it, and must not free it.
	l := c.reg.lease(name)
	return l == nil || l.token != r.OtherToken
}

// testHookAttempt, when set by a test, runs before each single name's
// acquisition statement of any client, with the client's id.
var testHookAttempt atomic.Pointer[func(client, name string)]

// testHookLoseReply, when set by a test, runs after each acquisition
// statement of any client, with the client's id; an error it returns
// replaces the statement's reply, as if the connection had failed after
// the commit.
var testHookLoseReply atomic.Pointer[func(client string) error]

// testHookAcquired, when set by a test, runs in attempt between an
// acquisition's reply and the leases' registration, once per name.
var testHookAcquired atomic.Pointer[func(name string, epoch uint64)]

// detached runs a statement (run) for a caller on a goroutine of the
// client's, bounded by the statement timeout rather than by ctx: a
// statement cancelled midway would leave its outcome unknown (Close waits
// for it, see inflight, and cuts it only past its own bound). When the
// statement's error (failed) says its connection failed (a pooled one that
// died while idle, a server restart), it is retried on another, three
// tries in all. It returns the statement's result with a nil error; or,
// when ctx ends first, ctx's error at once (ErrClosed when the client is
// closed), and undo later gets the result nobody waited for, to give back
// whatever the statement took; ended is closed once undo has run (nil when
// the result was delivered). The caller checks ctx before calling: a
// statement that completed before the wait began would otherwise be
// delivered to a caller whose context had already ended.
func detached[R any](c *Client, ctx context.Context, run func(context.Context) R, failed func(R) error, undo func(R)) (r R, ended <-chan struct{}, err error) {
	var state atomic.Int32 // 0 running, 1 delivered, 2 abandoned
	ch := make(chan R, 1)
	done := make(chan struct{})
	if !c.life.calls.begin() {
		return r, nil, ErrClosed
	}
	started := c.life.goBackground(func() {
		defer close(done)
		defer c.life.calls.end()
		var r R
		sctx, cancel := context.WithTimeout(c.life.calls.ctx, c.cfg.StatementTimeout)
		b := retryRead.start()
		for try := 0; ; try++ {
			r = run(sctx)
			if err := failed(r); err == nil || try == 2 || !store.ConnectionFailed(err) || sctx.Err() != nil {
				break
			}
			select {
			case <-time.After(b.next()):
			case <-sctx.Done():
			}
		}
		cancel()
		if state.CompareAndSwap(0, 1) {
			ch <- r
			return
		}
		undo(r) // the caller gave up
	})
	if !started {
		c.life.calls.end()
		return r, nil, ErrClosed
	}
	select {
	case r = <-ch:
		return r, nil, nil
	case <-ctx.Done():
		if state.CompareAndSwap(0, 2) {
			return r, done, ctx.Err()
		}
		return <-ch, nil, nil
	}
}
