package pglease

// The settings of every backoff with which a loop of the client retries or
// looks again are named here, with the other pauses of those loops, so that
// a reader finds them in one place. A backoff starts at its first pause
// and doubles up to its largest; each pause is jittered (next), and a loop
// resets it once it succeeds.

import (
	"math/rand/v2"
	"time"
)

// pauses is a backoff setting: the first pause and the largest.
type pauses struct{ first, largest time.Duration }

// The backoff settings of the client's loops (see each loop for why it
// waits).
var (
	// retryRead: a read or a delete of expired rows sent again after its
	// connection failed (Client.retry), and a detached acquisition
	// statement sent again for the same reason (attempt.go: detached).
	retryRead = pauses{20 * time.Millisecond, 200 * time.Millisecond}
	// retryRelease: a release that failed, tried again until its bound
	// (Lease.release).
	retryRelease = pauses{20 * time.Millisecond, 500 * time.Millisecond}
	// retryAcquire: an acquisition round that failed with a retryable
	// error (the engine's loop).
	retryAcquire = pauses{50 * time.Millisecond, 2 * time.Second}
	// retrySetLocal: a set whose names' local slots another goroutine of
	// this client holds looks again (the engine's loop).
	retrySetLocal = pauses{5 * time.Millisecond, 500 * time.Millisecond}
	// retryRenew: a renewal statement that failed (the renew loop).
	retryRenew = pauses{100 * time.Millisecond, time.Second}
	// reconnectSession: the dedicated connection opened again after it
	// failed, and a change of what it listens for tried again (the session
	// loop).
	reconnectSession = pauses{50 * time.Millisecond, 2 * time.Second}
	// reconnectWatcher: a session watcher's connection opened again after
	// it failed (failover.go: runWatcher).
	reconnectWatcher = pauses{50 * time.Millisecond, 2 * time.Second}
	// probeBell: a bell watcher looks again for the bell of a holder that
	// holds none (a client's session starts with its first wait, or its
	// first renewal, a third of the TTL after its first acquisition).
	probeBell = pauses{time.Second, 30 * time.Second}
	// interruptAgain: a cancel request sent again while a watcher's
	// statement on the dedicated session has not returned (the server
	// dropped the last one, sent before the statement began: session.go:
	// interrupt).
	interruptAgain = pauses{20 * time.Millisecond, time.Second}
)

// promisedLookFirst is the first pause of a wait queued behind a waiter to
// which a free name is promised (see holderGone): the backoff doubles up
// to the fallback poll ([Config.PollInterval]), so that a wait behind a
// waiter that died looks again within about a second.
const promisedLookFirst = 40 * time.Millisecond

// campaignPause is how long an Elector pauses before campaigning again
// after an acquisition failed with a transient error (Acquire has already
// retried it).
const campaignPause = 100 * time.Millisecond

// Elector.watch reads the leader again shortly after a release
// notification, while a successor may be acquiring: first after
// recheckFirst, then after twice as long each time, until recheckLargest.
const (
	recheckFirst   = 10 * time.Millisecond
	recheckLargest = time.Second
)

// backoff yields jittered, exponentially growing delays.
type backoff struct{ min, max, cur time.Duration }

// start returns a backoff of p's setting.
func (p pauses) start() *backoff { return newBackoff(p.first, p.largest) }

func newBackoff(min, max time.Duration) *backoff { return &backoff{min: min, max: max, cur: min} }

func (b *backoff) next() time.Duration {
	d := b.cur
	b.cur = min(b.cur*2, b.max)
	return d/2 + rand.N(d/2+1)
}

func (b *backoff) reset() { b.cur = b.min }
