package pglease

// Fast failover: a lease acquired with WithFastFailover is also bound to
// the holder's dedicated database session: its row records the session's
// backend pid, whose session lock (SessionLock in session.sql) the session
// holds for as long as it lives, and any attempt takes the row over once
// that lock is free (see docs/DESIGN-FAST-FAILOVER.md).
// This file holds what only such leases do: the session-bound acquisition,
// the watchers through which waiters learn at once that a holder's session
// ended, and ending the leases of a session that failed.

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/store"
)

// sessionLockTimeout bounds the lock waits of every statement on the
// dedicated connection, and acquireLockTimeout those of a session-bound
// acquisition: the connection also renews, and must not sit behind a row
// lock (a guarded transaction) or a contender's acquisition for long.
const (
	sessionLockTimeout = 200 * time.Millisecond
	acquireLockTimeout = 50 * time.Millisecond
)

// acquireInSession runs a session-bound acquisition on the dedicated
// connection, first making sure the server will not declare that session
// dead before the lease's own deadline, and that the session holds its
// session lock. The session loop may run the acquisition in one batch with
// others queued behind it (acquireBatch), with the same outcome.
//
// The operation is bounded by its own timeouts, not by a context of the
// caller's: the result is read only once the operation has finished.
func (c *Client) acquireInSession(args store.AcquireArgs) (acquireResult, uint64, error) {
	s, err := c.session()
	if err != nil {
		return acquireResult{}, 0, err
	}
	args.LockTimeout = acquireLockTimeout
	a := &sessAcquire{args: args}
	err = s.run(c.life.bg, &sessOp{timeout: c.cfg.StatementTimeout + time.Second, acquire: a, res: make(chan error, 1),
		fn: func(ctx context.Context, q store.Querier, st *sessState) error { return c.acquireOne(ctx, q, st, a) }})
	if err != nil { // the operation may not have run yet
		return acquireResult{}, 0, err
	}
	return a.res, a.epoch, nil
}

// acquireAloneInSession is acquireInSession for a kind whose holders share
// a name (see kind.keepsLocalSlot): the attempt, acquire (which runs the
// kind's statement with the lock timeout of a session-bound acquisition,
// acquireLockTimeout), runs by itself (the session's batches are of plain
// leases), and also returns the row acquired. ttl is the lease's.
func (c *Client) acquireAloneInSession(ttl time.Duration, acquire func(context.Context, store.Querier) (store.AcquireResult, string, error)) (acquireResult, string, uint64, error) {
	s, err := c.session()
	if err != nil {
		return acquireResult{}, "", 0, err
	}
	var res acquireResult
	var row string
	var epoch uint64
	err = s.run(c.life.bg, &sessOp{timeout: c.cfg.StatementTimeout + time.Second, res: make(chan error, 1),
		fn: func(ctx context.Context, q store.Querier, st *sessState) error {
			if st.proxied {
				return errProxied
			}
			epoch = st.epoch
			if err := c.bindable(ctx, q, st, ttl); err != nil {
				return err
			}
			var err error
			res.AcquireResult, row, err = acquire(ctx, q)
			if store.Classify(err) == store.KindLockTimeout { // the name is busy
				res, err = acquireResult{busy: true}, nil
				res.OtherRemaining = -1
			}
			return err
		}})
	if err != nil {
		return acquireResult{}, "", 0, err
	}
	return res, row, epoch, nil
}

// sessAcquire is a session-bound acquisition queued on the session. The
// loop writes its outcome before it answers the operation.
type sessAcquire struct {
	args  store.AcquireArgs
	alone bool // its batch failed: it runs by itself (under session.mu)
	res   acquireResult
	epoch uint64
}

// acquireOne runs one session-bound acquisition by itself.
func (c *Client) acquireOne(ctx context.Context, q store.Querier, st *sessState, a *sessAcquire) error {
	if st.proxied {
		return errProxied
	}
	a.epoch = st.epoch
	if err := c.bindable(ctx, q, st, a.args.TTL); err != nil {
		return err
	}
	var err error
	a.res.AcquireResult, err = c.st.Acquire(ctx, q, a.args)
	if store.Classify(err) == store.KindLockTimeout { // the row or name is busy
		a.res, err = acquireResult{busy: true}, nil
		a.res.OtherRemaining = -1
	}
	return err
}

// bindable prepares the session for session-bound leases of ttl: it holds
// its session lock (the clientLock of a new connection takes it, unless
// the table was not ready then), and the server will not declare it dead
// before such a lease would expire.
func (c *Client) bindable(ctx context.Context, q store.Querier, st *sessState, ttl time.Duration) error {
	if !*st.locked {
		if err := c.st.SessionLock(ctx, q); err != nil {
			return err
		}
		*st.locked = true
	}
	return c.keepalive(ctx, q, st, ttl)
}

// keepalive makes sure the server will not declare the session dead before
// a lease of ttl would expire.
func (c *Client) keepalive(ctx context.Context, q store.Querier, st *sessState, ttl time.Duration) error {
	if *st.keepalive >= ttl {
		return nil
	}
	if err := c.st.SessionKeepalive(ctx, q, ttl); err != nil {
		return err
	}
	*st.keepalive = ttl
	return nil
}

// maxBatch bounds the acquisitions of one batch, and so the wait of a
// renewal queued behind it; minBatchStatement is the least server-side
// bound of each of its statements.
const (
	maxBatch          = 64
	minBatchStatement = 50 * time.Millisecond
)

// batchLimit is how many acquisitions one batch may hold: each statement
// of a batch gets an equal share of half the statement timeout, at least
// minBatchStatement.
func (c *Client) batchLimit() int {
	return min(maxBatch, max(1, int(c.cfg.StatementTimeout/2/minBatchStatement)))
}

// acquireBatch runs the acquisitions of ops (each an acquisition of a
// distinct name) in one round trip and one transaction on the pgx
// connection conn, with the outcome each would have by itself: bindable
// first, for the longest TTL; then the batch, each of its statements
// bounded on the server by an equal share of half the statement timeout,
// so that the server, not the client, ends a slow batch. A lock timeout
// (by itself: a busy result) aborts a batch like any failed statement.
//
// When err is not nil nothing of the batch was acquired: the acquisitions
// may run again, one by one, if the connection is intact.
func (c *Client) acquireBatch(ctx context.Context, conn *pgx.Conn, st *sessState, ops []*sessOp) error {
	q := store.Pgx(conn)
	var ttl time.Duration
	args := make([]store.AcquireArgs, len(ops))
	for i, op := range ops {
		args[i] = op.acquire.args
		ttl = max(ttl, args[i].TTL)
	}
	if err := c.bindable(ctx, q, st, ttl); err != nil {
		return err
	}
	rs, err := c.st.AcquireBatch(ctx, conn, args, c.cfg.StatementTimeout/2/time.Duration(len(ops)))
	if err != nil {
		return err
	}
	for i, op := range ops {
		op.acquire.res, op.acquire.epoch = acquireResult{AcquireResult: rs[i]}, st.epoch
	}
	return nil
}

// sessionAvailable reports whether the client can have a pgx session
// (notifications, fast failover).
func (c *Client) sessionAvailable(ctx context.Context) (bool, error) {
	cfg, err := c.dedicatedConfig(ctx)
	return cfg != nil, err
}

// sessionLost ends every session-bound lease of a connection that failed.
func (c *Client) sessionLost(epoch uint64, err error) {
	for _, l := range c.reg.leases() {
		if l.session && l.epoch == epoch {
			l.lose(sessionEnded("its database session ended: " + err.Error()))
		}
	}
}

// sessionWatcher waits, on a connection of its own, for the dedicated
// session of a session-bound holder to end (on the session lock that
// session holds: see ClientLock in session.sql), and then wakes every
// local waiter of the names it watches for (through the hub, as a
// targeted notification would): a crash sends no notification. It watches
// the very session that holds the lease (by backend pid), not the holder's
// client: a client whose session ended and that opened another at once
// would otherwise keep the watcher waiting on the new session. A client
// runs at most one watcher per holder session, for all its waits on names
// that session holds, and stops it when the last of them leaves; a
// wait watches for the holders of at most maxWatched names (the slots of a
// semaphore).
type sessionWatcher struct {
	names  map[string]int // under wakeups.mu: the waits per name
	again  chan struct{}  // wait for the holder's session again
	cancel context.CancelFunc
	done   chan struct{}
}

// maxWatched bounds the names one wait watches holders for; further slot
// holders of a semaphore are covered by notifications and their expiry.
const maxWatched = 16

// watchSession returns the watcher of the holder session (a backend pid),
// starting it if needed, and makes it wake the waiters of name when that
// session ends.
func (c *Client) watchSession(holder int32, name string) *sessionWatcher {
	wk := &c.wake
	wk.mu.Lock()
	w := wk.watchers[holder]
	if w == nil {
		w = &sessionWatcher{names: map[string]int{}, again: make(chan struct{}, 1), done: make(chan struct{})}
		var ctx context.Context
		ctx, w.cancel = context.WithCancel(c.life.bg)
		wk.watchers[holder] = w
		if !c.life.goBackground(func() { c.runWatcher(ctx, holder, w) }) {
			close(w.done)
		}
	}
	w.names[name]++
	wk.mu.Unlock()
	w.rearm()
	return w
}

// unwatchSession drops a wait's interest in name from holder's watcher,
// stopping the watcher after the last.
func (wk *wakeups) unwatchSession(holder int32, name string, w *sessionWatcher) {
	wk.mu.Lock()
	if w.names[name]--; w.names[name] <= 0 {
		delete(w.names, name)
	}
	last := len(w.names) == 0
	if last && wk.watchers[holder] == w {
		delete(wk.watchers, holder)
	}
	wk.mu.Unlock()
	if last {
		w.cancel()
		<-w.done
	}
}

// rearm makes the watcher wait for the holder's session again, once it has
// reported the last one.
func (w *sessionWatcher) rearm() { wake(w.again) }

// runWatcher is a session watcher's loop: each time it is rearmed, it
// waits until the holder session ends and wakes the waits. Each statement
// waits at most watchTimeout (the lock_timeout of its connection: see
// dialWatch); one that times out found the session alive, and the next
// waits at once, waking no wait. The wait is on the session lock's state,
// not on an event: a session that ended in between frees its lock, and
// the next statement returns at once.
func (c *Client) runWatcher(ctx context.Context, holder int32, w *sessionWatcher) {
	defer close(w.done)
	line := &watchLine{c: c}
	defer line.close()
	b := reconnectWatcher.start()
	timedOut := false
	for {
		if !timedOut {
			line.idle()
			select {
			case <-w.again:
			case <-ctx.Done():
				return
			}
		}
		timedOut = false
		err := line.await(ctx, ctx, func(ctx context.Context, conn *pgx.Conn) error {
			return c.st.AwaitSession(ctx, conn, holder, c.wake.watchWait())
		})
		if errors.Is(err, errInterrupted) && ctx.Err() == nil {
			timedOut = true // the session's other work came first: wait again
			continue
		}
		if err != nil && store.Classify(err) == store.KindLockTimeout && ctx.Err() == nil {
			// The holder's session lives on: wait for it again.
			if hook := testHookWatchTimeout.Load(); hook != nil {
				(*hook)("session")
			}
			timedOut = true
			continue
		}
		if err != nil {
			line.close()
			if ctx.Err() != nil {
				return
			}
			w.rearm()
			select {
			case <-time.After(b.next()):
			case <-ctx.Done():
				return
			}
			continue
		}
		b.reset()
		c.wake.wakeWaits(w.names)
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

// heldBy names a name's session-bound holder (its session's backend pid).
type heldBy struct {
	name    string
	session int32
}

// holders are the session-bound holders one wait has seen, by name, and
// the watchers of their sessions it started (at most maxWatched): part of
// its waker (wake.go).
type holders struct {
	watched  map[string]watch
	watchers int
}

// follow takes note of the session-bound holders of a wait's round and
// watches the session of each that has held its name for watchAfter. It
// returns delay, shortened to look again when a holder is due to be
// watched.
func (h *holders) follow(c *Client, inSession []heldBy, delay time.Duration) time.Duration {
	for _, hb := range inSession {
		cur := h.watched[hb.name]
		switch {
		case cur.holder != hb.session:
			// A new holder: watch its session once it has held the name
			// for watchAfter (look again then).
			if cur.w != nil {
				c.wake.unwatchSession(cur.holder, hb.name, cur.w)
				h.watchers--
			}
			if h.watched == nil {
				h.watched = map[string]watch{}
			}
			h.watched[hb.name] = watch{holder: hb.session, since: time.Now()}
			delay = min(delay, watchAfter)
		case cur.w != nil:
			cur.w.rearm()
		case h.watchers >= maxWatched:
		case time.Since(cur.since) >= watchAfter:
			cur.w = c.watchSession(hb.session, hb.name)
			h.watched[hb.name] = cur
			h.watchers++
		default:
			delay = min(delay, watchAfter-time.Since(cur.since))
		}
	}
	return delay
}

// drop stops watching the sessions the acquisition watches: it watches
// its holder's bell instead, which the holder's session frees as it ends
// (see waker.doorbell). A watch started before (a first attempt made
// while the client's session was not up yet, which watches no bell) would
// otherwise keep a connection of its own as long as the wait.
func (h *holders) drop(c *Client) {
	h.stop(c)
	h.watched, h.watchers = nil, 0
}

// stop drops the acquisition's interest in the sessions it watches.
func (h *holders) stop(c *Client) {
	for name, wt := range h.watched {
		if wt.w != nil {
			c.wake.unwatchSession(wt.holder, name, wt.w)
		}
	}
}
