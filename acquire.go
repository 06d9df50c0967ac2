package pglease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pglease/pglease/internal/store"
)

// localSlot makes a name a mutex between the goroutines of one client: the
// goroutine holding tok is the only one contending for or holding the name.
// Channel receivers queue in FIFO order, so local waiters are served in
// turn and only the first of them queries the server.
type localSlot struct {
	tok  chan struct{}
	refs int
}

func (c *Client) getSlot(name string) *localSlot {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.locals[name]
	if s == nil {
		s = &localSlot{tok: make(chan struct{}, 1)}
		s.tok <- struct{}{}
		c.locals[name] = s
	}
	s.refs++
	return s
}

// putSlot drops a reference, first handing the token back when held.
func (c *Client) putSlot(name string, s *localSlot, holding bool) {
	if holding {
		s.tok <- struct{}{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s.refs--
	if s.refs == 0 && c.locals[name] == s {
		delete(c.locals, name)
	}
}

// TryAcquire makes one attempt to acquire name and returns at once. When the
// lease is held elsewhere (or by another goroutine of this client) the error
// is a *[HeldError] matching [ErrNotAcquired]. ctx bounds this call only,
// never the lease.
func (c *Client) TryAcquire(ctx context.Context, name string, opts ...Option) (*Lease, error) {
	o, err := c.begin(ctx, name, opts)
	if err != nil {
		return nil, err
	}
	if o.slots > 1 {
		l, _, err := c.trySlots(ctx, name, o)
		return l, c.closedErr(err)
	}
	l, _, err := c.tryName(ctx, name, o)
	return l, c.closedErr(err)
}

// tryName makes one attempt on one name, honouring the local mutex.
func (c *Client) tryName(ctx context.Context, name string, o leaseOptions) (*Lease, store.AcquireResult, error) {
	slot := c.getSlot(name)
	select {
	case <-slot.tok:
	default:
		c.putSlot(name, slot, false)
		// Held by another goroutine of this client: its release notifies.
		return nil, store.AcquireResult{OtherRemaining: c.cfg.PollInterval}, c.localHolder(name)
	}
	l, res, err := c.attempt(ctx, name, o, slot)
	if errors.Is(err, errOrphan) {
		l, res, err = c.attempt(ctx, name, o, slot)
	}
	if l != nil {
		return l, res, nil
	}
	c.putSlot(name, slot, true)
	if err != nil {
		return nil, res, err
	}
	return nil, res, heldError(name, res)
}

// Acquire blocks until name is acquired or ctx ends. Waiting is driven by
// notifications when a holder releases, by a timer at the moment the
// holder's lease would expire, and by a slow fallback poll. When ctx ends
// first the error matches both [ErrNotAcquired] and ctx.Err(), and nothing of
// the attempt is left behind. ctx bounds this call only, never the lease.
func (c *Client) Acquire(ctx context.Context, name string, opts ...Option) (*Lease, error) {
	o, err := c.begin(ctx, name, opts)
	if err != nil {
		return nil, err
	}
	if o.slots > 1 {
		return c.waitSlots(ctx, name, o)
	}
	slot := c.getSlot(name)
	select {
	case <-slot.tok:
	case <-ctx.Done():
		c.putSlot(name, slot, false)
		return nil, gaveUp(ctx, c.localHolder(name))
	case <-c.bg.Done():
		c.putSlot(name, slot, false)
		return nil, ErrClosed
	}
	l, err := c.wait(ctx, name, o, slot)
	if err != nil {
		c.putSlot(name, slot, true)
	}
	return l, err
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
	if o.slots > 1 {
		if err := CheckName(slotName(name, o.slots-1)); err != nil {
			return o, fmt.Errorf("%w (with %d slots the name gets a %q suffix)", err, o.slots, "#N")
		}
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
			return o, fmt.Errorf("%w: FastFailover needs pgx (Open, NewFromPool, or database/sql with the pgx stdlib driver)", ErrSessionUnavailable)
		}
	}
	return o, nil
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

func heldError(name string, r store.AcquireResult) error {
	return &HeldError{Holder: Info{Name: name, Owner: r.OtherOwner, Token: r.OtherToken,
		Remaining: r.OtherRemaining, SessionBound: r.HolderInSession}}
}

// errLate: an acquisition succeeded, but its reply came after the lease's
// safety deadline, so it was released at once. Acquire tries again.
var errLate = errors.New("the reply came after the lease's safety deadline; the lease was released (retry)")

// errOrphan: the attempt found, and released, a row this client wrote in
// an acquisition whose reply was lost. Trying again is expected to succeed.
var errOrphan = errors.New("released a row of this client whose acquisition reply was lost (retry)")

func gaveUp(ctx context.Context, last error) error {
	if last == nil {
		last = ErrNotAcquired
	}
	return fmt.Errorf("%w (gave up waiting: %w)", last, ctx.Err())
}

// wait is the blocking acquire loop of the one local goroutine holding the
// name's slot.
func (c *Client) wait(ctx context.Context, name string, o leaseOptions, slot *localSlot) (*Lease, error) {
	if _, err := c.session(); err != nil { // starts the listener
		return nil, err
	}
	// One subscription for the whole wait, taken before the first attempt:
	// a release between an attempt and the pause still wakes the pause.
	woken, unsubscribe := c.hub.subscribe(name)
	defer unsubscribe()
	var awaiter *sessionAwaiter
	defer func() {
		if awaiter != nil {
			awaiter.stop()
		}
	}()
	b := newBackoff(50*time.Millisecond, 2*time.Second)
	var last error
	unbound := 0
	for {
		l, res, err := c.attempt(ctx, name, o, slot)
		if l != nil {
			return l, nil
		}
		var delay time.Duration
		switch {
		case errors.Is(err, ctx.Err()) && ctx.Err() != nil:
			return nil, gaveUp(ctx, last)
		case c.bg.Err() != nil:
			return nil, ErrClosed
		case errors.Is(err, errLate), errors.Is(err, errOrphan):
			delay = 0
		case err != nil && !IsRetryable(err):
			return nil, err
		case err != nil:
			delay = b.next()
			if _, seenHeld := last.(*HeldError); !seenHeld {
				last = fmt.Errorf("%w (the last attempt failed: %w)", ErrNotAcquired, err)
			}
			c.cfg.Logger.Warn("pglease: acquire failed; retrying", "name", name, "err", err, "in", delay)
		default:
			b.reset()
			last = heldError(name, res)
			delay = c.expiryWait(res.OtherRemaining)
			if o.session && !res.HolderInSession && unbound < 3 {
				// A fast-failover holder binds its lease to its session a
				// moment after acquiring it; look again shortly so as to
				// wait on its session rather than its expiry.
				unbound++
				delay = min(delay, 100*time.Millisecond)
			} else if res.HolderInSession {
				unbound = 0
			}
		}
		if err == nil && o.session && res.HolderInSession {
			if awaiter == nil {
				awaiter = c.awaitSession(ctx, name, woken)
			} else {
				awaiter.rearm()
			}
		}
		if err := c.pause(ctx, woken, delay, last); err != nil {
			return nil, err
		}
	}
}

// pause waits for a wake-up, the delay, the caller's context or the
// client's Close, and says which of the last two ended the wait.
func (c *Client) pause(ctx context.Context, woken <-chan struct{}, delay time.Duration, last error) error {
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-woken:
	case <-t.C:
	case <-ctx.Done():
	case <-c.bg.Done():
	}
	switch {
	case ctx.Err() != nil:
		return gaveUp(ctx, last)
	case c.bg.Err() != nil:
		return ErrClosed
	}
	return nil
}

// expiryWait is how long to sleep before the next attempt when the holder's
// lease has remaining time left: until it would expire, plus a little
// jitter so that contenders of several processes do not collide, at most
// the fallback poll interval.
func (c *Client) expiryWait(remaining time.Duration) time.Duration {
	if remaining < 0 { // the holder's row appeared concurrently
		return 5*time.Millisecond + rand.N(20*time.Millisecond)
	}
	d := remaining + time.Millisecond + rand.N(remaining/50+5*time.Millisecond)
	return min(d, c.cfg.PollInterval)
}

// sessionAwaiter waits, on a connection of its own kept for the whole
// wait, on the advisory lock of a session-bound holder, and wakes the
// waiter the moment the holder's session releases it or ends (a crash sends
// no notification).
type sessionAwaiter struct {
	again  chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

func (c *Client) awaitSession(ctx context.Context, name string, woken chan struct{}) *sessionAwaiter {
	ctx, cancel := context.WithCancel(ctx)
	a := &sessionAwaiter{again: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	a.again <- struct{}{}
	started := c.goBackground(func() {
		defer close(a.done)
		var conn *pgxConn
		defer func() {
			if conn != nil {
				conn.close()
			}
		}()
		b := newBackoff(50*time.Millisecond, 2*time.Second)
		for {
			select {
			case <-a.again:
			case <-ctx.Done():
				return
			}
			if conn == nil {
				cfg, err := c.dedicatedConfig(ctx)
				if err != nil || cfg == nil {
					return
				}
				pc, err := connectPgx(ctx, cfg, c.connectTimeout())
				if err != nil {
					wake(a.again)
					select {
					case <-time.After(b.next()):
					case <-ctx.Done():
					}
					continue
				}
				conn = &pc
			}
			if err := c.st.AwaitSession(ctx, conn.querier(), name); err != nil {
				conn.close()
				conn = nil
				if ctx.Err() != nil {
					return
				}
				wake(a.again)
				continue
			}
			b.reset()
			wake(woken)
		}
	})
	if !started {
		close(a.done)
	}
	return a
}

// rearm makes the awaiter wait for the (new) holder's session again.
func (a *sessionAwaiter) rearm() { wake(a.again) }

// stop ends the awaiter and waits for it.
func (a *sessionAwaiter) stop() {
	a.cancel()
	<-a.done
}

// attempt runs one acquisition statement. The statement runs on a detached
// context: when ctx ends first, attempt returns at once with ctx.Err() and
// a lease the statement may still grant is released by token, so nothing
// of a cancelled attempt is left behind.
func (c *Client) attempt(ctx context.Context, name string, o leaseOptions, slot *localSlot) (*Lease, store.AcquireResult, error) {
	type result struct {
		res   store.AcquireResult
		sent  time.Time
		epoch uint64
		err   error
	}
	args := store.AcquireArgs{Name: name, Owner: c.cfg.Owner, TTL: o.ttl, MinHold: o.minHold, Session: o.session, Metadata: o.metadata, Client: c.id}
	var state atomic.Int32 // 0 running, 1 delivered, 2 abandoned
	ch := make(chan result, 1)
	started := c.goBackground(func() {
		var r result
		r.sent = time.Now()
		if o.session {
			r.res, r.epoch, r.err = c.acquireInSession(args)
		} else {
			sctx, cancel := context.WithTimeout(c.bg, c.cfg.StatementTimeout)
			for try := 0; ; try++ {
				r.res, r.err = c.st.Acquire(sctx, c.db, args)
				// A pooled connection that died while idle fails before
				// anything is sent: retrying then cannot acquire twice.
				if r.err == nil || try == 2 || !pgconn.SafeToRetry(r.err) || sctx.Err() != nil {
					break
				}
				r.sent = time.Now()
			}
			cancel()
		}
		if state.CompareAndSwap(0, 1) {
			ch <- r
			return
		}
		if r.err == nil && r.res.Acquired { // the caller gave up: undo
			l := c.newLease(name, r.res.Token, o, r.sent, r.epoch, r.res.SessionBound, nil)
			_ = c.releaseRow(context.Background(), l)
			l.end(ErrReleased)
		}
	})
	if !started {
		return nil, store.AcquireResult{}, ErrClosed
	}
	var r result
	select {
	case r = <-ch:
	case <-ctx.Done():
		if state.CompareAndSwap(0, 2) {
			return nil, store.AcquireResult{}, ctx.Err()
		}
		r = <-ch
	}
	if r.err != nil {
		return nil, r.res, opError(fmt.Sprintf("acquire %q", name), r.err)
	}
	if c.orphan(r.res) {
		// A row of this client that no lease of it holds (the caller holds
		// the name's local slot): an earlier acquisition of ours committed
		// but its reply was lost. Free it by token; the caller retries.
		c.cfg.Logger.Warn("pglease: releasing a lease row whose acquisition reply was lost", "name", name, "token", r.res.OtherToken)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.StatementTimeout)
		_, err := c.st.Release(rctx, c.db, name, r.res.OtherToken, false)
		cancel()
		if err != nil {
			return nil, r.res, opError(fmt.Sprintf("release an orphaned row of %q", name), err)
		}
		return nil, r.res, fmt.Errorf("pglease: acquire %q: %w", name, errOrphan)
	}
	if !r.res.Acquired {
		c.events.send(Event{Kind: EventContended, Name: name, Owner: c.cfg.Owner, Previous: r.res.OtherOwner, Token: r.res.OtherToken})
		if c.cfg.AlertAfter > 0 && r.res.OtherHeartbeatAge > c.cfg.AlertAfter && r.res.OtherRemaining > 0 {
			c.cfg.Logger.Warn("pglease: holder's heartbeat is old", "name", name, "holder", r.res.OtherOwner, "age", r.res.OtherHeartbeatAge)
			c.events.send(Event{Kind: EventAlert, Name: name, Owner: r.res.OtherOwner, Token: r.res.OtherToken, Age: r.res.OtherHeartbeatAge})
		}
		return nil, r.res, nil
	}
	l := c.newLease(name, r.res.Token, o, r.sent, r.epoch, r.res.SessionBound, slot)
	if !time.Now().Before(l.Deadline()) {
		// The reply came so late (a partition that healed, a pause) that
		// the lease's safety deadline has passed: it cannot be trusted.
		l.slot = nil // the caller frees the local slot
		_ = c.releaseRow(context.Background(), l)
		l.end(&lostError{"the acquisition's reply arrived after its safety deadline"})
		return nil, r.res, fmt.Errorf("pglease: acquire %q: %w", name, errLate)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		_ = c.releaseRow(context.Background(), l)
		l.end(ErrClosed)
		return nil, r.res, ErrClosed
	}
	c.held[name] = l
	l.arm()
	c.startRenewer(l)
	c.mu.Unlock()
	c.events.send(Event{Kind: EventAcquired, Name: name, Owner: c.cfg.Owner, Token: l.token})
	if r.res.OtherToken != 0 {
		c.events.send(Event{Kind: EventStaleReclaimed, Name: name, Owner: c.cfg.Owner, Token: l.token, Previous: r.res.OtherOwner})
	}
	return l, r.res, nil
}

// orphan reports whether a failed attempt found a row written by this
// client. The caller holds the name's local slot, so no lease of this
// client holds the name: the row is left from an acquisition whose reply
// was lost (the connection failed after the commit).
func (c *Client) orphan(r store.AcquireResult) bool {
	return !r.Acquired && r.OtherClient == c.id && r.OtherToken != 0 && r.OtherRemaining > 0
}

// acquireInSession runs a session-bound acquisition on the dedicated
// connection, first making sure the server will not declare that session
// dead before the lease's own deadline.
func (c *Client) acquireInSession(args store.AcquireArgs) (store.AcquireResult, uint64, error) {
	s, err := c.session()
	if err != nil {
		return store.AcquireResult{}, 0, err
	}
	var res store.AcquireResult
	var epoch uint64
	err = s.do(c.bg, c.cfg.StatementTimeout, func(ctx context.Context, q store.Querier, st *sessState) error {
		if *st.keepalive < args.TTL {
			if err := c.st.SessionKeepalive(ctx, q, args.TTL); err != nil {
				return err
			}
			*st.keepalive = args.TTL
		}
		var err error
		res, err = c.st.Acquire(ctx, q, args)
		if err == nil && !res.Acquired && res.LockTaken {
			err = c.st.Unlock(ctx, q, args.Name)
		}
		// Acquired, but another session held the name's lock for an instant
		// (a contender's attempt, a waiter passing through): bind the lease
		// once the lock is free, so that it fails over fast too.
		for try := 0; err == nil && res.Acquired && !res.SessionBound && try < 20; try++ {
			if try > 0 {
				time.Sleep(time.Duration(try) * time.Millisecond)
			}
			res.SessionBound, err = c.st.Bind(ctx, q, args.Name, res.Token)
		}
		epoch = st.epoch
		return err
	})
	return res, epoch, err
}
