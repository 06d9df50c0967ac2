package pglease

import (
	"sync"
	"sync/atomic"
)

// hub routes notifications (lease names) to local waiters. A release
// notifies the table's channel, which every client hears, and the first
// queued waiter's client on a channel of its own (targeted); a waiter that
// queues on the server acts only on the targeted one, so that a release
// sets one waiting client in motion, not all of them.
type hub struct {
	mu   sync.Mutex
	subs map[string]map[*subscription]struct{}
}

// subscription is one waiter's (or observer's) interest in some names.
type subscription struct {
	ch chan struct{}
	// queued: the waiter's last attempt registered it in the server's
	// queue; it is woken by targeted notifications only.
	queued atomic.Bool
	// timed: the last wake-up was its bell watcher's poll or look at its
	// holder's expiry (notifyTimed), not a release's.
	timed atomic.Bool
}

func (h *hub) init() { h.subs = map[string]map[*subscription]struct{}{} }

// subscribe returns a subscription whose channel receives a value when one
// of names is released (or when notifications may have been missed).
// cancel must be called.
func (h *hub) subscribe(names ...string) (s *subscription, cancel func()) {
	s = &subscription{ch: make(chan struct{}, 1)}
	h.mu.Lock()
	for _, name := range names {
		set := h.subs[name]
		if set == nil {
			set = map[*subscription]struct{}{}
			h.subs[name] = set
		}
		set[s] = struct{}{}
	}
	h.mu.Unlock()
	return s, func() {
		h.mu.Lock()
		for _, name := range names {
			if set := h.subs[name]; set != nil {
				delete(set, s)
				if len(set) == 0 {
					delete(h.subs, name)
				}
			}
		}
		h.mu.Unlock()
	}
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// notify wakes the subscribers of name; a notification that is not
// targeted skips the queued ones. A release of a row of a semaphore's slot
// or of a shared lease ("name#i") also wakes the subscribers of its name:
// the waits that contend with the whole name (a set, an exclusive lease of
// a name held shared).
func (h *hub) notify(name string, targeted bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.wakeSubs(name, targeted)
	if i, ok := slotSuffix(name); ok {
		h.wakeSubs(name[:i], targeted)
	}
}

// wakeSubs wakes the subscribers of name as notify says; h.mu is held.
func (h *hub) wakeSubs(name string, targeted bool) {
	for s := range h.subs[name] {
		if targeted || !s.queued.Load() {
			s.timed.Store(false)
			wake(s.ch)
		}
	}
}

// notifyTimed wakes the subscribers of name for their poll or their look
// at their holder's expiry, which their bell watcher's statement ended at
// (see wakeBellWaits): no release, so that a refusal then is no wake-up in
// vain (see waker.lookAgain). A release's wake-up before they look wins.
func (h *hub) notifyTimed(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs[name] {
		if len(s.ch) == 0 {
			s.timed.Store(true)
		}
		wake(s.ch)
	}
}

// only reports whether name is the only name anything of the client
// (a wait, an observer) subscribes to.
func (h *hub) only(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.subs[name]
	return ok && len(h.subs) == 1
}

// notifyAll wakes every subscriber: notifications may have been missed.
func (h *hub) notifyAll() {
	h.mu.Lock()
	for _, set := range h.subs {
		for s := range set {
			wake(s.ch)
		}
	}
	h.mu.Unlock()
}
