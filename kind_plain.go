package pglease

// The plain lease: one row keyed by the name, one holder at a time. Its
// wait queues on the server, and the lease keeps the name's local slot
// while held. Its statement (Acquire, on the dedicated session for a
// fast-failover lease) also serves the slots of a semaphore (kind_slot.go).

import (
	"context"
	"time"

	"github.com/pglease/pglease/internal/store"
)

// kindPlain is a plain lease (no WithSlots, or WithSlots(1)).
type kindPlain struct{ oneName }

func (kindPlain) words(*leaseOptions) leaseKind { return plainKind }

func (kindPlain) queue() queueMode { return queues }

func (kindPlain) statement(a *acquisition, unit []string) func(context.Context) reply {
	return a.rowStatement(unit[0], "")
}

// rowStatement is the statement of an attempt on the row name, a slot of
// the semaphore semaphore if not empty: Acquire, on the dedicated session
// for a fast-failover lease (acquireInSession, which may batch it with
// others), queued when the wait queues.
func (a *acquisition) rowStatement(name, semaphore string) func(context.Context) reply {
	c, o := a.c, a.o
	args := store.AcquireArgs{Name: name, Owner: c.cfg.Owner, TTL: o.ttl, MinHold: o.minHold, Session: o.session, Metadata: o.metadata, Client: c.id,
		FairAfter: fairAfter, Semaphore: semaphore, Slots: o.slots}
	c.queueArgs(a.w, &args)
	if hook := testHookAttempt.Load(); hook != nil {
		(*hook)(c.id, name)
	}
	return func(sctx context.Context) (r reply) {
		r.sent, r.queued = time.Now(), args.Queued
		var res acquireResult
		if o.session {
			res, r.epoch, r.err = c.acquireInSession(args)
		} else {
			res.AcquireResult, r.err = c.st.Acquire(sctx, c.db, args)
		}
		r.granted = res.Acquired
		r.rows = []nameReply{{name: name, acquireResult: res}}
		return r
	}
}
