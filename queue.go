package pglease

// The server's queue of waiters, as a blocked acquisition of a single name
// uses it (see docs/DESIGN-WAITING.md): an attempt of a
// wait registers it, a release wakes the first waiter with a targeted
// notification, and a wait that gives up leaves. The wait's state is its
// waker's (wake.go).

import (
	"context"
	"time"

	"github.com/pglease/pglease/internal/store"
)

// queueArgs makes an attempt of this wait a queued one when the client's
// dedicated session is live: without it no targeted notification could
// reach the wait, and it attempts unqueued, on every release (or poll).
// Such an attempt of an exclusive lease of a single name still registers
// when shared holders refuse it, as a polling waiter that new shared
// acquisitions wait behind (writer preference: see CreateAcquire).
func (c *Client) queueArgs(w *waker, args *store.AcquireArgs) {
	if w == nil || w.mode == unqueued {
		return
	}
	s, err := c.session()
	if err != nil || !s.isLive() {
		w.sub.queued.Store(false)
		if w.mode == queues {
			args.QueueTTL, w.polling = c.queueTTL(false), true
		}
		return
	}
	args.Queued, args.QueueTTL, w.queued = true, c.queueTTL(true), true
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
// every other waiter held up), as the client lives on.
func (c *Client) leaveQueue(w *waker, name string, then func()) {
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
		if err := c.exec(ctx, func(ctx context.Context, q store.DB, _ *sessState) error { return c.st.Unqueue(ctx, q, c.id, name) }); err != nil && c.life.bg.Err() == nil {
			c.cfg.Logger.WarnContext(ctx, "pglease: could not leave the queue of waiters; the registration goes stale by itself", "name", name, "err", err)
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
	c.leaveQueue(w, name, then)
}
