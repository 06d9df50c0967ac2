package pglease

// Fast failover: a lease acquired with WithFastFailover is also bound to
// the holder's dedicated database session by a session advisory lock on
// the name (see "Fast failover" in the package documentation). This file
// holds what only such leases do: the session-bound acquisition, the
// watchers through which waiters learn at once that a holder's session
// ended, and ending the leases of a session that failed.

import (
	"context"
	"time"

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
// dead before the lease's own deadline. Each statement is an operation of
// its own, so that renewals run between them.
//
// The operations are bounded by their own timeouts, not by a context of the
// caller's: the results are read only once an operation has finished.
func (c *Client) acquireInSession(args store.AcquireArgs) (acquireResult, uint64, error) {
	s, err := c.session()
	if err != nil {
		return acquireResult{}, 0, err
	}
	args.LockTimeout = acquireLockTimeout
	var res acquireResult
	var epoch uint64
	err = s.do(c.bg, c.cfg.StatementTimeout+time.Second, func(ctx context.Context, q store.Querier, st *sessState) error {
		if st.shared {
			return errShared
		}
		epoch = st.epoch
		if *st.keepalive < args.TTL {
			if err := c.st.SessionKeepalive(ctx, q, args.TTL); err != nil {
				return err
			}
			*st.keepalive = args.TTL
		}
		var err error
		res.AcquireResult, err = c.st.Acquire(ctx, q, args)
		if store.Classify(err) == store.KindLockTimeout { // the row or name is busy
			res, err = acquireResult{busy: true}, nil
			res.OtherRemaining = -1
		}
		if err != nil || (!res.Acquired && res.LockTaken) || res.busy {
			// Not acquired: the session lock this statement may have
			// taken is given back (a failed statement does not undo it).
			if uerr := c.st.Unlock(ctx, q, args.Name); err == nil {
				err = uerr
			}
		}
		return err
	})
	// Acquired, but another session held the name's lock for an instant
	// (a contender's attempt, a waiter passing through): bind the lease
	// once the lock is free, so that it fails over fast too.
	for try := 1; err == nil && res.Acquired && !res.SessionBound && try <= 20; try++ {
		time.Sleep(time.Duration(try) * time.Millisecond)
		err = s.do(c.bg, c.cfg.StatementTimeout+time.Second, func(ctx context.Context, q store.Querier, st *sessState) error {
			var err error
			if res.SessionBound, err = c.st.Bind(ctx, q, args.Name, res.Token); res.SessionBound {
				epoch = st.epoch
			}
			return err
		})
	}
	return res, epoch, err
}

// sessionAvailable reports whether the client can have a pgx session
// (notifications, fast failover).
func (c *Client) sessionAvailable(ctx context.Context) (bool, error) {
	cfg, err := c.dedicatedConfig(ctx)
	return cfg != nil, err
}

// sessionLost ends every session-bound lease of a connection that failed.
func (c *Client) sessionLost(epoch uint64, err error) {
	for _, l := range c.heldLeases() {
		if l.session && l.epoch == epoch {
			l.lose(sessionEnded("its database session ended: " + err.Error()))
		}
	}
}

// unlockAsync drops the session advisory lock of a lost session-bound
// lease, if its connection is still the current one.
func (c *Client) unlockAsync(name string, epoch uint64) {
	s, err := c.session()
	if err != nil {
		return
	}
	c.goBackground(func() {
		_ = s.do(c.bg, c.cfg.StatementTimeout, func(ctx context.Context, q store.Querier, st *sessState) error {
			if st.epoch != epoch {
				return nil
			}
			return c.st.Unlock(ctx, q, name)
		})
	})
}

// sessionWatcher waits, on a connection of its own, for the dedicated
// session of a session-bound holder's client to end (on the client lock
// that session holds: see ClientLock in queries.sql), and then wakes every
// local waiter of the names it watches for (through the hub, as a targeted
// notification would): a crash sends no notification. A client runs at
// most one watcher per holder client, shared by all its waits on names
// that client holds, and stops it when the last of them leaves; a wait
// watches for the holders of at most maxWatched names (the slots of a
// semaphore).
type sessionWatcher struct {
	names  map[string]int // under c.mu: the waits per name
	again  chan struct{}  // wait for the holder's session again
	cancel context.CancelFunc
	done   chan struct{}
}

// maxWatched bounds the names one wait watches holders for; further slot
// holders of a semaphore are covered by notifications and their expiry.
const maxWatched = 16

// watchSession returns the watcher of holder's session, starting it if
// needed, and makes it wake the waiters of name when that session ends.
func (c *Client) watchSession(holder, name string) *sessionWatcher {
	c.mu.Lock()
	w := c.watchers[holder]
	if w == nil {
		w = &sessionWatcher{names: map[string]int{}, again: make(chan struct{}, 1), done: make(chan struct{})}
		var ctx context.Context
		ctx, w.cancel = context.WithCancel(c.bg)
		c.watchers[holder] = w
		if !c.goBackground(func() { c.runWatcher(ctx, holder, w) }) {
			close(w.done)
		}
	}
	w.names[name]++
	c.mu.Unlock()
	w.rearm()
	return w
}

// unwatchSession drops a wait's interest in name from holder's watcher,
// stopping the watcher after the last.
func (c *Client) unwatchSession(holder, name string, w *sessionWatcher) {
	c.mu.Lock()
	if w.names[name]--; w.names[name] <= 0 {
		delete(w.names, name)
	}
	last := len(w.names) == 0
	if last && c.watchers[holder] == w {
		delete(c.watchers, holder)
	}
	c.mu.Unlock()
	if last {
		w.cancel()
		<-w.done
	}
}

// rearm makes the watcher wait for the holder's session again, once it has
// reported the last one.
func (w *sessionWatcher) rearm() { wake(w.again) }

func (c *Client) runWatcher(ctx context.Context, holder string, w *sessionWatcher) {
	defer close(w.done)
	var conn *pgxConn
	defer func() {
		if conn != nil {
			conn.close()
		}
	}()
	b := newBackoff(50*time.Millisecond, 2*time.Second)
	for {
		select {
		case <-w.again:
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
				w.rearm()
				select {
				case <-time.After(b.next()):
				case <-ctx.Done():
				}
				continue
			}
			conn = &pc
		}
		if err := c.st.AwaitSession(ctx, conn.querier(), holder); err != nil {
			conn.close()
			conn = nil
			if ctx.Err() != nil {
				return
			}
			w.rearm()
			continue
		}
		b.reset()
		c.mu.Lock()
		names := make([]string, 0, len(w.names))
		for n := range w.names {
			names = append(names, n)
		}
		c.mu.Unlock()
		for _, n := range names {
			c.hub.notify(n, true)
		}
	}
}
