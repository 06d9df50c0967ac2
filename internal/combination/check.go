package combination

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Bounds are the liveness bounds of the specification and the slack the
// checker allows over each (see doc.go for why each slack is what it is).
// The expiry bound is the TTL plus the poll interval of the history.
type Bounds struct {
	HandOff, HandOffSlack           time.Duration
	FastFailover, FastFailoverSlack time.Duration
	ExpirySlack                     time.Duration
}

// Violation is one broken property.
type Violation struct {
	// Kind: overlap, token order, stale write, lost lease, left after
	// close, "unexpected error in <call>", "liveness of <event>".
	Kind string
	At   int64 // when it happened (for shrinking: the step it happened in)
	Msg  string
}

func (v Violation) String() string { return v.Kind + ": " + v.Msg }

// Topology classifies a measured latency: the event that freed the name,
// how its holder had got it, and who waited.
type Topology struct {
	Event     string // hand-off, step-down, fast-failover, expiry, restart, free
	HolderGot string // first acquisition, hand-off, step-down, fast-failover, expiry, restart
	Waiters   string // one waiter, many waiters in one client, many waiters in many clients
}

// Latency is one measured takeover or hand-off.
type Latency struct {
	Topology Topology
	D        time.Duration
}

// Report is the outcome of [Check].
type Report struct {
	Violations      []Violation
	Leases          int
	GuardedWrites   int // guards with a live lease
	Committed       int // of those, committed
	StaleAttempts   int // guards with a lease that had ended
	StaleRejected   int
	AllowedOverlaps int // inside the documented window (a fast-failover session ended by the server)
	Latencies       []Latency
	// Slow describes the measured latencies above the specification's
	// bound but within the slack.
	Slow   []string
	Fenced int // sets of the previous release's agents refused by the fence
	// QuotaRefusals counts the acquisitions refused at once between a
	// quota and another kind on one name (either way), and OldQuota what
	// agents of the previous release said when a quota refused theirs,
	// each message once.
	QuotaRefusals int
	OldQuota      []string
	// FencedInFlight counts their single acquisitions refused by the
	// fence: in flight across the upgrade (see fenced).
	FencedInFlight int
	// Open describes the measured take-overs after a double death whose
	// first waiter, a wait without fast failover, may have taken the name
	// before it died (a plain lease, which lives until it expires), held to the
	// expiry bound, that fast failover's bound would have failed.
	Open          []string
	Measured      int            // openings with a waiter, measured
	MeasuredQuota int            // of those, a quota's
	Unmeasured    map[string]int // openings with a waiter, not measured, by why
}

// OK reports whether no property was violated.
func (r Report) OK() bool { return len(r.Violations) == 0 }

// Kinds returns the kinds of violations found, sorted, each once.
func (r Report) Kinds() []string {
	var ks []string
	for _, v := range r.Violations {
		if !slices.Contains(ks, v.Kind) {
			ks = append(ks, v.Kind)
		}
	}
	sort.Strings(ks)
	return ks
}

// checker holds a history being checked.
type checker struct {
	h   *History
	b   Bounds
	r   Report
	got map[*Lease]string // how each lease was had (the event its acquisition waited through)
}

// Check holds a history to pglease's guarantees and the liveness
// bounds: critical sections of one name never overlap beyond what the
// name admits (a plain lease on x excludes every slot x#i of a semaphore
// x and every shared lease x#i of x, a semaphore admits at most its slot
// count, shared leases admit each other and nothing else, a quota's
// holders x#i hold at most its capacity between them, by their weights,
// and nothing of another kind holds x beside them), tokens of each row
// increase in real-time order, no fenced write with a stale lease
// commits, no call fails without a cause, no lease is lost without a
// fault, a shutdown's Close that succeeds leaves no row of its client
// held, and a name freed while a live waiter waits is taken within the
// bound of what freed it.
func Check(h *History, b Bounds) Report {
	c := &checker{h: h, b: b, got: map[*Lease]string{}}
	c.r.Leases = len(h.Leases)
	c.exclusion()
	c.tokens()
	c.writes()
	c.errors()
	c.losses()
	c.closes()
	c.liveness()
	sort.SliceStable(c.r.Violations, func(i, j int) bool { return c.r.Violations[i].At < c.r.Violations[j].At })
	return c.r
}

func (c *checker) violate(kind string, at int64, format string, args ...any) {
	c.r.Violations = append(c.r.Violations, Violation{Kind: kind, At: at, Msg: fmt.Sprintf(format, args...)})
}

// ts formats a timestamp relative to the run's beginning.
func (c *checker) ts(t int64) string {
	if t == 1<<63-1 {
		return "the end"
	}
	return fmt.Sprintf("+%.3fs", time.Duration(t-c.h.Begin).Seconds())
}

func (c *checker) describe(l *Lease) string {
	kind := "plain"
	switch {
	case l.Quota > 0:
		kind = fmt.Sprintf("%d of a quota of %d", l.Weight, l.Quota)
	case l.Slots == 0:
		kind = "shared"
	case l.Slots > 1:
		kind = fmt.Sprintf("slot of %d", l.Slots)
	case l.Acq.Kind == CmdAll || l.Acq.Kind == CmdTryAll:
		kind = "set member"
	}
	if l.Acq.Hold > 0 {
		kind += fmt.Sprintf(", max-hold %v", l.Acq.Hold)
	}
	switch {
	case l.Session:
		kind += ", fast failover"
	case l.Fast():
		kind += ", fast failover asked for, not bound to its session"
	}
	return fmt.Sprintf("%s token %d (%s) of %s", l.Row, l.Token, kind, c.owner(l.Proc))
}

func (c *checker) owner(proc int) string {
	p := c.h.proc(proc)
	return fmt.Sprintf("a%d/p%d", p.Agent, p.ID)
}

// faulted reports whether a fault other than except hit proc (or the
// server) at some time in [from, to].
func (c *checker) faulted(proc int, from, to int64, except *Fault) bool {
	for i := range c.h.Faults {
		f := &c.h.Faults[i]
		if f == except || (f.Proc != proc && f.Proc != 0) {
			continue
		}
		if f.Start <= to && f.End >= from {
			return true
		}
	}
	return false
}

// grace is how long after a fault a client may still see its effects
// (reconnections, a lease's expiry).
func (c *checker) grace() int64 { return int64(c.h.TTL + 2*time.Second) }

// exclusion checks that at no instant a name has more holders than it
// admits. Every pair of leases is looked at when the later one begins.
func (c *checker) exclusion() {
	byRes := map[string][]*Lease{}
	for _, l := range c.h.Leases {
		byRes[l.Resource] = append(byRes[l.Resource], l)
	}
	for res, ls := range byRes {
		sort.SliceStable(ls, func(i, j int) bool { return ls[i].Start() < ls[j].Start() })
		for i, b := range ls {
			var live []*Lease
			for _, o := range ls[:i] {
				if o.Proc == b.Proc && o.Handle == b.Handle {
					continue // one set's leases
				}
				if b.Start() < c.h.end(o) {
					live = append(live, o)
				}
			}
			slots, ended := 0, 0
			limit := b.Slots
			units, endedUnits := 0, 0 // a quota's, beside b's
			for _, o := range live {
				switch {
				case o.Row == b.Row:
					c.overlap(res, o, b, "one row held twice")
				case (o.Quota > 0) != (b.Quota > 0):
					c.overlap(res, o, b, "a quota's holder beside a lease of another kind on the name")
				case o.Quota > 0 && o.Quota != b.Quota:
					c.overlap(res, o, b, "holders of quotas of different capacities")
				case o.Quota > 0 && c.terminated(o, b):
					endedUnits += o.Weight // (free on the server: the documented window)
				case o.Quota > 0:
					units += o.Weight
				case o.Slots == 0 && b.Slots == 0:
					// Shared leases of one name hold it together.
				case o.Slots == 0 || b.Slots == 0:
					c.overlap(res, o, b, "a shared lease beside an exclusive lease or a slot of the name")
				case o.Slots == 1 && b.Slots == 1:
					c.overlap(res, o, b, "two holders of one name")
				case o.Slots == 1 || b.Slots == 1:
					c.overlap(res, o, b, "a lease on the name beside a slot of the semaphore of that name")
				case c.terminated(o, b):
					// Its slot is free on the server (a successor may
					// hold it): the documented window, not a holder.
					ended++
					limit = min(limit, o.Slots)
				default:
					slots++
					limit = min(limit, o.Slots)
				}
			}
			switch {
			case b.Slots > 1 && slots+1 > limit:
				c.violate("overlap", b.Start(), "%q has %d slot holders at %s, more than its %d slots: %s joined %d others",
					res, slots+1, c.ts(b.Start()), limit, c.describe(b), slots)
			case b.Slots > 1 && slots+ended+1 > limit:
				c.r.AllowedOverlaps++
			case b.Quota > 0 && units+b.Weight > b.Quota:
				c.violate("overlap", b.Start(), "%q has holders of %d units at %s, more than its quota of %d: %s joined holders of %d",
					res, units+b.Weight, c.ts(b.Start()), b.Quota, c.describe(b), units)
			case b.Quota > 0 && units+endedUnits+b.Weight > b.Quota:
				c.r.AllowedOverlaps++
			}
		}
	}
}

// overlap reports o and b held at once, unless it is the documented
// window: the server ended the session of o's fast-failover holder, which
// could not know before its connection told it.
func (c *checker) overlap(res string, o, b *Lease, why string) {
	if c.terminated(o, b) {
		c.r.AllowedOverlaps++
		return
	}
	c.violate("overlap", b.Start(), "%q: %s: %s held from %s until %s, %s from %s", res, why,
		c.describe(o), c.ts(o.Start()), c.ts(c.h.end(o)), c.describe(b), c.ts(b.Start()))
}

// terminated reports whether the server ended the session of o's
// fast-failover holder (pg_terminate_backend) before b began: o's row is
// then free on the server, and o is in the documented window until its
// holder's connection tells it.
func (c *checker) terminated(o, b *Lease) bool {
	for _, f := range c.h.Faults {
		if f.Kind == FaultTerminate && f.Proc == o.Proc && o.Session && o.Start() <= f.End && b.Start() >= f.Start {
			return true
		}
	}
	return false
}

// tokens checks that each row's tokens increase in real-time order: an
// acquisition that returned before another was called has the lower
// token, and no token is granted twice.
func (c *checker) tokens() {
	byRow := map[string][]*Lease{}
	for _, l := range c.h.Leases {
		byRow[l.Row] = append(byRow[l.Row], l)
	}
	for row, ls := range byRow {
		for _, a := range ls {
			for _, b := range ls {
				switch {
				case a == b:
				case a.Token == b.Token && a.Start() < b.Start():
					c.violate("token order", b.Start(), "%q token %d granted twice: to %s and %s", row, a.Token, c.owner(a.Proc), c.owner(b.Proc))
				case a.Start() < b.Acq.Called() && a.Token >= b.Token:
					c.violate("token order", b.Start(), "%q: token %d (%s, returned %s) before token %d (%s, called %s)",
						row, a.Token, c.owner(a.Proc), c.ts(a.Start()), b.Token, c.owner(b.Proc), c.ts(b.Acq.Called()))
				}
			}
		}
	}
}

// writes checks the fenced writes: none made with a lease that had ended
// or had been succeeded commits, and each register's log has
// non-decreasing tokens.
func (c *checker) writes() {
	for _, o := range c.h.Ops {
		if (o.Kind != CmdGuard && o.Kind != OpStaleGuard) || o.Target == nil {
			continue
		}
		l := o.Target
		if o.Kind == OpStaleGuard {
			c.r.StaleAttempts++
			if !o.Committed {
				c.r.StaleRejected++
			}
		} else {
			c.r.GuardedWrites++
			if o.Committed {
				c.r.Committed++
			}
		}
		if !o.Committed {
			continue
		}
		if c.h.ended(l, o.Called()) {
			c.violate("stale write", o.Called(), "a guarded write with %s committed though the lease had ended before the write began (%s)",
				c.describe(l), c.ts(o.Called()))
		}
		for _, n := range c.h.Leases {
			if n.Row == l.Row && n.Token > l.Token && n.Start() < o.Called() {
				c.violate("stale write", o.Called(), "a guarded write with %s, begun %s, committed after %s was granted (%s)",
					c.describe(l), c.ts(o.Called()), c.describe(n), c.ts(n.Start()))
			}
		}
	}
	last := map[string]LoggedWrite{}
	for _, w := range c.h.Log {
		if p, ok := last[w.Row]; ok && w.Token < p.Token {
			c.violate("stale write", c.h.End, "register %q: token %d committed after token %d (log %d after %d)", w.Row, w.Token, p.Token, w.Seq, p.Seq)
		}
		last[w.Row] = w
	}
}

// errors checks that every call that failed during the run had a cause:
// the name held (or a wait timed out), a semaphore's other slot count, a
// fault nearby, a lease of another kind on the name, or, for a guard or
// step-down, a lease that had ended.
func (c *checker) errors() {
	for _, o := range c.h.Ops {
		if o.Kind == OpClose {
			c.closeError(o)
			continue
		}
		if o.Err == nil || o.Ret == 0 || o.Ret > c.h.End || o.Kind == OpStaleGuard {
			continue
		}
		if c.faulted(o.Proc, o.Called()-c.grace(), o.Ret, nil) {
			continue
		}
		e := o.Err
		switch o.Kind {
		case CmdAcquire, CmdTry, CmdAll, CmdTryAll:
			if e.Matches("NotAcquired") || e.Matches("SlotsMismatch") || c.otherKindHeld(o) {
				c.quotaRefusal(o)
				continue
			}
			if c.fenced(o) {
				if o.Kind == CmdAll || o.Kind == CmdTryAll {
					c.r.Fenced++
				} else {
					c.r.FencedInFlight++
				}
				continue
			}
		case CmdGuard:
			if e.Matches("NotHeld") || e.Matches("LeaseLost") {
				continue
			}
		case CmdStepDown:
			if e.Matches("NoLease") {
				continue
			}
		}
		c.violate("unexpected error in "+o.Kind, o.Ret, "%s %s %s [%s] (called %s, no fault nearby): %s",
			c.owner(o.Proc), o.Kind, o.Mode, strings.Join(o.Names, " "), c.ts(o.Called()), e.Msg)
	}
}

// closeError checks a shutdown's Close: it returned (the agent reported
// it), and without an error unless a fault (other than the shutdown)
// came near it.
func (c *checker) closeError(o *Op) {
	if o.Sent > c.h.End {
		return
	}
	if o.Ret == 0 {
		c.violate("unexpected error in close", o.Sent, "%s was shut down at %s and exited without its Close returning", c.owner(o.Proc), c.ts(o.Sent))
		return
	}
	if o.Err == nil || c.faulted(o.Proc, o.Called()-c.grace(), o.Ret, c.shutdownOf(o.Proc)) {
		return
	}
	c.violate("unexpected error in close", o.Ret, "%s's Close (called %s, no fault nearby): %s", c.owner(o.Proc), c.ts(o.Called()), o.Err.Msg)
}

// shutdownOf returns the fault of proc's shutdown, or nil.
func (c *checker) shutdownOf(proc int) *Fault {
	for i := range c.h.Faults {
		if f := &c.h.Faults[i]; f.Kind == FaultShutdown && f.Proc == proc {
			return f
		}
	}
	return nil
}

// closes checks that a shutdown's Close that returned no error left no row
// of its client held: neither a lease it held nor one a call it cut may
// have been granted. A row of a lease that had ended before (lost: it
// expires, or a waiter takes it over) is not Close's to release.
func (c *checker) closes() {
	for _, o := range c.h.Ops {
		if o.Kind != OpClose || o.Ret == 0 || o.Err != nil || o.Sent > c.h.End {
			continue
		}
	rows:
		for _, g := range o.Left {
			what := "no lease of its: a call it cut was granted it"
			for _, l := range c.h.Leases {
				if l.Proc != o.Proc || l.Row != g.Row || l.Token != g.Token {
					continue
				}
				if l.Done != 0 && l.Done < o.Call {
					continue rows
				}
				what = c.describe(l)
			}
			c.violate("left after close", o.Ret, "%s's Close returned at %s without an error, and row %q token %d was still held (%s)",
				c.owner(o.Proc), c.ts(o.Ret), g.Row, g.Token, what)
		}
	}
}

// fencedMsg is what this version's fence answers an earlier release's
// acquisition by a statement of its own (a set): refused, nothing written.
const fencedMsg = "a client of an earlier pglease release may not acquire leases"

// fenced reports whether o is an acquisition of an agent of the previous
// release, returned after the table's upgrade began, refused by this
// version's fence with the error that says to upgrade (an older release,
// fenced): a set, a statement of its own, always; a single name when its
// statement was in flight across the upgrade, waiting inside the earlier
// version's function, whose body then writes without the mark.
func (c *checker) fenced(o *Op) bool {
	return c.h.proc(o.Proc).Old && c.h.Upgrade != 0 && o.Ret >= c.h.Upgrade && strings.Contains(o.Err.Msg, fencedMsg)
}

// otherKindHeld reports whether a row of another kind than o asks for (a
// lease on the name, a semaphore's slot or a shared lease, or a quota's
// holder) may have been live on the
// server on one of o's names when o was called: refusing o then is what
// the specification asks for. A row outlives its holder's belief until it
// is deleted by a release or expires, at most a TTL after the holder's
// last renewal.
func (c *checker) otherKindHeld(o *Op) bool {
	kind := kindOf(o.Mode.Slots(), o.Mode.Quota())
	if o.Kind == CmdAll || o.Kind == CmdTryAll {
		kind = kindOf(1, 0)
	}
	for _, l := range c.h.Leases {
		if kindOf(l.Slots, l.Quota) != kind && c.mayHold(l, o) {
			return true
		}
	}
	return false
}

// mayHold reports whether l's row, on one of o's names, may have been
// live on the server when o was called. A row outlives its holder's
// belief until it is deleted by a release or expires, at most a TTL after
// the holder's last renewal.
func (c *checker) mayHold(l *Lease, o *Op) bool {
	if !slices.Contains(o.Names, l.Resource) || l.Start() > o.Ret {
		return false
	}
	gone := c.h.end(l) + int64(c.h.TTL)
	if l.RelRet != 0 && l.RelErr == nil {
		gone = l.RelRet
	}
	return o.Called() <= gone
}

// quotaRefusal counts o, an acquisition refused with a cause, if it was a
// refusal of another kind between a quota and another kind: a quota
// refused with a *KindError, or any acquisition refused with one (or
// without, by an agent of the previous release) while a quota's holder
// may have held the name.
func (c *checker) quotaRefusal(o *Op) {
	kindErr := o.Err.Matches("SlotsMismatch")
	quota := (o.Kind == CmdAcquire || o.Kind == CmdTry) && o.Mode.Quota() > 0
	if quota && kindErr {
		c.r.QuotaRefusals++
		return
	}
	if quota || (!kindErr && o.Err.Matches("NotAcquired")) {
		return // (held by its own kind)
	}
	for _, l := range c.h.Leases {
		if l.Quota > 0 && c.mayHold(l, o) {
			c.r.QuotaRefusals++
			if c.h.proc(o.Proc).Old && !slices.Contains(c.r.OldQuota, o.Err.Msg) {
				c.r.OldQuota = append(c.r.OldQuota, o.Err.Msg)
			}
			return
		}
	}
}

// kindOf tells the kinds of leases apart as otherKindHeld does: a lease
// on the name itself, a quota's holder, or a row among many of the name
// (a semaphore's slot or a shared lease).
func kindOf(slots, quota int) string {
	switch {
	case quota > 0:
		return "quota"
	case slots == 1:
		return "plain"
	}
	return "rows"
}

// losses checks that no lease was lost (not released, not closed)
// without a fault on its holder or the server.
func (c *checker) losses() {
	for _, l := range c.h.Leases {
		if l.Done == 0 || l.Done > c.h.End || l.Cause == nil || l.Cause.Matches("Released") || l.Cause.Matches("Closed") {
			continue
		}
		if l.Cause.Matches("HoldLimit") {
			// Ended by its maximum hold: never before it (it counts from
			// the acquisition's statement, sent after the call began).
			if hold := l.Acq.Hold; hold == 0 || l.Done < l.Acq.Called()+int64(hold) {
				c.violate("early hold limit", l.Done, "%s, held from %s, ended by a maximum hold of %v at %s, before it was due",
					c.describe(l), c.ts(l.Start()), hold, c.ts(l.Done))
			}
			continue
		}
		if l.RelCall != 0 && l.RelCall <= l.Done {
			continue
		}
		if c.faulted(l.Proc, l.Start()-c.grace(), l.Done, nil) {
			continue
		}
		c.violate("lost lease", l.Done, "%s, held from %s, lost at %s without a fault: %s", c.describe(l), c.ts(l.Start()), c.ts(l.Done), l.Cause.Msg)
	}
}
