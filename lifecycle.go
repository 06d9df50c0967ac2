package pglease

import (
	"context"
	"sync"
)

// lifecycle is the part of a Client that owns its life: whether it is
// closed, the context of its background work, the goroutines that do that
// work, and its acquisition statements in flight. goBackground is the only
// door through which the client starts a goroutine that outlives a call
// (the session loop, the renew loop, the watchers, detached statements,
// the observer's delivery, the elector's step-down watch), so that Close
// can stop every one of them and wait for it.
type lifecycle struct {
	bg    context.Context    // lifetime of background work; ends in Close
	stop  context.CancelFunc // ends bg
	calls inflight           // acquisition statements in flight (shutdown.go)
	wg    sync.WaitGroup     // the goroutines started by goBackground

	// mu is a leaf: it is taken under any other lock of the client, and
	// nothing is taken under it.
	mu     sync.Mutex
	closed bool // Close has begun: nothing more is handed out
	wgDone bool // Close waits for wg: nothing more may start
}

func (lf *lifecycle) init() {
	lf.bg, lf.stop = context.WithCancel(context.Background())
	lf.calls.init()
}

// close marks the client closed, and reports false when it already was.
func (lf *lifecycle) close() bool {
	lf.mu.Lock()
	defer lf.mu.Unlock()
	if lf.closed {
		return false
	}
	lf.closed = true
	return true
}

func (lf *lifecycle) isClosed() bool {
	lf.mu.Lock()
	defer lf.mu.Unlock()
	return lf.closed
}

// checkOpen returns ErrClosed once Close has begun.
func (lf *lifecycle) checkOpen() error {
	if lf.isClosed() {
		return ErrClosed
	}
	return nil
}

// goBackground runs fn on a goroutine that Close waits for. Once Close has
// begun waiting it starts nothing and returns false.
func (lf *lifecycle) goBackground(fn func()) bool {
	lf.mu.Lock()
	defer lf.mu.Unlock()
	if lf.wgDone {
		return false
	}
	lf.wg.Add(1)
	go func() {
		defer lf.wg.Done()
		fn()
	}()
	return true
}

// stopAndWait ends the background work, lets no more start, and waits for
// the goroutines that goBackground started.
func (lf *lifecycle) stopAndWait() {
	lf.stop()
	lf.mu.Lock()
	lf.wgDone = true
	lf.mu.Unlock()
	lf.wg.Wait()
}
