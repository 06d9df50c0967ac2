package pglease

import "sync"

// hub routes NOTIFY payloads (lease names) to local waiters.
type hub struct {
	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{}
}

func (h *hub) init() { h.subs = map[string]map[chan struct{}]struct{}{} }

// subscribe returns a channel that receives a value when one of names is
// released (or when notifications may have been missed). cancel must be
// called.
func (h *hub) subscribe(names ...string) (ch chan struct{}, cancel func()) {
	ch = make(chan struct{}, 1)
	h.mu.Lock()
	for _, name := range names {
		set := h.subs[name]
		if set == nil {
			set = map[chan struct{}]struct{}{}
			h.subs[name] = set
		}
		set[ch] = struct{}{}
	}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		for _, name := range names {
			if set := h.subs[name]; set != nil {
				delete(set, ch)
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

func (h *hub) notify(name string) {
	h.mu.Lock()
	for ch := range h.subs[name] {
		wake(ch)
	}
	h.mu.Unlock()
}

func (h *hub) notifyAll() {
	h.mu.Lock()
	for _, set := range h.subs {
		for ch := range set {
			wake(ch)
		}
	}
	h.mu.Unlock()
}
