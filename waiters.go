package pglease

import (
	"context"
	"time"

	"github.com/pglease/pglease/internal/store"
)

// Waiter is a client queued for a lease name (see "Waiting" in the
// package documentation): who waits, and since when by the server's clock.
type Waiter struct {
	Name   string        // the name waited for
	Owner  string        // the waiting client's owner label ("" in a registration of schema version 6)
	Since  time.Time     // server time it queued
	Waited time.Duration // how long it has waited, by the server's clock
	// Kind is the kind of lease it waits for: "plain" for an exclusive
	// lease (plain or [WithFastFailover]); for a lease whose holders share
	// the name, the kind of the rows that share it now ([Info.Kind]:
	// "shared" for [WithShared], or the word of a kind a later version
	// adds, as it is), or "shared" when none is held.
	Kind string
}

// Waiters returns the clients queued for names, or for every name when
// none is given: per name, the first in line first (the one a release
// wakes, and to which a free lease is promised once its turn is 100 ms
// old). A client is listed once per name, however many of its goroutines
// wait for it (they queue locally), and only while it is alive: a
// registration whose client's dedicated session ended, or that its
// attempts stopped refreshing, is not shown.
//
// The queue holds the blocked [Client.Acquire] calls of single names
// (plain or [WithFastFailover]) of clients with a dedicated session (pgx:
// [Open], [NewFromPool], or database/sql with pgx's driver; not with
// [Config.DisableNotify] or behind a transaction-pooling proxy), from
// their first refused attempt on. A wait for a semaphore's slot or for a
// set does not queue ([Client.AcquireAll]), nor does [Client.TryAcquire].
//
// Like [Client.List] it only reads (it needs SELECT on the table and on
// its waiters table, "<table>_waiters"); without the table it returns an
// empty slice.
func (c *Client) Waiters(ctx context.Context, names ...string) ([]Waiter, error) {
	for _, n := range names {
		if err := checkName(n); err != nil {
			return nil, err
		}
	}
	var ws []store.Waiter
	err := c.read(ctx, "list waiters", func() (err error) {
		ws, err = c.st.Waiters(ctx, c.db, names)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]Waiter, len(ws))
	for i, w := range ws {
		out[i] = Waiter(w)
	}
	return out, nil
}
