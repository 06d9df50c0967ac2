// Package holdings keeps what the clients of one [pglease.Observer] hold,
// as their events tell it: the state behind the held and leader gauges of
// the metrics adapters (pgleaseprom, pgleaseotel), for any observer that
// reports what is held now rather than what happened.
//
// The state is kept per client ([pglease.Event] Client), so that the
// snapshot an [pglease.EventDropped] carries replaces exactly what was
// counted for that client; a client that holds nothing is forgotten.
package holdings

import (
	"slices"

	"github.com/pglease/pglease"
)

// Tally is the state of the clients of one observer. It is not safe for
// concurrent use: an observer that keeps one guards it with a lock of its
// own (events of several clients may arrive at once).
type Tally struct {
	clients  map[string]*client
	names    map[string]struct{} // lease names ever held
	electors map[string]struct{} // elector names ever seen
}

// client is what one client holds: lease names and the names whose
// elector is in a term, each with a count (a client holds a name once, but
// the tally does not rely on it).
type client struct {
	held    map[string]int
	leading map[string]int
}

// New returns an empty tally.
func New() *Tally {
	return &Tally{clients: map[string]*client{}, names: map[string]struct{}{}, electors: map[string]struct{}{}}
}

// Observe updates the tally with e. Events of kinds that change nothing
// held are ignored. EventLeaderChanged records its elector's name only: a
// campaigning elector reports the leader it sees first thing, so its
// leader series exists, at 0, before it ever leads.
func (t *Tally) Observe(e pglease.Event) {
	switch e.Kind {
	case pglease.EventAcquired, pglease.EventReleased, pglease.EventLost,
		pglease.EventElected, pglease.EventDemoted, pglease.EventDropped:
	case pglease.EventLeaderChanged:
		t.electors[e.Name] = struct{}{}
		return
	default:
		return
	}
	c := t.clients[e.Client]
	if c == nil {
		c = &client{held: map[string]int{}, leading: map[string]int{}}
		t.clients[e.Client] = c
	}
	switch e.Kind {
	case pglease.EventAcquired:
		c.held[e.Name]++
		t.names[e.Name] = struct{}{}
	case pglease.EventReleased, pglease.EventLost:
		add(c.held, e.Name, -1)
	case pglease.EventElected:
		c.leading[e.Name]++
		t.electors[e.Name] = struct{}{}
	case pglease.EventDemoted:
		add(c.leading, e.Name, -1)
	case pglease.EventDropped:
		// The client's state once the dropped events had happened: it
		// replaces what was counted for this client.
		clear(c.held)
		for _, n := range e.Held {
			c.held[n] = 1
			t.names[n] = struct{}{}
		}
		clear(c.leading)
		for _, n := range e.Leading {
			c.leading[n] = 1
			t.electors[n] = struct{}{}
		}
	}
	if len(c.held) == 0 && len(c.leading) == 0 {
		// A closed client leaves nothing behind.
		delete(t.clients, e.Client)
	}
}

// add adds delta to m[name], deleting names that reach zero or less (an
// end without its acquisition, which the library never reports, counts
// nothing).
func add(m map[string]int, name string, delta int) {
	if n := m[name] + delta; n > 0 {
		m[name] = n
	} else {
		delete(m, name)
	}
}

// Holds reports whether the client with id holds name.
func (t *Tally) Holds(id, name string) bool {
	c := t.clients[id]
	return c != nil && c.held[name] > 0
}

// Held returns the leases held now by name, summed over the clients.
func (t *Tally) Held() map[string]int {
	return t.sum(func(c *client) map[string]int { return c.held })
}

// Leading returns the elector terms begun and not ended by name, summed
// over the clients.
func (t *Tally) Leading() map[string]int {
	return t.sum(func(c *client) map[string]int { return c.leading })
}

func (t *Tally) sum(of func(*client) map[string]int) map[string]int {
	sums := map[string]int{}
	for _, c := range t.clients {
		for n, k := range of(c) {
			sums[n] += k
		}
	}
	return sums
}

// Names returns, sorted, every lease name ever held: a gauge by name
// reports 0 for those no longer held rather than nothing.
func (t *Tally) Names() []string { return sortedKeys(t.names) }

// Electors returns, sorted, every elector name ever seen.
func (t *Tally) Electors() []string { return sortedKeys(t.electors) }

// Clients returns the number of clients whose state is kept.
func (t *Tally) Clients() int { return len(t.clients) }

func sortedKeys(m map[string]struct{}) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
