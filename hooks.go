package pglease

import "context"

// The hooks: what the recipes (the elector, Run, LeaseSet) use of the
// client beyond its exported API, as etcd's mutex and election use their
// Session. A recipe calls these two and nothing else unexported of Client
// (recipes_test.go keeps the rule); their bodies are where the recipes
// meet the wake-ups and the client's life, so a change there leaves the
// recipes alone.

// changes returns a channel that receives a value when one of names may
// have changed hands: a release of one of them was notified, notifications
// may have been missed (the dedicated session reconnected, or began to
// listen), or the client is closing (a read then fails with [ErrClosed]).
// While subscribed, the client listens for notifications (its dedicated
// session is started if need be); without them (Config.DisableNotify, a
// database/sql driver other than pgx) the channel receives only at close
// and the caller polls. stop must be called.
func (c *Client) changes(names ...string) (ch <-chan struct{}, stop func()) {
	_, _ = c.session() // the listener; it fails only once the client is closed
	sub, unsubscribe := c.wake.hub.subscribe(names...)
	done := c.needNotifications()
	closing := context.AfterFunc(c.life.bg, func() { wake(sub.ch) })
	return sub.ch, func() {
		closing()
		done()
		unsubscribe()
	}
}

// goBackground runs fn on a goroutine that Close waits for, with a context
// that ends when Close stops the client's background work. Once Close
// waits it starts nothing and returns false.
func (c *Client) goBackground(fn func(ctx context.Context)) bool {
	return c.life.goBackground(func() { fn(c.life.bg) })
}
