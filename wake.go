package pglease

// The waker: everything that wakes a blocked acquisition between its
// attempts, behind one type (see docs/DESIGN-WAITING.md). The engine's loop
// makes one per wait (newWaker), asks it after each refused or failed round
// how long to pause (plan), pauses through it (pause), and stops it when
// the wait ends (stop); it knows none of the mechanisms below.
//
// A wait is woken by:
//   - its subscription to the hub (notify.go): a release's notification,
//     targeted or not, the bell watcher's or the session watcher's wake-up
//     of its names, or the listener's start;
//   - the server's queue (queue.go): a first registration looks again
//     shortly, and a wait woken in vain looks again once its turn's promise
//     lapses (lookAgain);
//   - the holder's doorbell (doorbell.go), which a single name's wait first
//     in the queue watches instead of listening (doorbell);
//   - listening on demand (listen.go), which every other wait needs;
//   - the session watchers of fast-failover holders (failover.go: holders);
//   - its timer: the holder's expiry, at most the fallback poll
//     (expiryWait), or the delay the loop asks for (a backoff).

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/pglease/pglease/internal/store"
)

// queueMode is how a wait uses the server's queue of waiters.
type queueMode int

const (
	// unqueued: a set or a semaphore, which never registers, and acts on
	// every notification of its names.
	unqueued queueMode = iota
	// queues: a single name's exclusive wait, which registers while the
	// client's dedicated session is live and then acts on the targeted
	// notification only.
	queues
	// listed: a shared lease's wait, which registers to be listed
	// (Waiters) and to keep its place before later exclusive waiters, but
	// acts on every notification, as an unqueued wait does.
	listed
)

// waker is a blocked acquisition's state between its attempts.
type waker struct {
	c *Client
	// name is the name of the wait: a single name's (its registration, its
	// bell), or a semaphore's.
	name        string
	mode        queueMode
	sub         *subscription
	unsubscribe func()
	// queued: a queued attempt registered the wait in the server's queue;
	// polling: an exclusive attempt without a live session registered it
	// as a polling waiter, live while fresh, when shared holders refused it
	// (see CreateAcquire). Either way it leaves when it gives up.
	queued, polling bool
	// registered: the last refused attempt left a registration in the
	// queue.
	registered bool
	// wokenAt is the latest wake-up of the wait, when a release may have
	// begun its turn: not the first, which may be the listener's start
	// (it wakes every wait once), long before any release.
	wokenAt time.Time
	// bell: the holder client whose doorbell the wait watches (see
	// doorbell); unlisten, while the wait listens for notifications
	// instead, ends that.
	bell     string
	unlisten func()
	// holders: the fast-failover holders the wait has seen, and the
	// watchers of their sessions.
	holders holders
	// behind: the last round was refused behind waiters queued ahead;
	// ahead: the bell the wait watches is the waiter's directly ahead
	// (see lookAhead), not the holder's.
	behind, ahead bool
	// inflight, when the wait gave up with an attempt's statement still
	// running (see detached), is closed once that statement has ended.
	inflight <-chan struct{}
}

// newWaker starts the wake-ups of a wait on names (name: see waker): one
// subscription for the whole wait, taken before the first attempt, so that
// a release between an attempt and the pause still wakes the pause. A wait
// that does not queue listens for notifications from the start; a queued
// one decides after each refusal (see doorbell).
func (c *Client) newWaker(name string, names []string, mode queueMode) *waker {
	w := &waker{c: c, name: name, mode: mode}
	w.sub, w.unsubscribe = c.wake.hub.subscribe(names...)
	if mode != queues {
		w.listen()
	}
	return w
}

// plan returns how long the wait pauses after round r, which began at
// since: after a refusal (no error), until the holder's expiry or the
// fallback poll, bounded by the queue's looks again, and 0 when the
// holder's bell rang after the attempt began; after a failure, delay (the
// backoff, or 0). Either way it follows the round's fast-failover holders,
// shortening the pause to watch one.
func (w *waker) plan(r *roundResult, since time.Time, delay time.Duration) time.Duration {
	w.behind = r.err == nil && r.behind
	if r.err == nil {
		// A release running alongside this wait's first registration may
		// not have seen it, and woken nobody: look once more.
		recheck := r.queued && !w.registered
		w.registered = r.queued
		base := w.expiryWait(r.soonest)
		delay = w.lookAgain(base, time.Now(), r.behind, recheck)
		delay = w.doorbell(r, since, delay, delay < base)
		w.ahead = r.ahead && w.bell == r.bellOf
	} else if w.bell != "" {
		w.c.wake.looked(w.bell, w.name, time.Time{}) // its watcher need not wait for it
	}
	return w.holders.follow(w.c, r.inSession, delay)
}

// pause waits for a wake-up of the wait (which it records), d, the
// caller's context or the client's Close; the caller looks which ended it.
func (w *waker) pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.sub.ch:
		if !w.sub.timed.Swap(false) {
			w.woke(time.Now())
			if w.behind && w.bell != "" && !w.ahead {
				// A ring of the holder's bell, which a wait behind other
				// waiters watches when it found none directly ahead
				// (lookAhead): the release woke the first of them, which
				// takes the name. This wait looks again once it did, to
				// watch the new holder, rather than contend with its
				// acquisition for the name. (A ring of the waiter's
				// ahead: it gave up, or released the name; look at once.)
				t.Reset(behindLook)
				select {
				case <-t.C:
				case <-ctx.Done():
				case <-w.c.life.bg.Done():
				}
			}
		}
	case <-t.C:
	case <-ctx.Done():
	case <-w.c.life.bg.Done():
	}
}

// stop ends every wake-up of the wait: its session watchers, its bell or
// its need for notifications, and its subscription.
func (w *waker) stop() {
	w.holders.stop(w.c)
	w.unwatch()
	w.quiet()
	w.unsubscribe()
}

// refused records that an attempt of the wait was refused, registered
// in the server's queue (queued) or not: a queued exclusive wait is woken
// by targeted notifications only. Nothing for a single attempt (nil).
func (w *waker) refused(queued bool) {
	if w != nil {
		w.sub.queued.Store(queued && w.mode == queues)
	}
}

// woke records a wake-up of the wait at now.
func (w *waker) woke(now time.Time) { w.wokenAt = now }

// expiryWait is how long to sleep before the next attempt when the
// holder's lease has remaining time left: until it would expire, plus a
// little jitter so that contenders of several processes do not collide,
// at most the fallback poll interval.
func (w *waker) expiryWait(remaining time.Duration) time.Duration {
	if remaining < 0 { // the holder's row appeared concurrently, or is busy
		return 5*time.Millisecond + rand.N(20*time.Millisecond)
	}
	return min(w.expiryAfter(remaining), w.c.cfg.PollInterval)
}

// expiryAfter is how long to sleep, unbounded, until a holder's lease
// with remaining time left (0 or more) would expire, with expiryWait's
// jitter.
func (w *waker) expiryAfter(remaining time.Duration) time.Duration {
	return remaining + time.Millisecond + rand.N(remaining/50+5*time.Millisecond)
}

// lookAgain bounds delay, the pause before the next attempt of a wait
// just refused at now (behind: the name is promised to waiters queued
// ahead of it). A first registration (recheck) looks again shortly. A
// queued wait refused after a wake-up, with nobody ahead of it, was woken
// in vain: the releasing client took the name again first. The lease is
// promised to it fairAfter into its turn, which began at its latest
// wake-up, and a release in between wakes nobody: it looks again then.
func (w *waker) lookAgain(delay time.Duration, now time.Time, behind, recheck bool) time.Duration {
	if recheck {
		delay = min(delay, store.WakeEvery)
	}
	if w.queued && !w.wokenAt.IsZero() && !behind {
		if left := w.wokenAt.Add(fairAfter + store.WakeEvery).Sub(now); left > 0 {
			delay = min(delay, left)
		}
	}
	return delay
}

// doorbell decides how a single name's wait learns of the release it waits
// for, after a round that began at since and was refused by the server: by
// watching the holder's doorbell when nobody is queued ahead of it, the
// holder rings one and the client does not listen already (the bell also
// rings when the holder's session ends, so the wait watches no fast-failover
// session besides), else by listening for notifications. It returns delay,
// or 0 when a ring may have come after the attempt read the name.
func (w *waker) doorbell(r *roundResult, since time.Time, delay time.Duration, shortened bool) time.Duration {
	c := w.c
	if w.mode != queues || !r.refused {
		return delay
	}
	s := c.conn.sess.Load() // a wait starts it (run)
	own := 0
	if w.unlisten != nil {
		own = 1
	}
	if r.bellOf != "" && (w.bell == r.bellOf || !s.needsNotifications(own)) {
		// (A wait does not begin to watch a bell while its client needs
		// notifications for other waits, an observer or a holder: the
		// release's notification reaches it, and a bell would take a
		// connection of its own, the session listening. One that listened
		// itself, or a session that only lingers, moves to the bell: it is
		// watched on the session.)
		switch w.watch(r.bellOf, since) {
		case bellRangSince:
			r.inSession = nil
			return 0
		case bellWatched:
			r.inSession = nil
			w.holders.drop(c)
			if shortened {
				// The queue's own look again (a first registration, a
				// turn's promise): the wait's own, soon.
				c.wake.looked(w.bell, w.name, time.Time{})
				return delay
			}
			return w.watched(r)
		}
	} else {
		w.unwatch()
		if !r.queued && (s.isLive() || !s.connected()) {
			// The attempt did not queue as the session was not up yet: it
			// wakes every wait once it is, and the wait decides then.
			return delay
		}
	}
	w.listen()
	return delay
}

// watched returns the pause of a wait that watches its holder's bell after
// a refusal r. Its fallback poll and its look at the holder's expiry come
// from its watcher (awaitBell), whose statement ends at the first of them
// and wakes it: neither costs a cancel request, as the wait interrupting
// the watch on the session would, nor arms the watch again more than once
// per watchTimeout for the poll (SPEC §1.9). A thousand waits on names
// one client renewed at once looked at that expiry together, each with a
// cancel request: a hand-off elsewhere took 67 ms instead of 3. The
// pause returned only backs the watcher up: the poll's, or dueGrace after
// the look at the expiry. (With a PollInterval longer than watchTimeout,
// the wait polls by itself.)
func (w *waker) watched(r *roundResult) time.Duration {
	c := w.c
	backup := c.cfg.PollInterval
	if c.cfg.PollInterval <= c.wake.watchTimeout {
		backup += c.wake.watchMax()
	}
	var due time.Time
	if r.soonest >= 0 {
		if exp := w.expiryAfter(r.soonest); exp < backup {
			due = time.Now().Add(exp)
			backup = exp + min(dueGrace, c.wake.watchTimeout/4)
		}
	}
	c.wake.looked(w.bell, w.name, due)
	return backup
}

// behindLook is how long after a ring of its holder's bell a wait queued
// behind other waiters looks again: the first waiter, which the ring woke
// too, takes the name meanwhile.
const behindLook = store.WakeEvery

// dueGrace is how long after its due look at its holder's expiry a wait
// that watches a bell wakes by itself, should its watcher not have woken
// it.
const dueGrace = time.Second

// listen makes the wait one that listens for notifications.
func (w *waker) listen() {
	if w.unlisten == nil {
		w.unlisten = w.c.needNotifications()
	}
}

// watch makes the wait watch holder's doorbell instead of listening, and
// says what the bell tells a refusal of an attempt begun at since (see
// watchBell); bellSilent when the holder rings no bell now (the wait
// listens, and stays registered with the watcher, which wakes it when the
// bell comes).
func (w *waker) watch(holder string, since time.Time) bellNews {
	c := w.c
	var news bellNews
	if holder == w.bell && c.wake.watching(holder) {
		news = c.wake.bellRang(holder, since)
	} else {
		w.unwatch()
		news = c.watchBell(holder, w.name, since)
		if news != bellSilent || c.wake.watching(holder) {
			w.bell = holder // registered, if only to hear when the bell comes
		}
	}
	if news != bellSilent {
		w.quiet()
	}
	return news
}

// unwatch ends the wait's watch of a bell.
func (w *waker) unwatch() {
	if w.bell != "" {
		w.c.wake.unwatchBell(w.bell, w.name)
		w.bell = ""
	}
}

// quiet ends the wait's need for notifications.
func (w *waker) quiet() {
	if w.unlisten != nil {
		w.unlisten()
		w.unlisten = nil
	}
}
