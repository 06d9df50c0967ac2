package pglease

// localSlot makes a name a mutex between the goroutines of one client: the
// goroutine holding tok is the only one contending for or holding the name.
// Channel receivers queue in FIFO order, so local waiters are served in
// turn and only the first of them queries the server.
type localSlot struct {
	tok  chan struct{}
	refs int
}

func (c *Client) getSlot(name string) *localSlot {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.locals[name]
	if s == nil {
		s = &localSlot{tok: make(chan struct{}, 1)}
		s.tok <- struct{}{}
		c.locals[name] = s
	}
	s.refs++
	return s
}

// tryTake takes the name's local slot if no other goroutine of this client
// holds it, and returns it, or nil.
func (c *Client) tryTake(name string) *localSlot {
	s := c.getSlot(name)
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
			c.hub.notify(name, true)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s.refs--
	if s.refs == 0 && c.locals[name] == s {
		delete(c.locals, name)
	}
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
