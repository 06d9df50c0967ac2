package pglease

// Quotas (WithQuota): a name with a capacity of n units, whose holders
// each take w of them; their weights sum to at most n. Each holder has a
// row "name#i" of its own, as a shared lease does (kind_shared.go), with
// the quota's capacity and its weight recorded in it, and the server
// decides (CreateAcquireShared). Its wait is first in line first: an
// attempt is refused while another client waits for the name in the queue
// ahead of it (a TryAcquire, while anyone waits), so that small requests
// cannot starve a large one. A wait registers in the queue, acts on every
// notification of the name (listed), and, when the client has no live
// session to queue with, registers as a polling waiter, live while fresh,
// so that it keeps its place all the same. It watches the session of
// every fast-failover holder, whose end frees its units.

import (
	"context"

	"github.com/pglease/pglease/internal/store"
)

// kindQuota is w units of a quota of n (WithQuota).
type kindQuota struct{ oneName }

func (kindQuota) words(o *leaseOptions) leaseKind { return quotaKind(o.quota) }

func (kindQuota) queue() queueMode { return listed }

func (kindQuota) keepsLocalSlot() bool { return false }

func (kindQuota) statement(a *acquisition, unit []string) func(context.Context) reply {
	args := a.shareArgs(unit[0])
	args.Kind, args.Weight, args.Capacity = store.RowQuota, a.o.weight, a.o.quota
	if a.w != nil && !args.Queued && a.c.mayPoll() {
		// No session to queue with: keep this wait's place in line as a
		// polling waiter (it leaves the queue when the wait ends). (Not
		// while the session comes up: the wait queues once it is.)
		args.QueueTTL, a.w.polling = a.c.queueTTL(false), true
	}
	return a.shareStatement(args)
}

// refused reads a refusal as refusedOne does, and watches the session of
// every session-bound holder of the quota (at most maxWatched), by its
// row, as a semaphore's wait watches each slot's: the end of any of them
// may free the units this wait needs, not only of the holder the refusal
// names.
func (kindQuota) refused(a *acquisition, rep reply, r *roundResult) {
	a.refusedOne(rep, r, true)
	res := rep.rows[0]
	for row, pid := range res.Holders {
		if pid != res.HolderSession || !res.HolderWatchable {
			r.inSession = append(r.inSession, heldBy{row, pid})
		}
	}
}

func quotaKind(units int) leaseKind {
	return leaseKind{word: "quota", size: units, unit: "units"}
}
