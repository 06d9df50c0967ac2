package pglease

// localSlot makes a name a mutex between the goroutines of one client: the
// goroutine holding tok is the only one contending for or holding the name.
// Channel receivers queue in FIFO order, so local waiters are served in
// turn and only the first of them queries the server. The slots are the
// registry's (guarded by registry.mu), as is refs.
type localSlot struct {
	tok  chan struct{}
	refs int
}

// getSlot returns name's local slot, with a reference more.
func (r *registry) getSlot(name string) *localSlot {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.locals[name]
	if s == nil {
		s = &localSlot{tok: make(chan struct{}, 1)}
		s.tok <- struct{}{}
		r.locals[name] = s
	}
	s.refs++
	return s
}

// dropSlot drops a reference to name's local slot s.
func (r *registry) dropSlot(name string, s *localSlot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s.refs--
	if s.refs == 0 && r.locals[name] == s {
		delete(r.locals, name)
	}
}

// tryTake takes the name's local slot if no other goroutine of this client
// holds it, and returns it, or nil.
func (c *Client) tryTake(name string) *localSlot {
	s := c.reg.getSlot(name)
	select {
	case <-s.tok:
		return s
	default:
		c.putSlot(name, s, false)
		return nil
	}
}

// putSlot drops a reference, first handing the token back when held. A
// slot of a semaphore handed back wakes this client's waits for the
// semaphore: they try each slot in turn without waiting for its local slot
// (a wait for a single name blocks on the token itself), and the release's
// notification may have reached them before the token was back.
func (c *Client) putSlot(name string, s *localSlot, holding bool) {
	if holding {
		s.tok <- struct{}{}
		if _, slot := slotSuffix(name); slot {
			c.wake.hub.notify(name, true)
		}
	}
	c.reg.dropSlot(name, s)
}

// takeAll takes the local slots of every one of names if no other
// goroutine of this client holds any of them, and returns them; otherwise
// it takes none and returns the first name held.
func (c *Client) takeAll(names []string) ([]*localSlot, string) {
	slots := make([]*localSlot, 0, len(names))
	for _, name := range names {
		s := c.tryTake(name)
		if s == nil {
			c.putAll(names, slots)
			return nil, name
		}
		slots = append(slots, s)
	}
	return slots, ""
}

// putAll gives back the local slots taken by takeAll (slots[i] is names[i]'s).
func (c *Client) putAll(names []string, slots []*localSlot) {
	for i, s := range slots {
		c.putSlot(names[i], s, true)
	}
}
