package pglease

import (
	"context"
	"time"
)

// sessionAwaiter waits, on a connection of its own kept for the whole wait,
// on the advisory lock of a session-bound holder, and wakes the waiter the
// moment the holder's session releases it or ends (a crash sends no
// notification). One awaiter serves one wait; for a semaphore it watches
// one session-bound slot holder at a time, and the others are covered by
// notifications and their expiry.
type sessionAwaiter struct {
	again  chan string // the name to wait on next
	cancel context.CancelFunc
	done   chan struct{}
}

func (c *Client) awaitSession(ctx context.Context, name string, woken chan struct{}) *sessionAwaiter {
	ctx, cancel := context.WithCancel(ctx)
	a := &sessionAwaiter{again: make(chan string, 1), cancel: cancel, done: make(chan struct{})}
	a.again <- name
	started := c.goBackground(func() {
		defer close(a.done)
		var conn *pgxConn
		defer func() {
			if conn != nil {
				conn.close()
			}
		}()
		b := newBackoff(50*time.Millisecond, 2*time.Second)
		for {
			select {
			case name = <-a.again:
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
					a.rearm(name)
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
				a.rearm(name)
				continue
			}
			b.reset()
			wake(woken)
		}
	})
	if !started {
		close(a.done)
	}
	return a
}

// rearm makes the awaiter wait for the (new) session-bound holder of name.
func (a *sessionAwaiter) rearm(name string) {
	select {
	case <-a.again: // a newer name replaces one not yet taken
	default:
	}
	select {
	case a.again <- name:
	default:
	}
}

// stop ends the awaiter and waits for it.
func (a *sessionAwaiter) stop() {
	a.cancel()
	<-a.done
}
