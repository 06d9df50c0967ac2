package pglease

import (
	"context"
	"log/slog"
	"time"
)

// The hooks: what the recipes (the elector, Run, LeaseSet) use of the
// client beyond its exported API, as etcd's mutex and election use their
// Session. A recipe calls these two, changes and recipe, and nothing else
// unexported of Client or Lease (recipes_test.go keeps the rule); their
// bodies are where the recipes meet the wake-ups, the settings and the
// client's life, so a change there leaves the recipes alone.

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

// recipeEnv is what a recipe needs of its client beyond the exported API
// and the wake-ups of changes, in one place.
type recipeEnv struct {
	// The client's settings, resolved: the fallback poll, the logger, and
	// the renewal interval of a lease of a TTL.
	poll     time.Duration
	log      *slog.Logger
	renewFor func(ttl time.Duration) time.Duration
	// report queues an event for the client's observer, in order with the
	// leases' own; nil without an observer.
	report func(Event)
	// options resolves the options of a call of e by the option rules
	// (kind.go), as Acquire does.
	options func(e entry, opts []Option) (leaseOptions, error)
	// goBackground runs fn on a goroutine that Close waits for, with a
	// context that ends when Close stops the client's background work.
	// Once Close waits it starts nothing and returns false.
	goBackground func(fn func(ctx context.Context)) bool
	// end ends the lease l with cause as its loss would (its context's
	// cause; renewals stop), unless it has ended already, and reports
	// whether it did; deleteRow then deletes its row, scoped by token. A
	// set ends its leases so, with the set's cause.
	end       func(l *Lease, cause error) bool
	deleteRow func(l *Lease, ctx context.Context) error
}

// recipe returns the client's recipeEnv.
func (c *Client) recipe() recipeEnv {
	env := recipeEnv{
		poll:     c.cfg.PollInterval,
		log:      c.cfg.Logger,
		renewFor: func(ttl time.Duration) time.Duration { return renewFor(&c.cfg, ttl) },
		options:  c.leaseOptions,
		goBackground: func(fn func(ctx context.Context)) bool {
			return c.life.goBackground(func() { fn(c.life.bg) })
		},
		end:       (*Lease).end,
		deleteRow: (*Lease).deleteRow,
	}
	if c.events != nil && c.events.obs != nil {
		env.report = c.events.send
	}
	return env
}
