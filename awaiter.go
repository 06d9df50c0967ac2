package pglease

import (
	"context"
	"time"
)

// sessionWatcher waits, on a connection of its own, on the session advisory
// lock of one name's session-bound holder, and wakes every local waiter of
// the name (through the hub, as a notification would) the moment that
// session releases the lock or ends: a crash sends no notification. A
// client runs at most one watcher per name, shared by its local waiters,
// and stops it when the last of them leaves; a waiter for a semaphore
// watches each session-bound slot holder it saw, up to maxWatched.
type sessionWatcher struct {
	refs   int           // under c.mu
	again  chan struct{} // wait for the (new) holder's session again
	cancel context.CancelFunc
	done   chan struct{}
}

// maxWatched bounds the session watchers, one connection each, that one
// wait starts; further slot holders of a semaphore are covered by
// notifications and their expiry.
const maxWatched = 16

// watchSession returns the watcher of name, starting it if needed, and
// makes it wait for the current holder's session.
func (c *Client) watchSession(name string) *sessionWatcher {
	c.mu.Lock()
	w := c.watchers[name]
	if w == nil {
		w = &sessionWatcher{again: make(chan struct{}, 1), done: make(chan struct{})}
		var ctx context.Context
		ctx, w.cancel = context.WithCancel(c.bg)
		c.watchers[name] = w
		if !c.goBackground(func() { c.runWatcher(ctx, name, w) }) {
			close(w.done)
		}
	}
	w.refs++
	c.mu.Unlock()
	w.rearm()
	return w
}

// unwatchSession drops a reference to name's watcher, stopping it after the
// last.
func (c *Client) unwatchSession(name string, w *sessionWatcher) {
	c.mu.Lock()
	w.refs--
	last := w.refs == 0
	if last {
		delete(c.watchers, name)
	}
	c.mu.Unlock()
	if last {
		w.cancel()
		<-w.done
	}
}

// rearm makes the watcher wait for the holder's session again, once it has
// reported the last one.
func (w *sessionWatcher) rearm() { wake(w.again) }

func (c *Client) runWatcher(ctx context.Context, name string, w *sessionWatcher) {
	defer close(w.done)
	var conn *pgxConn
	defer func() {
		if conn != nil {
			conn.close()
		}
	}()
	b := newBackoff(50*time.Millisecond, 2*time.Second)
	for {
		select {
		case <-w.again:
		case <-ctx.Done():
			return
		}
		if conn == nil {
			cfg, err := c.dedicatedConfig(ctx)
			if err != nil || cfg == nil {
				return
			}
			pc, err := connectPgx(ctx, cfg, c.connectTimeout())
			if err != nil {
				w.rearm()
				select {
				case <-time.After(b.next()):
				case <-ctx.Done():
				}
				continue
			}
			conn = &pc
		}
		if err := c.st.AwaitSession(ctx, conn.querier(), name); err != nil {
			conn.close()
			conn = nil
			if ctx.Err() != nil {
				return
			}
			w.rearm()
			continue
		}
		b.reset()
		c.hub.notify(name)
	}
}
