package pglease

// The server's queue of waiters, as a blocked acquisition of a single name
// uses it (see docs/DESIGN-WAITING.md): an attempt of a
// wait registers it, a release wakes the first waiter with a targeted
// notification, and a wait that gives up leaves. The wait's state is its
// waker's (wake.go).

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/pglease/pglease/internal/store"
)

// queueArgs makes an attempt of this wait a queued one when the client's
// dedicated session is live: without it no targeted notification could
// reach the wait, and it attempts unqueued, on every release (or poll).
// Such an attempt of an exclusive lease of a single name still registers
// when shared holders refuse it, as a polling waiter that new shared
// acquisitions wait behind (writer preference: see CreateAcquire) —
// unless the session is still coming up for the first time: the wait
// then queues once it is, a few milliseconds later. A polling
// registration is live while fresh, whether its client lives or not (it
// has no session whose client lock would say), so one written just before
// the client died would hold every shared acquisition of the name back
// for the queue's TTL (16 s with the default poll); a queued one is
// passed over once the client's session ends.
func (c *Client) queueArgs(w *waker, args *store.AcquireArgs) {
	if w == nil || w.mode == unqueued {
		return
	}
	s, err := c.session()
	if err != nil || !s.isLive() {
		w.sub.queued.Store(false)
		if w.mode == queues && c.mayPoll() {
			args.QueueTTL, w.polling = c.queueTTL(false), true
		}
		return
	}
	args.Queued, args.QueueTTL, w.queued = true, c.queueTTL(true), true
}

// mayPoll reports whether a wait that cannot queue now may register as a
// polling waiter: not while the client's session comes up for the first
// time (see queueArgs).
func (c *Client) mayPoll() bool {
	s := c.conn.sess.Load()
	return s == nil || !s.comingUp()
}

// fairAfter is how long the first queued waiter may be overtaken once its
// turn began (see "Turns, bursts and the promise" in
// docs/DESIGN-WAITING.md).
const fairAfter = store.FairAfter

// queueTTL is how long a registration in the queue stays fresh: each
// attempt refreshes it, and a waiter attempts at least every PollInterval,
// or, when it watches its holder's doorbell (a queued wait may), every
// watchTimeout, its watcher's poll (see awaitBell); so only a waiter that
// stopped attempting (a crash its session survives, a partition) goes
// stale, and is passed over.
func (c *Client) queueTTL(queued bool) time.Duration {
	ttl := 3*c.cfg.PollInterval + time.Second
	if queued && c.cfg.PollInterval <= c.wake.watchTimeout {
		ttl += c.wake.watchMax()
	}
	return ttl
}

// leaveQueue removes the wait's registration for name from the server's
// queue, if an attempt made one, and then runs then; in the background,
// bounded by the statement timeout. (Only single names queue.) A wait that
// gave up with a statement in flight leaves once that statement has ended:
// sent at once, the leave could come first, and the statement register
// the wait again, live for the queue's TTL (the name promised to it,
// every other waiter held up), as the client lives on. A queued wait that
// gave up (gaveUp) then rings the client's bell: the wait behind it may
// watch that bell (lookAhead), and must now watch the one ahead of this
// wait, or the holder.
func (c *Client) leaveQueue(w *waker, name string, gaveUp bool, then func()) {
	if w == nil || !w.queued && !w.polling {
		then()
		return
	}
	ring := gaveUp && w.queued
	w.queued, w.polling = false, false
	inflight := w.inflight
	if !c.life.goBackground(func() {
		defer then()
		if inflight != nil {
			<-inflight
		}
		ctx, cancel := context.WithTimeout(c.life.bg, c.cfg.StatementTimeout)
		defer cancel()
		err := c.exec(ctx, func(ctx context.Context, q store.DB, _ *sessState) error { return c.st.Unqueue(ctx, q, c.id, name) })
		switch {
		case err != nil && c.life.bg.Err() == nil:
			c.cfg.Logger.WarnContext(ctx, "pglease: could not leave the queue of waiters; the registration goes stale by itself", "name", name, "err", err)
		case err == nil && ring:
			c.ringBell()
		}
	}) {
		then()
	}
}

// leaveAcquired ends the wait's registration for name after an attempt
// acquired it, and then runs then: at once when the attempt was a queued
// one (dequeued: its statement left the queue), else as leaveQueue does.
// The acquisition deleted a polling registration itself.
func (c *Client) leaveAcquired(w *waker, name string, dequeued bool, then func()) {
	if w != nil {
		w.polling = false
	}
	if dequeued {
		then()
		return
	}
	c.leaveQueue(w, name, false, then)
}

// lookAhead finds the waiter directly ahead of a wait queued behind others
// (r.lookAhead), whose bell the wait watches instead of the holder's: a
// queue in which each waiter watches the one before it (as in a CLH lock),
// so that a release wakes the first waiter alone, and a hand-off costs the
// same however many wait behind. (Watching the holder's bell, every wait
// woke at each ring, looked again and watched the new holder: 31
// statements a hand-off with ten clients on one name; listening instead,
// each hand-off signalled every waiting client's session, as a NOTIFY
// signals every listening backend of the database; docs/BENCHMARKS.md.) A wait that
// watches the waiter ahead already, whose bell did not ring since the
// round began (since), keeps it without a statement. When none is found,
// the waiters ahead left since the round (the first took the name, most
// likely): it reports that the wait should look again at once (once: a
// second such round in a row pauses as planned). When the statement
// fails, the wait watches the holder's bell, r.bellOf.
func (a *acquisition) lookAhead(ctx context.Context, r *roundResult, since time.Time) (again bool) {
	c, w := a.c, a.w
	if testHookNoLookAhead.Load() {
		return false
	}
	if w.ahead && w.bell != "" && c.wake.bellRang(w.bell, since) == bellWatched {
		r.bellOf, r.ahead = w.bell, true
		return false
	}
	var ahead string
	err := c.exec(ctx, func(ctx context.Context, q store.DB, _ *sessState) error {
		var err error
		ahead, err = c.st.Ahead(ctx, q, c.id, a.name)
		return err
	})
	switch {
	case err != nil:
	case ahead == "":
		return true
	case ahead != c.id:
		r.bellOf, r.ahead = ahead, true
	}
	return false
}

// testHookNoLookAhead, set by a test, makes waits behind others watch the
// holder's bell, as those of release 11 did.
var testHookNoLookAhead atomic.Bool
