package pglease

// The server's queue of waiters, as a blocked acquisition of a single name
// uses it (see docs/DESIGN-WAITING.md): an attempt of a
// wait registers it, a release wakes the first waiter with a targeted
// notification, and a wait that gives up leaves.

import (
	"context"
	"time"

	"github.com/pglease/pglease/internal/store"
)

// waiting is a blocked acquisition's state between its attempts.
type waiting struct {
	sub *subscription
	// queue: the wait may queue on the server (a single name); queued:
	// an attempt registered it there, so it must leave when it gives up.
	queue, queued bool
	// shared: the wait of a shared lease, which registers in the queue
	// to be listed and to keep its place before later exclusive waiters,
	// but is woken by every notification, as an unqueued wait is.
	shared bool
	// polling: the wait of an exclusive lease of a single name without a
	// live session, which cannot queue; its attempts register it, live
	// while fresh, when shared holders refuse it (see CreateAcquire), so
	// that it leaves when it gives up.
	polling bool
	// registered: the last attempt left a registration in the queue;
	// recheck: it was the first.
	registered, recheck bool
	// wokenAt is the latest wake-up of the wait, when a release may have
	// begun its turn: not the first, which may be the listener's start
	// (it wakes every wait once), long before any release.
	wokenAt time.Time
	// bell: the holder client whose doorbell the wait watches (see
	// doorbell); unlisten, while the wait listens for notifications
	// instead, ends that.
	bell     string
	unlisten func()
	// inflight, when the wait gave up with an attempt's statement still
	// running (see detached), is closed once that statement has ended.
	inflight <-chan struct{}
}

// listen makes the wait one that listens for notifications.
func (w *waiting) listen(c *Client) {
	if w.unlisten == nil {
		w.unlisten = c.needNotifications()
	}
}

// watch makes the wait on name watch holder's doorbell instead of
// listening, and reports whether it must look again at once (see
// watchBell); false when the holder rings no bell now (the wait listens,
// and stays registered with the watcher, which wakes it when the bell
// comes).
func (w *waiting) watch(c *Client, holder, name string, since time.Time) (again, ok bool) {
	if holder == w.bell && c.wake.watching(holder) {
		again, ok = c.wake.bellRang(holder, since)
	} else {
		w.unwatch(c, name)
		again, ok = c.watchBell(holder, name, since)
		if ok || c.wake.watching(holder) {
			w.bell = holder // registered, if only to hear when the bell comes
		}
	}
	if !ok {
		return false, false
	}
	w.quiet()
	return again, true
}

func (w *waiting) unwatch(c *Client, name string) {
	if w.bell != "" {
		c.wake.unwatchBell(w.bell, name)
		w.bell = ""
	}
}

// quiet ends the wait's need for notifications.
func (w *waiting) quiet() {
	if w.unlisten != nil {
		w.unlisten()
		w.unlisten = nil
	}
}

// stop ends the wait's watch or its need for notifications.
func (w *waiting) stop(c *Client, name string) {
	w.unwatch(c, name)
	w.quiet()
}

// woke records a wake-up of the wait at now.
func (w *waiting) woke(now time.Time) { w.wokenAt = now }

// lookAgain bounds delay, the pause before the next attempt of a wait
// just refused at now (behind: the name is promised to waiters queued
// ahead of it). A first registration looks again shortly (see recheck). A
// queued wait refused after a wake-up, with nobody ahead of it, was woken
// in vain: the releasing client took the name again first. The lease is
// promised to it fairAfter into its turn, which began at its latest
// wake-up, and a release in between wakes nobody: it looks again then.
func (w *waiting) lookAgain(delay time.Duration, now time.Time, behind bool) time.Duration {
	if w.recheck {
		delay = min(delay, store.WakeEvery)
	}
	if w.queued && !w.wokenAt.IsZero() && !behind {
		if left := w.wokenAt.Add(fairAfter + store.WakeEvery).Sub(now); left > 0 {
			delay = min(delay, left)
		}
	}
	return delay
}

func (w *waiting) channel() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.sub.ch
}

// queueArgs makes an attempt of this wait a queued one when the client's
// dedicated session is live: without it no targeted notification could
// reach the wait, and it attempts unqueued, on every release (or poll).
// Such an attempt of an exclusive lease of a single name still registers
// when shared holders refuse it, as a polling waiter that new shared
// acquisitions wait behind (writer preference: see CreateAcquire).
func (c *Client) queueArgs(w *waiting, args *store.AcquireArgs) {
	if w == nil || !w.queue && !w.shared {
		return
	}
	s, err := c.session()
	if err != nil || !s.isLive() {
		w.sub.queued.Store(false)
		if w.queue {
			args.QueueTTL, w.polling = c.queueTTL(), true
		}
		return
	}
	args.Queued, args.QueueTTL, w.queued = true, c.queueTTL(), true
}

// fairAfter is how long the first queued waiter may be overtaken once its
// turn began (see "Turns, bursts and the promise" in
// docs/DESIGN-WAITING.md).
const fairAfter = store.FairAfter

// queueTTL is how long a registration in the queue stays fresh: a waiter
// attempts at least every PollInterval, and each attempt refreshes it, so
// only a waiter that stopped attempting (a crash its session survives, a
// partition) goes stale, and is passed over.
func (c *Client) queueTTL() time.Duration { return 3*c.cfg.PollInterval + time.Second }

// leaveQueue removes the wait's registration for name from the server's
// queue, if an attempt made one, and then runs then; in the background,
// bounded by the statement timeout. (Only single names queue.) A wait that
// gave up with a statement in flight leaves once that statement has ended:
// sent at once, the leave could come first, and the statement register
// the wait again, live for the queue's TTL (the name promised to it,
// every other waiter held up), as the client lives on.
func (c *Client) leaveQueue(w *waiting, name string, then func()) {
	if w == nil || !w.queued && !w.polling {
		then()
		return
	}
	w.queued, w.polling = false, false
	inflight := w.inflight
	if !c.life.goBackground(func() {
		defer then()
		if inflight != nil {
			<-inflight
		}
		ctx, cancel := context.WithTimeout(c.life.bg, c.cfg.StatementTimeout)
		defer cancel()
		if err := c.st.Unqueue(ctx, c.db, c.id, name); err != nil && c.life.bg.Err() == nil {
			c.cfg.Logger.WarnContext(ctx, "pglease: could not leave the queue of waiters; the registration goes stale by itself", "name", name, "err", err)
		}
	}) {
		then()
	}
}
