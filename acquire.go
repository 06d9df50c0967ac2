package pglease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/pglease/pglease/internal/store"
)

// TryAcquire makes one attempt to acquire name (with [WithSlots], one on
// every slot) and returns at once. When the lease is held elsewhere (or by
// another goroutine of this client) the error is a *[HeldError] matching
// [ErrNotAcquired]. A transient error on a connection (a server restart, a
// dropped pooled connection) is retried a few times first, as nothing can
// have been acquired twice: a row of this client's whose reply was lost is
// recognised and freed. ctx bounds this call only, never the lease.
// name must pass [CheckName]. A semaphore whose live slots record another
// slot count fails with a *[SlotsError] (see [WithSlots]).
func (c *Client) TryAcquire(ctx context.Context, name string, opts ...Option) (*Lease, error) {
	o, err := c.begin(ctx, name, opts)
	if err != nil {
		return nil, err
	}
	l, err := c.acquire(ctx, name, o, false)
	return l, c.closedErr(err)
}

// Acquire blocks until name is acquired or ctx ends. Waiting is driven by
// notifications when a holder releases, by a timer at the moment the
// holder's lease would expire, by the end of a fast-failover holder's
// session, and by a slow fallback poll. When ctx ends first the error
// matches both [ErrNotAcquired] and ctx.Err(), and nothing of the attempt
// is left behind. ctx bounds this call only, never the lease. A
// semaphore whose live slots record another slot count fails at once with
// a *[SlotsError] (see [WithSlots]): waiting would not end the mismatch.
func (c *Client) Acquire(ctx context.Context, name string, opts ...Option) (*Lease, error) {
	o, err := c.begin(ctx, name, opts)
	if err != nil {
		return nil, err
	}
	l, err := c.acquire(ctx, name, o, true)
	if errors.Is(err, ErrNotAcquired) && ctx.Err() != nil {
		return nil, err // gave up: keep the holder and ctx.Err()
	}
	return l, c.closedErr(err)
}

// begin validates a call and makes sure the table exists.
func (c *Client) begin(ctx context.Context, name string, opts []Option) (leaseOptions, error) {
	if err := CheckName(name); err != nil {
		return leaseOptions{}, err
	}
	o, err := c.leaseOptions(opts)
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

// SlotName is the lease name of slot i of the semaphore name (see
// [WithSlots]): "name#i". Each slot is a lease of its own, with its own
// fencing token, that [Client.Get] reads by this name. No lease name
// can end like a slot name ([CheckName]), so the two never meet.
func SlotName(name string, i int) string { return name + "#" + strconv.Itoa(i) }

// acquire is the one acquisition loop, for a name or for any slot of a
// semaphore, once (TryAcquire) or until ctx ends (Acquire). A single name is
// queued on locally for the whole wait (FIFO between the goroutines of this
// client) and, while the client's dedicated session is live, on the server
// (FIFO between clients: see "Waiting" in the package documentation); the
// slots of a semaphore are each tried only while no other goroutine of this
// client holds them.
func (c *Client) acquire(ctx context.Context, name string, o leaseOptions, wait bool) (*Lease, error) {
	names := o.names(name)
	if o.slots > 1 {
		o.semaphore = name
	}
	var w *waiting
	if wait {
		if _, err := c.session(); err != nil { // starts the listener
			return nil, err
		}
		// One subscription for the whole wait, taken before the first
		// attempt: a release between an attempt and the pause still wakes
		// the pause.
		sub, unsubscribe := c.hub.subscribe(names...)
		defer unsubscribe()
		w = &waiting{sub: sub, queue: len(names) == 1}
	}
	var mine *localSlot // the single name's local slot, held for the whole wait
	if len(names) == 1 {
		if mine = c.tryTake(name); mine == nil && !wait {
			return nil, c.localHolder(name)
		}
		if mine == nil {
			mine = c.getSlot(name)
			select {
			case <-mine.tok:
			case <-ctx.Done():
				c.putSlot(name, mine, false)
				return nil, gaveUp(ctx, c.localHolder(name))
			case <-c.bg.Done():
				c.putSlot(name, mine, false)
				return nil, ErrClosed
			}
		}
	}
	watched := map[string]watch{} // by name: the holders seen, and their watchers
	watchers := 0                 // watchers started, at most maxWatched
	defer func() {
		for n, wt := range watched {
			if wt.w != nil {
				c.unwatchSession(wt.holder, n, wt.w)
			}
		}
	}()
	// fail ends a wait without a lease: it leaves the server's queue and
	// then frees the local slot (so that the next local waiter's
	// registration is not undone by this one's).
	fail := func(err error) (*Lease, error) {
		c.leaveQueue(w, name, func() {
			if mine != nil {
				c.putSlot(name, mine, true)
			}
		})
		return nil, err
	}
	b := newBackoff(50*time.Millisecond, 2*time.Second)
	var last error
	retries := 0
	woken := false        // the last pause ended with a wake-up
	var wokenAt time.Time // the first wake-up of this wait
	for {
		r := c.round(ctx, names, o, mine, w)
		if r.lease != nil {
			if !r.dequeued {
				c.leaveQueue(w, name, func() {})
			}
			return r.lease, nil
		}
		var delay time.Duration
		switch err := r.err; {
		case err == nil:
			b.reset()
			last = r.held
			delay = c.expiryWait(r.soonest)
			if w != nil && w.recheck {
				delay = min(delay, store.WakeEvery)
			}
			if woken && wokenAt.IsZero() {
				wokenAt = time.Now()
			}
			if w != nil && w.queued && !wokenAt.IsZero() && !r.behind {
				if left := time.Until(wokenAt.Add(fairAfter + store.WakeEvery)); left > 0 {
					// Woken in vain: the releasing client took the name
					// again first. The lease is promised to this waiter
					// fairAfter into its turn; look again then.
					delay = min(delay, left)
				}
			}
		case ctx.Err() != nil && errors.Is(err, ctx.Err()):
			err = gaveUp(ctx, last)
			fallthrough
		case c.bg.Err() != nil, !IsRetryable(err), !wait && (retries >= 2 || !redo(err)):
			if c.bg.Err() != nil && ctx.Err() == nil {
				err = ErrClosed
			}
			return fail(err)
		case redo(err):
			retries++
		default:
			retries++
			delay = b.next()
			if _, seenHeld := last.(*HeldError); !seenHeld {
				last = errorf("%w (the last attempt failed: %w)", ErrNotAcquired, err)
			}
			c.cfg.Logger.WarnContext(ctx, "pglease: acquire failed; retrying", "name", name, "err", err, "in", delay)
		}
		if !wait && r.err == nil {
			return fail(r.held)
		}
		for _, h := range r.inSession {
			cur := watched[h.name]
			switch {
			case cur.holder != h.session:
				// A new holder: watch its session once it has held the
				// name for watchAfter (look again then).
				if cur.w != nil {
					c.unwatchSession(cur.holder, h.name, cur.w)
					watchers--
				}
				watched[h.name] = watch{holder: h.session, since: time.Now()}
				delay = min(delay, watchAfter)
			case cur.w != nil:
				cur.w.rearm()
			case !wait || watchers >= maxWatched:
			case time.Since(cur.since) >= watchAfter:
				cur.w = c.watchSession(h.session, h.name)
				watched[h.name] = cur
				watchers++
			default:
				delay = min(delay, watchAfter-time.Since(cur.since))
			}
		}
		var err error
		if woken, err = c.pause(ctx, w.channel(), delay, last); err != nil {
			return fail(err)
		}
	}
}

// waiting is a blocked Acquire's state between its attempts.
type waiting struct {
	sub *subscription
	// queue: the wait may queue on the server (a single name); queued:
	// an attempt registered it there, so it must leave when it gives up.
	queue, queued bool
	// registered: the last attempt left a registration in the queue;
	// recheck: it was the first.
	registered, recheck bool
}

func (w *waiting) channel() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.sub.ch
}

// queueArgs makes an attempt of this wait a queued one when the client's
// dedicated session is live: without it no targeted notification could
// reach the wait, and it attempts unqueued, on every release.
func (c *Client) queueArgs(w *waiting, args *store.AcquireArgs) {
	if w == nil || !w.queue {
		return
	}
	s, err := c.session()
	if err != nil || !s.isLive() {
		w.sub.queued.Store(false)
		return
	}
	args.Queued, args.QueueTTL, w.queued = true, c.queueTTL(), true
}

// fairAfter is how long the first queued waiter may be overtaken once its
// turn began (see "Waiting" in the package documentation).
const fairAfter = store.FairAfter

// queueTTL is how long a registration in the queue stays fresh: a waiter
// attempts at least every PollInterval, and each attempt refreshes it, so
// only a waiter that stopped attempting (a crash its session survives, a
// partition) goes stale, and is passed over.
func (c *Client) queueTTL() time.Duration { return 3*c.cfg.PollInterval + time.Second }

// leaveQueue removes the wait's registration for name from the server's
// queue, if an attempt made one, and then runs then; in the background,
// bounded by the statement timeout. (Only single names queue.)
func (c *Client) leaveQueue(w *waiting, name string, then func()) {
	if w == nil || !w.queued {
		then()
		return
	}
	w.queued = false
	if !c.goBackground(func() {
		defer then()
		ctx, cancel := context.WithTimeout(c.bg, c.cfg.StatementTimeout)
		defer cancel()
		if err := c.st.Unqueue(ctx, c.db, c.id, name); err != nil && c.bg.Err() == nil {
			c.cfg.Logger.WarnContext(ctx, "pglease: could not leave the queue of waiters; the registration goes stale by itself", "name", name, "err", err)
		}
	}) {
		then()
	}
}

// watch is a wait's watcher of a session-bound holder's session.
type watch struct {
	holder int32     // the holder's session (backend pid)
	since  time.Time // when this wait first saw it hold the name
	w      *sessionWatcher
}

// watchAfter is how long a fast-failover holder holds a name before a
// waiter watches its session (a connection of its own, blocked on the
// holder session's lock). Holders that hand a name on sooner are followed
// by their releases' notifications, without a connection each; a crash
// fails over within about this much more than the session's end.
const watchAfter = 200 * time.Millisecond

// roundResult is the outcome of one attempt on each candidate name.
type roundResult struct {
	lease *Lease
	// dequeued: the lease came from a queued attempt, whose statement left
	// the queue.
	dequeued bool
	err      error // an attempt failed (not: the name is held)
	// When every name is held: the holder that expires first, its
	// remaining time, and the session-bound holders of this server
	// incarnation whose sessions to watch.
	held      error
	soonest   time.Duration
	inSession []heldBy
	// behind: a name was promised to waiters queued ahead of this wait.
	behind bool
}

// heldBy names a name's session-bound holder (its session's backend pid).
type heldBy struct {
	name    string
	session int32
}

// round makes one attempt on each of names, in random order so that the
// contenders for a semaphore spread out, and returns the first lease
// acquired. mine is the local slot of a single name, held by the caller.
func (c *Client) round(ctx context.Context, names []string, o leaseOptions, mine *localSlot, w *waiting) roundResult {
	r := roundResult{soonest: -1}
	for _, i := range rand.Perm(len(names)) {
		name := names[i]
		slot := mine
		if slot == nil {
			if slot = c.tryTake(name); slot == nil {
				// Held by another goroutine of this client: its release
				// notifies.
				r.note(c.localHolder(name), c.cfg.PollInterval)
				continue
			}
		}
		l, res, err := c.attempt(ctx, name, o, slot, w)
		if errors.Is(err, errOrphan) {
			l, res, err = c.attempt(ctx, name, o, slot, w)
		}
		if l != nil {
			r.lease, r.dequeued = l, res.queued
			return r
		}
		if mine == nil {
			c.putSlot(name, slot, true)
		}
		if err != nil {
			r.err = err
			return r
		}
		if w != nil {
			w.sub.queued.Store(res.queued)
			// A release running alongside this wait's first registration
			// may not have seen it, and woken nobody: look once more.
			w.recheck = res.queued && !w.registered
			w.registered = res.queued
		}
		if res.Ahead > 0 {
			// Promised to the waiters ahead: this wait's turn comes with a
			// targeted notification (or, should they vanish, the poll).
			r.note(queuedError(name, res), c.cfg.PollInterval)
			r.behind = true
			continue
		}
		r.note(heldError(name, res), res.OtherRemaining)
		if res.HolderInSession && res.HolderWatchable {
			// Any contender takes a session-bound row over once the
			// holder's session ends: watch it.
			r.inSession = append(r.inSession, heldBy{name, res.HolderSession})
		}
	}
	return r
}

// note records a holder; the one that expires first is reported.
func (r *roundResult) note(held error, remaining time.Duration) {
	if r.held == nil || (remaining >= 0 && (r.soonest < 0 || remaining < r.soonest)) {
		r.held, r.soonest = held, remaining
	}
}

func (c *Client) localHolder(name string) error {
	c.mu.Lock()
	l := c.held[name]
	c.mu.Unlock()
	info := Info{Name: name, Owner: c.cfg.Owner}
	if l != nil {
		info.Token, info.TTL = l.token, l.ttl
		info.Remaining = time.Until(l.Deadline())
	}
	return &HeldError{Holder: info}
}

func heldError(name string, r acquireResult) error {
	return &HeldError{Holder: Info{Name: name, Owner: r.OtherOwner, Token: r.OtherToken,
		Remaining: r.OtherRemaining, SessionBound: r.HolderInSession}}
}

// queuedError describes a name whose lease waiters of other clients are
// queued for ahead of this one (it may be free, promised to the first).
func queuedError(name string, r acquireResult) error {
	e := heldError(name, r).(*HeldError)
	if r.OtherToken == 0 {
		e.Holder = Info{Name: name}
	}
	e.Queued = int(r.Ahead)
	return e
}

// pause waits for a wake-up, the delay, the caller's context or the
// client's Close; it says whether a wake-up ended it, or which of the last
// two did.
func (c *Client) pause(ctx context.Context, wakeups <-chan struct{}, delay time.Duration, last error) (woken bool, err error) {
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-wakeups:
		woken = true
	case <-t.C:
	case <-ctx.Done():
	case <-c.bg.Done():
	}
	switch {
	case ctx.Err() != nil:
		return false, gaveUp(ctx, last)
	case c.bg.Err() != nil:
		return false, ErrClosed
	}
	return woken, nil
}

// expiryWait is how long to sleep before the next attempt when the holder's
// lease has remaining time left: until it would expire, plus a little
// jitter so that contenders of several processes do not collide, at most
// the fallback poll interval.
func (c *Client) expiryWait(remaining time.Duration) time.Duration {
	if remaining < 0 { // the holder's row appeared concurrently, or is busy
		return 5*time.Millisecond + rand.N(20*time.Millisecond)
	}
	d := remaining + time.Millisecond + rand.N(remaining/50+5*time.Millisecond)
	return min(d, c.cfg.PollInterval)
}

// detached runs a statement (run) for a caller on a goroutine of the
// client's, bounded by the statement timeout rather than by ctx: a
// statement cancelled midway would leave its outcome unknown. When the
// statement's error (failed) says its connection failed (a pooled one that
// died while idle, a server restart), it is retried on another, three
// tries in all. It returns the statement's result with a nil error; or,
// when ctx ends first, ctx's error at once (ErrClosed when the client is
// closed), and undo later gets the result nobody waited for, to give back
// whatever the statement took. The caller checks ctx before calling: a
// statement that completed before the wait began would otherwise be
// delivered to a caller whose context had already ended.
func detached[R any](c *Client, ctx context.Context, run func(context.Context) R, failed func(R) error, undo func(R)) (r R, err error) {
	var state atomic.Int32 // 0 running, 1 delivered, 2 abandoned
	ch := make(chan R, 1)
	started := c.goBackground(func() {
		var r R
		sctx, cancel := context.WithTimeout(c.bg, c.cfg.StatementTimeout)
		b := newBackoff(20*time.Millisecond, 200*time.Millisecond)
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
		return r, ErrClosed
	}
	select {
	case r = <-ch:
		return r, nil
	case <-ctx.Done():
		if state.CompareAndSwap(0, 2) {
			return r, ctx.Err()
		}
		return <-ch, nil
	}
}

// acquireResult is one attempt's outcome as the client sees it.
type acquireResult struct {
	store.AcquireResult
	// busy: a session-bound attempt gave up waiting for a lock on the row
	// (a guarded transaction, a contender's acquisition); the holder is
	// unknown.
	busy bool
	// queued: the attempt was a queued one (see waiting).
	queued bool
}

// attempt runs one acquisition statement. The statement runs on a detached
// context: when ctx ends first, attempt returns at once with ctx.Err() and
// a lease the statement may still grant is released by token, so nothing
// of a cancelled attempt is left behind.
func (c *Client) attempt(ctx context.Context, name string, o leaseOptions, slot *localSlot, w *waiting) (*Lease, acquireResult, error) {
	type result struct {
		res   acquireResult
		sent  time.Time
		epoch uint64
		err   error
	}
	if err := ctx.Err(); err != nil {
		// Checked before the statement starts, not only while it runs: a
		// statement that completed before this goroutine reached the
		// select below would otherwise be delivered, and a caller whose
		// context had already ended would get a lease.
		return nil, acquireResult{}, err
	}
	args := store.AcquireArgs{Name: name, Owner: c.cfg.Owner, TTL: o.ttl, MinHold: o.minHold, Session: o.session, Metadata: o.metadata, Client: c.id,
		FairAfter: fairAfter, Semaphore: o.semaphore, Slots: o.slots}
	c.queueArgs(w, &args)
	if hook := testHookAttempt.Load(); hook != nil {
		(*hook)(c.id, name)
	}
	// Even if a statement that failed with its connection committed, the
	// retry cannot acquire twice: it finds the row as this client's own
	// and frees it (errOrphan).
	r, err := detached(c, ctx, func(sctx context.Context) (r result) {
		r.sent = time.Now()
		if o.session {
			r.res, r.epoch, r.err = c.acquireInSession(args)
		} else {
			r.res.AcquireResult, r.err = c.st.Acquire(sctx, c.db, args)
		}
		return r
	}, func(r result) error { return r.err }, func(r result) {
		if r.err == nil && r.res.Acquired {
			l := c.newLease(name, r.res.Token, o, r.sent, r.epoch, r.res.SessionBound, nil)
			_ = c.releaseRow(context.Background(), l)
			l.end(ErrReleased)
		}
	})
	if err != nil {
		return nil, acquireResult{}, err
	}
	r.res.queued = args.Queued
	if r.err != nil {
		if errors.Is(r.err, ErrSessionUnavailable) {
			return nil, r.res, r.err
		}
		return nil, r.res, opError(fmt.Sprintf("acquire %q", name), r.err)
	}
	if c.orphan(r.res.AcquireResult) {
		// A row of this client that no lease of it holds (the caller holds
		// the name's local slot): an earlier acquisition of ours committed
		// but its reply was lost. Free it by token; the caller retries.
		c.cfg.Logger.WarnContext(ctx, "pglease: releasing a lease row whose acquisition reply was lost", "name", name, "token", r.res.OtherToken)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.StatementTimeout)
		_, err := c.st.Release(rctx, c.db, name, r.res.OtherToken)
		cancel()
		if err != nil {
			return nil, r.res, opError(fmt.Sprintf("release an orphaned row of %q", name), err)
		}
		return nil, r.res, errorf("acquire %q: %w", name, errOrphan)
	}
	if r.res.SlotsMismatch != 0 {
		// Not retryable: the acquisition loop returns it at once.
		return nil, r.res, &SlotsError{Name: cmp.Or(o.semaphore, name), Want: max(o.slots, 1), Have: r.res.SlotsMismatch}
	}
	if !r.res.Acquired {
		if !r.res.busy {
			c.events.send(Event{Kind: EventContended, Name: name, Owner: c.cfg.Owner, Previous: r.res.OtherOwner, Token: r.res.OtherToken, Context: ctx})
		}
		if c.cfg.AlertAfter > 0 && r.res.OtherHeartbeatAge > c.cfg.AlertAfter && r.res.OtherRemaining > 0 {
			c.cfg.Logger.WarnContext(ctx, "pglease: holder's heartbeat is old", "name", name, "holder", r.res.OtherOwner, "age", r.res.OtherHeartbeatAge)
			c.events.send(Event{Kind: EventAlert, Name: name, Owner: r.res.OtherOwner, Token: r.res.OtherToken, Age: r.res.OtherHeartbeatAge, Context: ctx})
		}
		return nil, r.res, nil
	}
	if hook := testHookAcquired.Load(); hook != nil {
		(*hook)(name, r.epoch)
	}
	l := c.newLease(name, r.res.Token, o, r.sent, r.epoch, r.res.SessionBound, slot)
	if !time.Now().Before(l.Deadline()) {
		// The reply came so late (a partition that healed, a pause) that
		// the lease's safety deadline has passed: it cannot be trusted.
		c.giveUp(l, &lostError{why: "the acquisition's reply arrived after its safety deadline"})
		return nil, r.res, errorf("acquire %q: %w", name, errLate)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.giveUp(l, ErrClosed)
		return nil, r.res, ErrClosed
	}
	if l.session && c.sess.currentEpoch() != l.epoch {
		// The session ended between the commit and now, and sessionLost
		// ran without this lease (it checks the held leases under c.mu,
		// after the session's epoch changed): a waiter may hold the name.
		c.mu.Unlock()
		c.giveUp(l, sessionEnded("its database session ended right after the acquisition"))
		return nil, r.res, errorf("acquire %q: %w", name, errSessionGone)
	}
	c.held[name] = l
	l.arm()
	c.startRenewer(l)
	c.mu.Unlock()
	previous := ""
	if r.res.OtherToken != 0 {
		previous = r.res.OtherOwner
	}
	l.announce(ctx, o.called, previous)
	return l, r.res, nil
}

// testHookAttempt, when set by a test, runs before each acquisition
// statement of any client, with the client's id.
var testHookAttempt atomic.Pointer[func(client, name string)]

// testHookAcquired, when set by a test, runs in attempt between an
// acquisition's reply and the lease's registration.
var testHookAcquired atomic.Pointer[func(name string, epoch uint64)]

// giveUp ends a lease that was acquired but cannot be handed out and frees
// its row by token; the caller frees the local slot.
func (c *Client) giveUp(l *Lease, cause error) {
	l.slot = nil
	_ = c.releaseRow(context.Background(), l)
	l.end(cause)
}

// orphan reports whether a failed attempt found a row written by this
// client. The caller holds the name's local slot, so no lease of this
// client holds the name: the row is left from an acquisition whose reply
// was lost (the connection failed after the commit).
func (c *Client) orphan(r store.AcquireResult) bool {
	return !r.Acquired && r.OtherClient == c.id && r.OtherToken != 0 && r.OtherRemaining > 0
}
