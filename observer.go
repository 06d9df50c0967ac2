package pglease

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// EventKind says what happened to a lease.
type EventKind int

// The kinds of [Event].
//
// An [Elector] reports EventElected when its term begins, then
// EventLeaderChanged naming itself; EventDemoted when its lead function
// has returned, before the lease is released (Err is nil after
// [Elector.Resign] or when lead returned nil of its own accord, else lead's
// error or the cause that ended the term); and EventLeaderChanged when it
// sees another leader, or nobody (Owner "", Token 0), read as
// [Elector.Observe] does but only while [Elector.Run] campaigns and the
// client has an observer. Each kind is reported once per change, in order.
const (
	EventAcquired      EventKind = iota + 1 // a lease was acquired (Previous names the owner of the expired lease it took over, if any)
	EventReleased                           // a lease was released
	EventContended                          // an attempt found the lease held by another owner
	EventLost                               // a held lease was lost (Err says why)
	EventRenewed                            // a renewal succeeded (Latency is its round trip)
	EventAlert                              // a lease's heartbeat is older than an alert threshold
	EventElected                            // an [Elector] of this client began a term (Token is the term's)
	EventDemoted                            // an [Elector]'s term ended: its lead function returned (Err says why)
	EventLeaderChanged                      // the leader an [Elector] sees changed (Owner "" and Token 0: nobody leads)
	EventHeartbeat                          // a renewal statement succeeded (Latency is its round trip, Count the leases it renewed)
	EventDropped                            // the observer fell behind and events were dropped (Count of them; Held and Leading give the client's state)
)

var kindNames = map[EventKind]string{
	EventAcquired: "acquired", EventReleased: "released", EventContended: "contended",
	EventLost: "lost", EventRenewed: "renewed", EventAlert: "alert",
	EventElected: "elected", EventDemoted: "demoted", EventLeaderChanged: "leader_changed",
	EventHeartbeat: "heartbeat", EventDropped: "dropped",
}

// String returns the kind's name as used in metric labels and logs, in
// snake case: "acquired", "leader_changed"…
func (k EventKind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event describes one thing that happened to a lease. Fields that do not
// apply to a kind are zero. New fields may be added.
//
// Every lease reported by EventAcquired is later reported ended exactly
// once, by EventReleased or EventLost (also when its row could not be
// deleted), and never before it was reported acquired; a lease the caller
// never received (an abandoned or late acquisition) is reported neither
// way. So an adapter can count the leases held from these events alone.
type Event struct {
	Kind     EventKind
	Name     string
	Client   string        // the reporting client's random id, unique per Client value (and recorded as "client" in its leases' metadata): several clients may share one observer, and several an owner label
	Owner    string        // the owner of this client (the holder's, for EventAlert; the leader's, for EventLeaderChanged)
	Token    int64         // the lease's token (the leader's, for EventLeaderChanged)
	Latency  time.Duration // EventRenewed, EventHeartbeat: round trip of the renewal statement; EventReleased: time taken to delete the row
	Wait     time.Duration // EventAcquired: from the call (Acquire, TryAcquire, AcquireAll…) to the acquisition
	Hold     time.Duration // EventReleased, EventLost: how long the lease was held
	Previous string        // EventAcquired: the owner of the expired lease it took over ("" if the name was free); EventContended: the holder
	Age      time.Duration // EventAlert: heartbeat age
	Count    int           // EventHeartbeat: leases renewed by the statement; EventDropped: events dropped since the last EventDropped
	Held     []string      // EventDropped: the names this client holds, in order, once the dropped events had happened
	Leading  []string      // EventDropped: the names whose elector of this client is in a term, likewise
	Err      error         // EventLost: the cause; EventDemoted: why the term ended, if not by Resign or lead returning nil; EventReleased: why the row could not be deleted (it expires after its TTL; the lease has ended all the same)

	// Context is the context of the call that caused the event (Acquire's
	// for EventAcquired and EventContended, Release's for EventReleased),
	// so that an adapter can link spans to the caller's trace; nil for
	// events of the client's background work. It may be cancelled by the
	// time the event is delivered: read its values only.
	Context context.Context
}

// Observer receives events in the order they happened, on a goroutine of
// the client's own. A slow observer delays later events, never a renewal;
// a panicking observer is recovered and logged. When more than 10,000
// events wait for a slow observer, further ones are dropped until it
// catches up; it then receives one EventDropped that counts them and
// carries the client's state (leases held, electors leading), so that
// adapters that count held leases never drift.
type Observer interface {
	Observe(Event)
}

// eventQueue delivers events to an observer in order, without ever blocking
// the sender: beyond maxQueued pending events, new ones are dropped and
// counted, and once the queue has drained an EventDropped reports them with
// the state they changed. The state (names held, names leading) is kept
// here, in the order events are sent, dropped or not.
type eventQueue struct {
	obs     Observer
	client  string
	onPanic func(any)
	mu      sync.Mutex
	pending []Event
	running bool
	dropped int               // since the last EventDropped
	held    map[string]int    // name → leases of this client reported held
	leading map[string]int    // name → terms of this client's electors begun and not ended
	start   func(func()) bool // runs the drain goroutine; false once the client has closed
}

const maxQueued = 10000

func (q *eventQueue) send(e Event) {
	if q == nil || q.obs == nil {
		return
	}
	e.Client = q.client
	q.mu.Lock()
	defer q.mu.Unlock()
	switch e.Kind {
	case EventAcquired:
		q.held = count(q.held, e.Name, 1)
	case EventReleased, EventLost:
		q.held = count(q.held, e.Name, -1)
	case EventElected:
		q.leading = count(q.leading, e.Name, 1)
	case EventDemoted:
		q.leading = count(q.leading, e.Name, -1)
	}
	if len(q.pending) >= maxQueued {
		q.dropped++
		return
	}
	q.pending = append(q.pending, e)
	if !q.running {
		// Once the client has closed (and waited for its last drain),
		// nothing is delivered any more.
		q.running = q.start(q.drain)
	}
}

// count adds delta to m[name], deleting names that reach zero.
func count(m map[string]int, name string, delta int) map[string]int {
	if m == nil {
		m = map[string]int{}
	}
	if n := m[name] + delta; n > 0 {
		m[name] = n
	} else {
		delete(m, name)
	}
	return m
}

func (q *eventQueue) drain() {
	for {
		q.mu.Lock()
		if len(q.pending) == 0 {
			if q.dropped == 0 {
				q.running = false
				q.mu.Unlock()
				return
			}
			// The queue has caught up: report what was dropped, with
			// the state after it.
			q.pending = append(q.pending, Event{Kind: EventDropped, Client: q.client, Count: q.dropped,
				Held: sortedKeys(q.held), Leading: sortedKeys(q.leading)})
			q.dropped = 0
		}
		e := q.pending[0]
		q.pending = q.pending[1:]
		q.mu.Unlock()
		q.deliver(e)
	}
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (q *eventQueue) deliver(e Event) {
	defer func() {
		if r := recover(); r != nil && q.onPanic != nil {
			q.onPanic(r)
		}
	}()
	q.obs.Observe(e)
}
