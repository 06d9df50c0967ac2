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

// busyRow turns a lock timeout of an attempt (on the dedicated session,
// which waits for a lock at most sessionLockTimeout: see Client.exec)
// into a refusal by an unknown holder: the row or the name is busy (a
// guarded transaction, a contender's acquisition).
func busyRow(res acquireResult, err error) (acquireResult, error) {
	if store.Classify(err) != store.KindLockTimeout {
		return res, err
	}
	res = acquireResult{busy: true}
	res.OtherRemaining = -1
	return res, nil
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
			r.err = c.exec(sctx, func(ctx context.Context, q store.DB, _ *sessState) (err error) {
				res.AcquireResult, err = c.st.Acquire(ctx, q, args)
				return err
			})
			res, r.err = busyRow(res, r.err)
		}
		r.granted = res.Acquired
		r.rows = []nameReply{{name: name, acquireResult: res}}
		return r
	}
}
