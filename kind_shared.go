package pglease

// Shared leases (WithShared): any number of holders of a name at once,
// never beside an exclusive holder, each with a row "name#i" of its own
// (the lowest i not held) that the server picks. A wait registers in the
// server's queue to keep its place before later exclusive waiters, but
// acts on every notification (listed). The acquisition holds the name's
// local slot only while it acquires: other goroutines of the client may
// share the name too (see DESIGN-KINDS.md, "Shared leases").

import (
	"context"
	"time"

	"github.com/pglease/pglease/internal/store"
)

// kindShared is a shared lease of a name.
type kindShared struct{ oneName }

func (kindShared) words(*leaseOptions) leaseKind { return sharedKind }

func (kindShared) queue() queueMode { return listed }

func (kindShared) keepsLocalSlot() bool { return false }

// refused reads a refusal as refusedOne does, but a shared wait behind
// queued waiters does not watch a fast-failover holder's session: an
// exclusive waiter does.
func (kindShared) refused(a *acquisition, rep reply, r *roundResult) { a.refusedOne(rep, r, false) }

// statement is the statement of an attempt at a shared lease of unit's
// name (see shareStatement).
func (kindShared) statement(a *acquisition, unit []string) func(context.Context) reply {
	return a.shareStatement(a.shareArgs(unit[0]))
}

// shareArgs are the arguments of an attempt at a row of its own among
// name's, a shared lease's unless the caller says otherwise. They pass the
// rows of the client's own leases of the name, so that the server deletes
// any other row of this client's: one an acquisition whose reply was lost
// was granted.
func (a *acquisition) shareArgs(name string) store.SharedArgs {
	c, o := a.c, a.o
	args := store.SharedArgs{AcquireArgs: store.AcquireArgs{Name: name, Owner: c.cfg.Owner, TTL: o.ttl, MinHold: o.minHold,
		Session: o.session, Metadata: o.metadata, Client: c.id}}
	args.Mine = c.heldRowsOf(name)
	c.queueArgs(a.w, &args.AcquireArgs)
	return args
}

// shareStatement is the statement of an attempt at a row of its own among
// a name's (AcquireShared, on the dedicated session for a fast-failover
// lease): its reply names the row acquired, or the name itself when
// refused.
func (a *acquisition) shareStatement(args store.SharedArgs) func(context.Context) reply {
	c, o, name := a.c, a.o, args.Name
	if hook := testHookAttempt.Load(); hook != nil {
		(*hook)(c.id, name)
	}
	return func(sctx context.Context) (r reply) {
		r.sent, r.queued = time.Now(), args.Queued
		var res acquireResult
		var row string
		if o.session {
			bound := args
			bound.LockTimeout = acquireLockTimeout
			res, row, r.epoch, r.err = c.acquireAloneInSession(args.TTL, func(ctx context.Context, q store.Querier) (store.AcquireResult, string, error) {
				return c.st.AcquireShared(ctx, q, bound)
			})
		} else {
			r.err = c.exec(sctx, func(ctx context.Context, q store.DB, _ *sessState) (err error) {
				res.AcquireResult, row, err = c.st.AcquireShared(ctx, q, args)
				return err
			})
			res, r.err = busyRow(res, r.err)
		}
		r.granted = res.Acquired
		if !r.granted {
			row = name
		}
		r.rows = []nameReply{{name: row, acquireResult: res}}
		return r
	}
}
