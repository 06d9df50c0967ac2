package pglease

import (
	"math/rand/v2"
	"sync"
	"time"
)

// wakeups is the part of a Client that wakes its local waits: the hub
// that routes notifications to them (notify.go, with its own mutex), the
// bell watchers (doorbell.go) and the session watchers (failover.go) of
// the holders they wait on, and the settings of how long listening
// lingers (listen.go) and how long a watcher's statement waits. mu guards
// the two maps and the fields of every bellWatcher, and each
// sessionWatcher's names. It is shared by the client's waits; each wait's
// own wake-ups are its waker (wake.go).
type wakeups struct {
	hub hub

	mu sync.Mutex
	// bells: bell watchers by holder client id, for all the local waits
	// on that holder's names (doorbell.go)
	bells map[string]*bellWatcher
	// watchers: session watchers by holder session (backend pid), for
	// all the local waits on names that session holds (failover.go)
	watchers map[int32]*sessionWatcher

	// Set when the client is made (tests shorten them before its first
	// use), then only read.
	listenLinger time.Duration // see listenLinger in listen.go
	watchTimeout time.Duration // see watchTimeout in doorbell.go
}

// watchWait returns how long one statement of a watcher waits on the
// server: watchTimeout, lengthened by up to a quarter at random, so that
// the watchers of many clients that began to wait at once (a fleet that
// started together, the waiters a ring woke) do not all time out, look
// again and wait anew in the same instant, a burst of statements and lock
// manager work that holds up everything else on the server. Never shorter
// than watchTimeout: a watch is armed again at most once per watchTimeout
// (SPEC §1.9), and its snapshot is never older than watchMax.
func (wk *wakeups) watchWait() time.Duration {
	return wk.watchTimeout + rand.N(wk.watchTimeout/4+1)
}

// watchMax is the longest watchWait.
func (wk *wakeups) watchMax() time.Duration { return wk.watchTimeout + wk.watchTimeout/4 }

func (wk *wakeups) init() {
	wk.hub.init()
	wk.bells = map[string]*bellWatcher{}
	wk.watchers = map[int32]*sessionWatcher{}
	wk.listenLinger = listenLinger
	wk.watchTimeout = watchTimeout
}
