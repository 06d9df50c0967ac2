package pglease

import (
	"fmt"
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
	EventAcquired       EventKind = iota + 1 // a lease was acquired
	EventReleased                            // a lease was released
	EventContended                           // an attempt found the lease held by another owner
	EventLost                                // a held lease was lost (Err says why)
	EventRenewed                             // a renewal succeeded (Latency is its round trip)
	EventStaleReclaimed                      // an acquisition took over an expired lease (Previous names its owner)
	EventAlert                               // a lease's heartbeat is older than an alert threshold
	EventElected                             // an [Elector] of this client began a term (Token is the term's)
	EventDemoted                             // an [Elector]'s term ended: its lead function returned (Err says why)
	EventLeaderChanged                       // the leader an [Elector] sees changed (Owner "" and Token 0: nobody leads)
)

var kindNames = map[EventKind]string{
	EventAcquired: "acquired", EventReleased: "released", EventContended: "contended",
	EventLost: "lost", EventRenewed: "renewed", EventStaleReclaimed: "stale-reclaimed", EventAlert: "alert",
	EventElected: "elected", EventDemoted: "demoted", EventLeaderChanged: "leader-changed",
}

// String returns the kind's name as used in metrics: "acquired",
// "leader-changed"…
func (k EventKind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event describes one thing that happened to a lease. Fields that do not
// apply to a kind are zero. New fields may be added.
type Event struct {
	Kind     EventKind
	Name     string
	Owner    string        // the owner of this client (the holder's, for EventAlert; the leader's, for EventLeaderChanged)
	Token    int64         // the lease's token (the leader's, for EventLeaderChanged)
	Latency  time.Duration // EventRenewed: round trip of the renewal statement
	Previous string        // EventStaleReclaimed, EventContended: the other owner
	Age      time.Duration // EventAlert: heartbeat age
	Err      error         // EventLost: the cause; EventDemoted: why the term ended, if not by Resign or lead returning nil
}

// Observer receives events in the order they happened, on a goroutine of
// the client's own. A slow observer delays later events, never a renewal;
// a panicking observer is recovered and logged.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to [Observer].
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// eventQueue delivers events to an observer in order, without ever blocking
// the sender: beyond maxQueued pending events, new ones are dropped and
// counted.
type eventQueue struct {
	obs     Observer
	onPanic func(any)
	mu      sync.Mutex
	pending []Event
	running bool
	dropped uint64
	start   func(func()) bool // runs the drain goroutine; false once the client has closed
}

const maxQueued = 10000

func (q *eventQueue) send(e Event) {
	if q == nil || q.obs == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
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

func (q *eventQueue) drain() {
	for {
		q.mu.Lock()
		if len(q.pending) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		e := q.pending[0]
		q.pending = q.pending[1:]
		q.mu.Unlock()
		q.deliver(e)
	}
}

func (q *eventQueue) deliver(e Event) {
	defer func() {
		if r := recover(); r != nil && q.onPanic != nil {
			q.onPanic(r)
		}
	}()
	q.obs.Observe(e)
}
