package pglease

// Doorbells: how a waiter first in the queue learns of a release without
// listening for notifications (see "Doorbells" in
// docs/DESIGN-WAITING.md). Every client's dedicated session holds one of
// store.Bells bell locks, keyed by the client id; a release that wakes the
// first waiter rings: the session takes the next bell and frees the one it
// held (ringBell). A waiting client watches the holder's bell on a
// connection of its own (one bellWatcher per holder client, for all its
// waits on that holder's names): it blocks on the bell held, and each
// time the server grants it, it wakes those waits and blocks on the next.
// The server wakes the watchers of that bell and no other backend, where
// a notification makes it signal every listening backend of the database.
// No statement of a watcher waits longer than watchTimeout and a quarter
// (wakeups.watchWait): a wait that outlives it waits again, so that no snapshot of a waiting client holds
// back VACUUM (see awaitBell).

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/store"
)

// bellLinger is how long a watcher with no wait left keeps its connection,
// so that the next wait on the same holder's names need not open one (a
// client that takes turns with another hands the lease back and forth);
// and how long no watcher starts again for a holder whose watcher failed.
const bellLinger = 30 * time.Second

// watchTimeout bounds each statement with which a watcher waits on the
// server (a holder's bell, a holder's session: wakeups.watchTimeout, which
// tests shorten), lengthened by up to a quarter at random (see
// wakeups.watchWait): it is the lock_timeout that statement carries. A
// statement that waits holds a snapshot, which keeps VACUUM from removing
// any row deleted after it was taken, in the whole database, and keeps
// CREATE INDEX CONCURRENTLY waiting; so a wait that times out waits again
// with a new statement, and a waiting client's snapshots are never older
// than 25 s (and each waiting watcher costs one statement per period).
const watchTimeout = 20 * time.Second

// maxBells bounds the bell watchers of a client, and so the connections
// its waits hold: the waits on names of further holders listen for
// notifications.
const maxBells = 16

// bellWatcher watches one holder client's bell for this client's waits.
// Its fields are guarded by wakeups.mu.
type bellWatcher struct {
	holder string
	names  map[string]int // the waits per name
	// armed: the watcher knows the bell the holder holds (it has probed
	// it); rang: the latest time it learnt of a ring, or armed, after
	// which a wait's refusal may be stale.
	armed bool
	rang  time.Time
	// quiet: the holder holds no bell now (its session is not up yet, or
	// down, or it is of a version without bells, or has none): its waits
	// listen for notifications meanwhile, and the watcher probes again,
	// with backoff, while it has waits. failed: the watcher stopped on an
	// error; no other starts for the holder until retryAt.
	quiet, failed bool
	retryAt       time.Time
	idle          *time.Timer   // stops a watcher left without waits
	again         chan struct{} // a wait came to a watcher left without any
	cancel        context.CancelFunc
	done          chan struct{}
	// unblock ends the watcher's wait on the session's watch slot, if
	// any: a watcher left without waits must not keep the session busy
	// until the client's next statement interrupts it. until: when the
	// statement it waits in now ends (zero between statements).
	unblock context.CancelFunc
	until   time.Time
	// due: per name, when its wait looks at its holder's expiry, which
	// the watcher's statement ends at (awaitBell) rather than the wait
	// interrupting it. pending: the names whose waits the watcher woke and
	// that have not looked again yet; it waits for them (settle) before it
	// waits on the bell again, so that their attempts, which run on the
	// session too, need not interrupt it with a cancel request. settled is
	// signalled as pending empties.
	due     map[string]time.Time
	pending map[string]bool
	settled chan struct{}
}

// bellNews is what a holder's bell tells a wait refused by an attempt
// that began at some moment (since).
type bellNews int

const (
	// bellSilent: the bell cannot be watched: the holder rings none now
	// (the wait listens for notifications meanwhile), or no watcher could
	// start (and the wait is not registered with one).
	bellSilent bellNews = iota
	// bellWatched: the wait is woken by the bell, and its refusal stands.
	bellWatched
	// bellRangSince: the wait is woken by the bell, and a ring (or the
	// watcher's arming) came after its attempt began: the refusal may
	// predate the release, so the wait looks again at once.
	bellRangSince
)

// news is what w's bell tells a refusal of an attempt begun at since.
// wk.mu is held.
func (w *bellWatcher) news(since time.Time) bellNews {
	switch {
	case w.quiet:
		return bellSilent
	case w.armed && w.rang.After(since):
		return bellRangSince
	}
	return bellWatched
}

// watchBell makes the wait on name watch holder's bell and says what it
// tells a refusal of an attempt begun at since.
func (c *Client) watchBell(holder, name string, since time.Time) bellNews {
	wk := &c.wake
	wk.mu.Lock()
	defer wk.mu.Unlock()
	w := wk.bells[holder]
	if w != nil && w.failed {
		if time.Now().Before(w.retryAt) {
			return bellSilent
		}
		delete(wk.bells, holder)
		w = nil
	}
	if w == nil {
		if len(wk.bells) >= maxBells {
			wk.pruneBells()
		}
		if c.life.isClosed() || len(wk.bells) >= maxBells {
			return bellSilent
		}
		w = &bellWatcher{holder: holder, names: map[string]int{}, again: make(chan struct{}, 1), done: make(chan struct{}),
			due: map[string]time.Time{}, pending: map[string]bool{}, settled: make(chan struct{}, 1)}
		var ctx context.Context
		ctx, w.cancel = context.WithCancel(c.life.bg)
		wk.bells[holder] = w
		if !c.life.goBackground(func() { c.runBell(ctx, w) }) {
			close(w.done)
		}
	}
	if w.idle != nil {
		w.idle.Stop()
		w.idle = nil
	}
	w.names[name]++
	wake(w.again)
	return w.news(since)
}

// watching reports whether a watcher of holder's bell runs.
func (wk *wakeups) watching(holder string) bool {
	wk.mu.Lock()
	defer wk.mu.Unlock()
	w := wk.bells[holder]
	return w != nil && !w.failed
}

// pruneBells forgets the holders found without a bell long enough ago to
// be probed again. wk.mu is held.
func (wk *wakeups) pruneBells() {
	now := time.Now()
	for h, w := range wk.bells {
		if w.failed && now.After(w.retryAt) {
			delete(wk.bells, h)
		}
	}
}

// unwatchBell drops a wait's interest in holder's bell; a watcher left
// without waits lingers for bellLinger, then stops.
func (wk *wakeups) unwatchBell(holder, name string) {
	wk.mu.Lock()
	defer wk.mu.Unlock()
	w := wk.bells[holder]
	if w == nil {
		return
	}
	if w.names[name]--; w.names[name] <= 0 {
		delete(w.names, name)
		delete(w.due, name)
		w.lookedLocked(name)
	}
	if len(w.names) == 0 && w.unblock != nil {
		w.unblock()
	}
	if len(w.names) == 0 && !w.failed && w.idle == nil {
		w.idle = time.AfterFunc(bellLinger, func() {
			wk.mu.Lock()
			stop := len(w.names) == 0 && wk.bells[holder] == w
			if stop {
				delete(wk.bells, holder)
			}
			wk.mu.Unlock()
			if stop {
				w.cancel()
			}
		})
	}
}

// rang records a ring (or the arming) of w's bell and wakes its waits: they
// look again. It reports whether w has waits left; one without any
// disarms, so that rings wake it no more (see runBell).
func (wk *wakeups) rang(w *bellWatcher, armed bool) bool {
	wk.mu.Lock()
	w.rang = time.Now()
	w.armed = (armed || w.armed) && len(w.names) > 0
	w.quiet = false
	wk.mu.Unlock()
	return wk.wakeBellWaits(w, false, false)
}

// wakeBellWaits wakes the waits of w, those whose look at their holder's
// expiry is due (dueOnly) or all of them, as wakeWaits does (timed: for
// their poll or that look, not a ring), and records them pending: the
// watcher waits for them to look again (settle) before it waits on the
// bell again. It reports whether it woke any.
func (wk *wakeups) wakeBellWaits(w *bellWatcher, dueOnly, timed bool) bool {
	now := time.Now()
	wk.mu.Lock()
	list := make([]string, 0, len(w.names))
	for n := range w.names {
		if at, ok := w.due[n]; dueOnly && (!ok || at.After(now)) {
			continue
		}
		list = append(list, n)
		delete(w.due, n)
		w.pending[n] = true
	}
	wk.mu.Unlock()
	for _, n := range list {
		if timed {
			wk.hub.notifyTimed(n)
		} else {
			wk.hub.notify(n, true)
		}
	}
	return len(list) > 0
}

// attempting records that the wait of name on holder's bell is about to
// look again (its own timer, or a wake-up other than its watcher's): the
// watcher, which its attempt interrupts, waits for it to have looked
// before it waits again (settle), and then knows its due look.
func (wk *wakeups) attempting(holder, name string) {
	wk.mu.Lock()
	defer wk.mu.Unlock()
	if w := wk.bells[holder]; w != nil && w.names[name] > 0 {
		w.pending[name] = true
	}
}

// looked records that the wait of name on holder's bell looked again
// since its watcher woke it, and when it is next to look at its holder's
// expiry (due; zero: at its poll), which the watcher's statements end at.
// A due before the end of the statement the watcher waits in now (it
// began before this wait's look) ends that statement, so that the next
// ends in time.
func (wk *wakeups) looked(holder, name string, due time.Time) {
	wk.mu.Lock()
	defer wk.mu.Unlock()
	w := wk.bells[holder]
	if w == nil || w.names[name] == 0 {
		return
	}
	if due.IsZero() {
		delete(w.due, name)
	} else {
		w.due[name] = due
	}
	w.lookedLocked(name)
	if !due.IsZero() && !w.until.IsZero() && due.Before(w.until.Add(-dueSlack)) && w.unblock != nil {
		w.unblock()
	}
}

// dueSlack is how much later than a wait's due look the watcher's
// statement may end without being ended for it.
const dueSlack = 50 * time.Millisecond

// lookedLocked clears name's pending mark; wakeups.mu is held.
func (w *bellWatcher) lookedLocked(name string) {
	if w.pending[name] {
		delete(w.pending, name)
		if len(w.pending) == 0 {
			wake(w.settled)
		}
	}
}

// settleWait bounds how long a watcher waits for the waits it woke to
// look again (a wait whose attempt failed does not say so) before it
// waits on the bell again.
const settleWait = time.Second

// settle waits until the waits w woke have looked again, or settleWait.
func (wk *wakeups) settle(ctx context.Context, w *bellWatcher) {
	t := time.NewTimer(settleWait)
	defer t.Stop()
	for {
		wk.mu.Lock()
		n := len(w.pending)
		wk.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-w.settled:
		case <-t.C:
			wk.mu.Lock()
			clear(w.pending)
			wk.mu.Unlock()
			return
		case <-ctx.Done():
			return
		}
	}
}

// nextWait returns how long w's next statement waits: watchWait, or until
// the first due look of its waits when that comes sooner (byDue).
func (wk *wakeups) nextWait(w *bellWatcher) (wait time.Duration, byDue bool) {
	wait = wk.watchWait()
	now := time.Now()
	for _, at := range w.due {
		if d := at.Sub(now); d < wait {
			wait, byDue = d, true
		}
	}
	return wait, byDue
}

// wakeWaits wakes the local waits of names (a watcher's, guarded by wk.mu,
// which is not held), as a targeted notification would, and reports
// whether there were any.
func (wk *wakeups) wakeWaits(names map[string]int) bool {
	wk.mu.Lock()
	list := make([]string, 0, len(names))
	for n := range names {
		list = append(list, n)
	}
	wk.mu.Unlock()
	for _, n := range list {
		wk.hub.notify(n, true)
	}
	return len(list) > 0
}

// bellGone marks w failed (its connection or a statement failed) and wakes
// its waits, which then listen for notifications.
func (wk *wakeups) bellGone(w *bellWatcher) {
	wk.mu.Lock()
	w.failed, w.retryAt = true, time.Now().Add(bellLinger)
	if w.idle != nil {
		w.idle.Stop()
		w.idle = nil
	}
	wk.mu.Unlock()
	_ = wk.rang(w, false)
}

// runBell is a watcher's loop. It probes which bell the holder holds and
// blocks on it (awaitBell: one statement at a time, each at most
// watchTimeout); at each grant it wakes the waits, lets them look again
// (settle), and, if any are left, blocks on the bell it expects next
// without probing first: that statement returns at once when the bell is
// free, with the bell the holder holds instead, which the watcher takes
// as a probe's (AwaitHeldBell in session.sql). A probe that finds the
// bell it expects blocks on it at once; one that finds another (the first
// probe, or rings came between the grant and the next statement, or the
// holder's session started anew at bell 0) wakes the waits once more,
// since their attempts may have read the names before those rings, and
// blocks on the bell it found. A ring between a probe
// and the block frees the bell it blocks on, which the server then grants
// at once; only store.Bells rings in that gap go unseen, and a wait still
// looks again at its expiry timer and fallback poll. A probe that finds no
// bell (the holder's session ended, and no other began) ends the watcher:
// its waits listen for notifications. A watcher left without waits blocks
// no more (the holder's rings would wake it for nothing: a statement
// each) and keeps its connection until a wait comes, when it probes again,
// or until it stops.
func (c *Client) runBell(ctx context.Context, w *bellWatcher) {
	defer close(w.done)
	line := &watchLine{c: c}
	defer line.close()
	expect := -1
	// rung: the watcher saw bell expect-1 rung, and waits on expect
	// without probing (awaitBell checks that the holder holds it); moved:
	// it found that bell free, and the bell the holder holds instead.
	rung := false
	var moved *errBellFree
	b := probeBell.start()
	for {
		var k int
		var ok bool
		var err error
		switch {
		case rung:
			if hook := testHookRung.Load(); hook != nil {
				(*hook)(w.holder)
			}
			k, ok = expect, true
		case moved != nil:
			k, ok, moved = moved.now, moved.ok, nil
		default:
			if hook := testHookBell.Load(); hook != nil {
				(*hook)(w.holder)
			}
			err = line.query(ctx, func(ctx context.Context, q store.Querier) (err error) {
				k, ok, err = c.st.ProbeBell(ctx, q, w.holder)
				return err
			})
		}
		if err != nil {
			if ctx.Err() == nil {
				c.wake.bellGone(w)
			}
			return
		}
		if !ok {
			// No bell now: the waits listen; look again later.
			expect = -1
			if !c.wake.noBell(w) {
				line.idle()
				if !c.wake.awaitWaits(ctx, w) {
					return
				}
				continue
			}
			select {
			case <-time.After(b.next()):
			case <-ctx.Done():
				return
			}
			continue
		}
		b.reset()
		waits := k != expect && c.wake.rang(w, true) || k == expect && c.wake.hasWaits(w)
		if waits {
			rang, err := c.awaitBell(ctx, line, w, k, rung)
			rung = false
			if errors.As(err, &moved) {
				continue // rung again, or the session ended
			}
			if err != nil {
				if ctx.Err() == nil {
					c.wake.bellGone(w)
				}
				return
			}
			expect = (k + 1) % store.Bells
			rung = rang
			if waits = rang && c.wake.rang(w, false); waits {
				// The waits it woke look again before it probes: their
				// attempts, a hand-off's acquisition among them, need not
				// queue behind the probe on the session, and a watcher
				// whose waits all took their names probes no more.
				c.wake.settle(ctx, w)
				waits = c.wake.hasWaits(w)
			}
		}
		if !waits {
			expect, rung = -1, false
			line.idle()
			if !c.wake.awaitWaits(ctx, w) {
				return
			}
		}
	}
}

// awaitWaits blocks a watcher left without waits until one comes, and
// reports false when ctx ended first. A wait that came and went while the
// watcher ran left its wake-up behind: it does not make the watcher probe
// for nobody.
func (wk *wakeups) awaitWaits(ctx context.Context, w *bellWatcher) bool {
	for {
		select {
		case <-w.again:
		case <-ctx.Done():
			return false
		}
		if wk.hasWaits(w) {
			return true
		}
	}
}

// awaitBell blocks until bell k of w's holder is free (the holder rang,
// or its session ended) and reports true; or false when w is left without
// waits. Each statement waits watchWait (its lock_timeout), or until the
// first due look of its waits at their holder's expiry, which it then
// wakes; one that times out found the bell still held, so nothing rang,
// and the next blocks once the waits it woke have looked (settle), so
// that their attempts need not interrupt it. No
// ring is missed in between: a ring frees bell k, and a shared lock of a
// free bell is granted at once (the wait is on the bell's state, not on
// an event), so the next statement returns at once and the waits wake.
// Only as in runBell's gap between a grant and a block do sixteen rings
// in that instant go unseen.
//
// When Config.PollInterval is not longer than watchTimeout, the watcher's
// waits poll at its pace: a statement that times out wakes them, and they
// look again (their fallback poll: see waker.watched). So a waiting
// client's poll and its looks at its holder's expiry neither interrupt its
// session's watch, which costs a cancel request, nor arm it again more
// than once per watchTimeout for the poll (SPEC §1.9): a bell's ring and
// its holder's session's end wake the waits at once, its holder's expiry
// when it comes, and the poll only backs those up.
func (c *Client) awaitBell(ctx context.Context, line *watchLine, w *bellWatcher, k int, check bool) (bool, error) {
	polls := c.cfg.PollInterval <= c.wake.watchTimeout
	for {
		c.wake.settle(ctx, w)
		actx, unblock := context.WithCancel(ctx)
		c.wake.mu.Lock()
		w.unblock = unblock
		waits := len(w.names) > 0
		wait, due := c.wake.nextWait(w)
		c.wake.mu.Unlock()
		var err error
		byDue := false
		if waits && due && wait < minWatchWait {
			err = errDueNow
		} else if waits {
			err = line.await(ctx, actx, func(ctx context.Context, conn *pgx.Conn) error {
				// Planned as the statement starts, with the waits' latest
				// due looks.
				c.wake.mu.Lock()
				wait, due := c.wake.nextWait(w)
				wait = max(wait, minWatchWait)
				byDue = due
				w.until = time.Now().Add(wait)
				c.wake.mu.Unlock()
				if check {
					rang, now, ok, err := c.st.AwaitHeldBell(ctx, conn, w.holder, k, wait)
					if err == nil && !rang {
						err = &errBellFree{now: now, ok: ok}
					}
					return err
				}
				return c.st.AwaitBell(ctx, conn, w.holder, k, wait)
			})
			c.wake.mu.Lock()
			w.until = time.Time{}
			c.wake.mu.Unlock()
		}
		left := actx.Err() != nil // unblocked: left without waits, or to plan again
		unblock()
		switch {
		case !waits:
			return false, nil
		case err == nil:
			return true, nil
		case ctx.Err() != nil, errors.As(err, new(*errBellFree)):
			return false, err
		case errors.Is(err, errDueNow):
			c.wake.wakeBellWaits(w, true, true)
		case left || errors.Is(err, errInterrupted):
			// Left without waits, a sooner due look, or the session's own
			// work came first.
		case store.Classify(err) == store.KindLockTimeout:
			if hook := testHookWatchTimeout.Load(); hook != nil {
				(*hook)("bell")
			}
			switch {
			case byDue:
				c.wake.wakeBellWaits(w, true, true) // their look at the holder's expiry
			case polls:
				c.wake.wakeBellWaits(w, false, true) // their poll
			}
		default:
			return false, err
		}
		if !c.wake.hasWaits(w) {
			return false, nil
		}
	}
}

// minWatchWait is the shortest wait of a watcher's statement (its
// lock_timeout is in milliseconds, and 0 would wait for ever): a due look
// sooner than that, as the watcher is to wait, wakes its wait at once.
const minWatchWait = time.Millisecond

// errDueNow ends a watcher's turn without a statement: a wait's look at
// its holder's expiry is due.
var errDueNow = errors.New("pglease: a wait's look is due")

// errBellFree: the bell a watcher expected its holder to hold (the one
// after the bell it saw rung) was free as it began to wait: the holder
// rang again, or its session ended. now is the bell the holder holds
// instead, if ok (the statement probed it: see AwaitHeldBell), which
// runBell takes as a probe's.
type errBellFree struct {
	now int
	ok  bool
}

func (e *errBellFree) Error() string { return "pglease: the bell expected held is free" }

// noBell records that w's holder holds no bell now, waking the waits (they
// listen) when it did, and reports whether w has waits.
func (wk *wakeups) noBell(w *bellWatcher) bool {
	wk.mu.Lock()
	was := !w.quiet
	w.quiet, w.armed = true, false
	waits := len(w.names) > 0
	wk.mu.Unlock()
	if was && waits {
		wk.wakeWaits(w.names)
	}
	return waits
}

// hasWaits reports whether w has waits, and disarms it when not.
func (wk *wakeups) hasWaits(w *bellWatcher) bool {
	wk.mu.Lock()
	defer wk.mu.Unlock()
	if len(w.names) == 0 {
		w.armed = false
	}
	return len(w.names) > 0
}

// dialWatch opens a watcher's connection (a bell's or a session's) to
// cfg, within the client's connect budget. Its lock waits end after the
// client's watchTimeout, and nothing else ends its statements: a watcher
// that waits again after a lock timeout waits until the holder rings or
// its session ends, whatever timeout the DSN (or the role) sets.
func (c *Client) dialWatch(ctx context.Context, cfg *pgx.ConnConfig) (*pgxConn, error) {
	pc, err := connectPgx(ctx, cfg, c.connectBudget())
	if err != nil {
		return nil, err
	}
	if err := c.st.SessionSettings(ctx, pc.querier(), 0, c.wake.watchTimeout); err != nil {
		pc.close()
		return nil, err
	}
	return &pc, nil
}

// ringBell rings this client's bell after a release that woke the first
// waiter, or after a queued wait gave up (see leaveQueue) (see Ring in
// session.sql): in the background, on the dedicated session, once for
// all the releases that came before it ran.
func (c *Client) ringBell() {
	s := c.conn.sess.Load()
	if s == nil { // no session, no bell
		return
	}
	s.mu.Lock()
	if !s.belled || s.ringing {
		s.mu.Unlock()
		return
	}
	s.ringing = true
	s.mu.Unlock()
	done := func() {
		s.mu.Lock()
		s.ringing = false
		s.mu.Unlock()
	}
	c.life.goBackground(func() {
		err := s.do(c.life.bg, c.cfg.StatementTimeout, func(ctx context.Context, q store.Querier, st *sessState) error {
			done() // a release after this rings again
			return c.ring(ctx, q, st)
		})
		if err != nil {
			done() // the ring may not have run (the session was down)
		}
	})
}

// ring rings this client's bell on the dedicated session (st its state),
// if it holds one.
func (c *Client) ring(ctx context.Context, q store.Querier, st *sessState) error {
	if !st.belled {
		return nil
	}
	if hook := testHookRing.Load(); hook != nil {
		(*hook)(c.id)
	}
	k, err := c.st.Ring(ctx, q, c.id, *st.bell)
	*st.bell = k
	if err != nil && c.life.bg.Err() == nil {
		c.cfg.Logger.WarnContext(ctx, "pglease: could not ring the doorbell; the first waiter looks again at its expiry timer or fallback poll", "err", err)
	}
	return err
}

// release deletes the row of a lease by token (see Release in
// functions.sql) and rings the bell when the release woke the first
// waiter. On the dedicated session, which holds the bell, the release
// rings it in the same statement (schema version 12: see CreateRelease),
// a round trip before a ring of its own could; on a pool connection, for
// a shared lease, or while an acquisition of the name holds its lock (the
// release takes it without waiting, to ring), the bell rings after the
// reply, in the background on
// the session (ringBell): before this client's next statement there, so
// that the first waiter, not the releasing client taking the name again at
// once, has the next turn (docs/BENCHMARKS.md, S2). A release that woke
// nobody rings unless the client takes the name again (ringUnlessRetaken).
func (c *Client) release(ctx context.Context, name string, token int64) error {
	return c.exec(ctx, func(ctx context.Context, q store.DB, st *sessState) error {
		var rel store.ReleaseResult
		var err error
		if st != nil && st.belled {
			rel, err = c.st.ReleaseAndRing(ctx, q, name, token, c.id, *st.bell)
			*st.bell = rel.Bell
		} else {
			rel, err = c.st.Release(ctx, q, name, token)
		}
		switch {
		case err != nil:
		case rel.Rang: // rung by the release itself
		case rel.WokeFirst:
			c.ringBell()
		case rel.Unannounced:
			c.ringUnlessRetaken(name)
		}
		return err
	})
}

// ringUnlessRetaken rings this client's bell, shortly, after a release of
// name that woke nobody (store.ReleaseResult.Unannounced): the name's
// first waiter, woken already in its turn, looks again by itself and may
// take the name, and the waiters behind it that watch this client's bell
// (when they found nobody directly ahead: see refusedOne) would otherwise go on
// watching a client that no longer holds the name, deaf to the hand-offs
// after it until their fallback poll. Not when this client took the name
// again meanwhile (a burst: it still holds it, and its rings stay theirs):
// one ring after the burst, not one per release. A ring wakes the waits
// watching the bell, which look again.
func (c *Client) ringUnlessRetaken(name string) {
	s := c.conn.sess.Load()
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.belled {
		return
	}
	if s.unannounced == nil {
		s.unannounced = make(map[string]bool)
	}
	s.unannounced[name] = true
	if len(s.unannounced) > 1 {
		return // a ring is due already
	}
	time.AfterFunc(retakeGrace, func() {
		s.mu.Lock()
		names := s.unannounced
		s.unannounced = nil
		s.mu.Unlock()
		for n := range names {
			if c.reg.lease(n) == nil && c.life.bg.Err() == nil {
				c.ringBell()
				return
			}
		}
	})
}

// retakeGrace is how long after a release that woke nobody its client
// rings unless it took the name again (ringUnlessRetaken): longer than a
// burst's release-to-acquisition gap, short against the fallback poll.
const retakeGrace = 2 * store.WakeEvery

// testHookBell, when set by a test, runs in a bell watcher just before it
// probes the holder's bell, with the holder's client id.
var testHookBell atomic.Pointer[func(holder string)]

// testHookRing, when set by a test, runs before each ring of a client's
// bell in a statement of its own (not a release's: see release), with the
// client's id.
var testHookRing atomic.Pointer[func(client string)]

// testHookRung, when set by a test, runs in a bell watcher that saw a
// ring just before it waits on the next bell without probing, with the
// holder's client id.
var testHookRung atomic.Pointer[func(holder string)]

// testHookWatchTimeout, when set by a test, runs in a watcher each time
// its wait statement timed out and it waits again: "bell" or "session".
var testHookWatchTimeout atomic.Pointer[func(watch string)]

// bellRang says, for a wait already watching holder's bell, what it
// tells a refusal of an attempt begun at since (see watchBell): silent
// when the holder rings no bell now, or the watcher stopped.
func (wk *wakeups) bellRang(holder string, since time.Time) bellNews {
	wk.mu.Lock()
	defer wk.mu.Unlock()
	w := wk.bells[holder]
	if w == nil || w.failed {
		return bellSilent
	}
	return w.news(since)
}
