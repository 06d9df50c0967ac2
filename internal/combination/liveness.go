package combination

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// Events that free a name, and so open it to a waiter.
const (
	EvHandOff  = "hand-off"      // a release
	EvStepDown = "step-down"     // a release answering a step-down request
	EvFast     = "fast-failover" // the fast-failover holder's session ended (killed, terminated)
	EvExpiry   = "expiry"        // the holder stopped renewing (killed, paused, partitioned)
	EvRestart  = "restart"       // a restart ended fast-failover leases; the rows expire
	EvHoldEnd  = "hold-limit"    // a lease ended at its maximum hold, and its row was deleted
	EvShutdown = "shutdown"      // a shutdown's Close, right after calls were cut mid-statement
	EvFree     = "free"          // (latencies only) an acquisition of a free name
	GotFirst   = "first acquisition"
	GotCut     = "a cut call" // a shutdown's: what its statement may have been granted
)

// opening is one event that freed leases of a resource: from when a
// successor could first have had it (a release's call, a fault's start),
// and at when the bound starts (a release's return, a fault's start). A
// waiter can return before the releaser's Release has returned: its
// latency then counts as zero.
type opening struct {
	kind     string
	res      string
	from, at int64
	freed    []*Lease
	slots    int    // the kind freed: a freed lease's Slots, or what a cut call asked for
	quota    int    // and its Quota (0: not a quota)
	fault    *Fault // the fault that caused it, if any
}

// openings lists every event that freed a resource, in time order.
func (c *checker) openings() []opening {
	h := c.h
	var out []opening
	add := func(kind string, from, at int64, f *Fault, ls []*Lease) {
		byRes := map[string][]*Lease{}
		var order []string
		for _, l := range ls {
			if _, ok := byRes[l.Resource]; !ok {
				order = append(order, l.Resource)
			}
			byRes[l.Resource] = append(byRes[l.Resource], l)
		}
		for _, res := range order {
			out = append(out, opening{kind: kind, res: res, from: from, at: at, freed: byRes[res], slots: byRes[res][0].Slots,
				quota: byRes[res][0].Quota, fault: f})
		}
	}
	for _, l := range h.Leases {
		if l.ByClose {
			continue // (below, with the shutdown)
		}
		if l.Done != 0 && l.Done <= h.End && l.Cause.Matches("HoldLimit") && (l.RelCall == 0 || l.RelCall > l.Done) {
			// The client deletes the row right after the lease's end:
			// a hand-off, timed from the end.
			add(EvHoldEnd, l.Done, l.Done, nil, []*Lease{l})
			continue
		}
		if l.RelRet != 0 && l.RelErr == nil && l.RelRet <= h.End && (l.Done == 0 || l.Done >= l.RelCall) {
			kind := EvHandOff
			if l.StepDown {
				kind = EvStepDown
			}
			add(kind, l.RelCall, l.RelRet, nil, []*Lease{l})
		}
	}
	for i := range h.Faults {
		f := &h.Faults[i]
		if f.Kind == FaultShutdown {
			cut := c.shutdownOpenings(f, add) // (add appends to out)
			out = append(out, cut...)
			continue
		}
		var freed []*Lease
		for _, l := range h.Leases {
			if (f.Proc != 0 && l.Proc != f.Proc) || l.Start() > f.Start || h.end(l) < f.Start {
				continue
			}
			switch f.Kind {
			case FaultKill, FaultPause, FaultPartition:
				freed = append(freed, l)
			case FaultTerminate, FaultRestart, FaultReset:
				if l.Session {
					freed = append(freed, l)
				}
			}
		}
		kind := EvExpiry
		switch f.Kind {
		case FaultKill, FaultTerminate, FaultReset:
			kind = EvFast // becomes EvExpiry below for plain leases and plain waiters
		case FaultRestart:
			kind = EvRestart
		}
		add(kind, f.Start, f.Start, f, freed)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].at < out[j].at })
	return out
}

// shutdownOpenings are what a shutdown's Close freed, from its call to its
// return: the leases the client held (add records those), and the names
// of the calls it cut, which their statements may have been granted
// (returned). Nothing, if Close failed: its error names what it left.
func (c *checker) shutdownOpenings(f *Fault, add func(string, int64, int64, *Fault, []*Lease)) []opening {
	h := c.h
	cl := c.closeOf(f.Proc)
	if cl == nil || cl.Ret == 0 || cl.Err != nil || cl.Ret > h.End {
		return nil
	}
	var freed []*Lease
	for _, l := range h.Leases {
		if l.Proc == f.Proc && l.ByClose {
			freed = append(freed, l)
		}
	}
	add(EvShutdown, cl.Call, cl.Ret, f, freed)
	var out []opening
	for _, o := range h.Ops {
		if o.Proc != f.Proc || (o.Kind != CmdAcquire && o.Kind != CmdAll && o.Kind != CmdTry && o.Kind != CmdTryAll) ||
			len(o.Leases) > 0 || o.Returned(f.Start) {
			continue
		}
		slots, quota := o.Mode.Slots(), o.Mode.Quota()
		if o.Kind == CmdAll || o.Kind == CmdTryAll {
			slots, quota = 1, 0
		}
		for _, n := range o.Names {
			dup := false
			for _, l := range freed {
				dup = dup || l.Resource == n
			}
			for _, x := range out {
				dup = dup || x.res == n
			}
			if !dup {
				out = append(out, opening{kind: EvShutdown, res: n, from: cl.Call, at: cl.Ret, slots: slots, quota: quota, fault: f})
			}
		}
	}
	return out
}

// closeOf returns the Close of proc's shutdown, or nil.
func (c *checker) closeOf(proc int) *Op {
	for _, o := range c.h.Ops {
		if o.Kind == OpClose && o.Proc == proc {
			return o
		}
	}
	return nil
}

// recovery is how long before an opening a fault on the holder, a waiter
// or the server keeps the opening from being measured: time for
// connections to come back (a fault's effects end within it; a waiter
// under a fault at the opening itself holds the others up, as
// documented).
const recovery = 2 * time.Second

// bound is the liveness bound of an opening: the specification's, plus
// the slack the machine needs when slack is set.
func (c *checker) bound(o opening, slack bool) time.Duration {
	var spec, extra time.Duration
	switch o.kind {
	case EvHandOff, EvStepDown, EvHoldEnd, EvShutdown:
		spec, extra = c.b.HandOff, c.b.HandOffSlack
	case EvFast:
		spec, extra = c.b.FastFailover, c.b.FastFailoverSlack
	case EvRestart:
		spec, extra = c.h.TTL+c.h.Poll+time.Duration(o.fault.End-o.fault.Start), c.b.ExpirySlack
	default:
		spec, extra = c.h.TTL+c.h.Poll, c.b.ExpirySlack
	}
	if slack {
		return spec + extra
	}
	return spec
}

// waiters returns the blocking acquisitions of o's resource that were
// waiting at o.from for the kind of lease o freed, each of whose other
// names (a set's) was free then. Every one of them takes a session-bound
// lease over once its holder's session ends: a single name's, a
// semaphore's and a set's, plain or fast-failover.
func (c *checker) waiters(o opening) []*Op {
	slots := o.slots
	var out []*Op
	for _, w := range c.h.Ops {
		if (w.Kind != CmdAcquire && w.Kind != CmdAll) || !slices.Contains(w.Names, o.res) {
			continue
		}
		if w.Called() >= o.from || w.Returned(o.from) {
			continue
		}
		if p := c.h.proc(w.Proc); (p.Killed != 0 && p.Killed <= o.from) || (p.Closed != 0 && p.Closed <= o.from) {
			// A waiter killed by the event's instant is no waiter: its
			// locks and its place in the queue free with it, and it
			// holds nobody up (a holder and the first waiter that die
			// together: the waiters left are measured). (A call sent
			// as its process shut down may never have been made.)
			continue
		}
		wslots, wquota := w.Mode.Slots(), w.Mode.Quota()
		if w.Kind == CmdAll {
			wslots, wquota = 1, 0
		}
		// A waiter of the kind freed; and, across shared and exclusive
		// leases of a name (slots 0 and 1), a waiter of the other kind,
		// which the freed leases kept out (measure checks that no other
		// holder keeps it out still). A quota's waiter, of any weight,
		// waits for the units of its quota only (another kind on the name
		// refuses it at once).
		if wquota != o.quota || (wslots != slots && !(wslots <= 1 && slots <= 1)) {
			continue
		}
		free := true
		for _, n := range w.Names {
			if n != o.res && len(c.h.live(n, o.from)) > 0 {
				free = false
			}
		}
		if free {
			out = append(out, w)
		}
	}
	return out
}

// liveness measures, for every opening with a live waiter, how long until
// a waiter held the resource, and reports a violation where that took
// longer than the bound, or never happened while a waiter waited.
func (c *checker) liveness() {
	h := c.h
	ops := c.openings()
	// How each lease was had: the last opening its acquisition waited
	// through. A lease acquired with fast failover is always bound to its
	// holder's session.
	for _, l := range h.Leases {
		if l.Fast() && !l.Session {
			c.violate("unbound fast-failover lease", l.Start(), "%s: acquired with fast failover but not bound to its session", c.describe(l))
		}
		c.got[l] = GotFirst
		for _, o := range ops {
			if o.res == l.Resource && l.Acq.Called() < o.from && o.from < l.Start() {
				c.got[l] = o.kind
			}
		}
	}
	for _, o := range ops {
		c.measure(o)
	}
	// Acquisitions of a free name, for reference.
	for _, op := range h.Ops {
		if (op.Kind != CmdAcquire && op.Kind != CmdTry) || op.Err != nil || len(op.Leases) == 0 || !op.Returned(h.End) {
			continue
		}
		if len(h.live(op.Names[0], op.Called())) == 0 && c.got[op.Leases[0]] == GotFirst {
			c.r.Latencies = append(c.r.Latencies, Latency{Topology{Event: EvFree, HolderGot: "-", Waiters: "-"}, time.Duration(op.Ret - op.Called())})
		}
	}
}

func (c *checker) measure(o opening) {
	h := c.h
	// Mixed kinds freed at once (a plain lease and slots of one name, held
	// together): no bound applies.
	for _, l := range o.freed {
		if l.Slots != o.freed[0].Slots || l.Quota != o.freed[0].Quota {
			c.skip("mixed kinds freed")
			return
		}
	}
	var ws []*Op
	open := false
	if o.kind == EvFast {
		// The bound applies to every lease acquired WithFastFailover,
		// however it was had, and to every waiter that takes it over.
		fast := true
		for _, l := range o.freed {
			// (A fast-failover row of a client of the previous release
			// carries the earlier form of the server incarnation, which
			// this version's functions do not recognise: it is taken
			// over at its expiry, as documented, until its holder is
			// upgraded.)
			fast = fast && l.Session && !h.proc(l.Proc).Old
		}
		ws = c.waiters(o)
		dead := c.doubleDeath(o)
		if !fast || len(ws) == 0 || (len(dead) > 0 && slices.ContainsFunc(ws, func(w *Op) bool { return h.proc(w.Proc).Old })) {
			// (A waiter of the previous release behind a first waiter that
			// died with the holder takes over at its poll: that release
			// lacks the look again of issue 41 item 8. The expiry bound.)
			o.kind = EvExpiry
		} else if slices.ContainsFunc(dead, c.sessionless) {
			// A first waiter without fast failover, killed with the
			// holder, may have taken the name in the moment between the
			// two SIGKILLs (it watches the holder's session, and acts as
			// soon as that ends): its row, a plain lease, then lives on
			// until it expires, as a killed plain holder's does (seen:
			// the grant's statement ran after the holder's session
			// ended, and the waiter's process died before the reply).
			// Held to the expiry bound, and counted.
			o.kind, open = EvExpiry, true
		}
	}
	if o.kind != EvFast {
		ws = c.waiters(o)
	}
	if len(ws) == 0 {
		return // nobody waited: nothing to measure
	}
	bound := c.bound(o, true)
	deadline := o.at + int64(bound)
	// The first acquisition of the resource after the opening, and
	// whether it went to a waiter.
	var first *Lease
	for _, l := range h.Leases {
		if l.Resource == o.res && l.Start() > o.from && l.Start() <= h.End && (first == nil || l.Start() < first.Start()) {
			first = l
		}
	}
	waiter := first != nil && slices.Contains(ws, first.Acq)
	until := deadline // the window in which nothing else may happen
	if waiter {
		until = min(until, first.Start())
	} else if deadline > h.End {
		c.skip("the run ended first")
		return
	}
	// Only when nothing else was going on: no other fault on the holder,
	// a waiter or the server nearby (a woken waiter that cannot act holds
	// the others up, as documented), and room on the resource once the
	// freed leases are gone.
	// A waiter killed after the event is a fault nearby: the event may
	// have woken it, and a release that woke a waiter which dies before
	// it acts leaves the others to their next look (a known gap).
	involved, clients := map[int]bool{}, map[int]bool{}
	for _, w := range ws {
		involved[w.Proc], clients[w.Proc] = true, true
	}
	if o.fault == nil || o.fault.Kind != FaultKill {
		// A killed holder's earlier faults count among the combinations:
		// however it got and kept its lease, its death must be noticed.
		for _, l := range o.freed {
			involved[l.Proc] = true
		}
	}
	if o.kind == EvShutdown {
		involved[o.fault.Proc] = true // (its cut calls' names too)
	}
	for p := range involved {
		if c.faulted(p, o.at-int64(recovery), until, o.fault) {
			c.skip("another fault nearby")
			return
		}
	}
	var others []*Lease
	for _, l := range h.live(o.res, o.from) {
		if !slices.Contains(o.freed, l) {
			others = append(others, l)
		}
	}
	for _, l := range h.Leases {
		if l.Resource == o.res && !slices.Contains(o.freed, l) && c.lingers(l, o.from) {
			others = append(others, l)
		}
	}
	if o.quota > 0 {
		// A quota: its waiters are served first in line first, so the
		// freed units must suffice for the first waiter beside the units
		// still held.
		units := 0
		for _, l := range others {
			if l.Quota != o.quota {
				c.skip("no room: other holders")
				return
			}
			units += l.Weight
		}
		first := ws[0]
		for _, w := range ws {
			if w.Called() < first.Called() {
				first = w
			}
		}
		if units+first.Mode.Weight() > o.quota {
			c.skip("no room: a quota's units still held")
			return
		}
	}
	slots := o.slots
	for _, l := range others {
		if o.quota > 0 {
			break // (above)
		}
		// (Shared leases, slots 0, leave no room for an exclusive waiter;
		// shared waiters are measured only when the name is free.)
		if l.Slots <= 1 || slots <= 1 || len(others) >= slots {
			c.skip("no room: other holders")
			return
		}
	}
	topo := Topology{Event: o.kind, HolderGot: c.holderGot(o), Waiters: waitersTopology(len(ws), len(clients))}
	switch {
	case waiter:
		d := time.Duration(max(first.Start()-o.at, 0))
		c.measured(o)
		c.r.Latencies = append(c.r.Latencies, Latency{topo, d})
		if open && d > c.b.FastFailover+c.b.FastFailoverSlack {
			c.r.Open = append(c.r.Open, fmt.Sprintf("fast-failover of %q at %s (%s) with the first waiter, a wait without fast failover, killed too: a waiter (%s) held it %v later (%s)",
				o.res, c.ts(o.at), c.freedBy(o), c.owner(first.Proc), d.Round(time.Millisecond), c.waitList(ws)))
		}
		switch {
		case d > bound:
			c.violate("liveness of "+o.kind, first.Start(), "%s of %q at %s (%s): a waiter (%s) held it only %v later; the bound is %v (%s)",
				o.kind, o.res, c.ts(o.at), c.freedBy(o), c.owner(first.Proc), d.Round(time.Millisecond), bound, c.waitList(ws))
		case d > c.bound(o, false):
			c.r.Slow = append(c.r.Slow, fmt.Sprintf("%s of %q at %s (%s): a waiter (%s) held it %v later (%s)",
				o.kind, o.res, c.ts(o.at), c.freedBy(o), c.owner(first.Proc), d.Round(time.Millisecond), c.waitList(ws)))
		}
	case first == nil || first.Start() > deadline:
		for _, w := range ws {
			if !w.Returned(deadline) && w.Called()+int64(w.Timeout) > deadline {
				if p := h.proc(w.Proc); (p.Killed == 0 || p.Killed > deadline) && (p.Closed == 0 || p.Closed > deadline) {
					c.measured(o)
					c.violate("liveness of "+o.kind, deadline, "%s of %q at %s (%s): nobody held it within %v though %s waited",
						o.kind, o.res, c.ts(o.at), c.freedBy(o), bound, c.waitList(ws))
					return
				}
			}
		}
		c.skip("the waiters gave up")
	default:
		c.skip("a new attempt took it first")
	}
}

// lingers reports whether l's row may still be held on the server at t
// though its holder is dead: a lease its process's SIGKILL ended, not
// bound to a session that ended with it (a plain lease, or an old agent's
// fast-failover one), lives on until it expires, within a TTL of the kill.
func (c *checker) lingers(l *Lease, t int64) bool {
	p := c.h.proc(l.Proc)
	if p.Killed == 0 || p.Killed > t || l.Start() > p.Killed || c.h.end(l) < p.Killed {
		return false
	}
	return (!l.Session || p.Old) && t < p.Killed+int64(c.h.TTL)
}

// doubleDeath returns, when o is a holder's SIGKILL, the other processes
// waiting for o's resource killed in the same instant.
func (c *checker) doubleDeath(o opening) []int {
	if o.fault == nil || o.fault.Kind != FaultKill {
		return nil
	}
	var out []int
	for i := range c.h.Faults {
		f := &c.h.Faults[i]
		if f == o.fault || f.Kind != FaultKill || f.Start != o.fault.Start {
			continue
		}
		for _, w := range c.h.Ops {
			if w.Proc == f.Proc && (w.Kind == CmdAcquire || w.Kind == CmdAll) && slices.Contains(w.Names, o.res) &&
				w.Called() < o.from && !w.Returned(o.from) && !slices.Contains(out, f.Proc) {
				out = append(out, f.Proc)
			}
		}
	}
	return out
}

// sessionless reports whether proc's client never asked for fast failover
// before it was killed: a lease it was granted in its last moment is a
// plain one, which outlives it until it expires.
func (c *checker) sessionless(proc int) bool {
	killed := c.h.proc(proc).Killed
	for _, o := range c.h.Ops {
		if o.Proc == proc && (o.Kind == CmdAcquire || o.Kind == CmdTry) && o.Mode.Fast() && o.Called() < killed {
			return false
		}
	}
	return true
}

// measured counts a measured opening (and a quota's apart).
func (c *checker) measured(o opening) {
	c.r.Measured++
	if o.quota > 0 {
		c.r.MeasuredQuota++
	}
}

// skip counts an opening that was not measured, and why.
func (c *checker) skip(why string) {
	if c.r.Unmeasured == nil {
		c.r.Unmeasured = map[string]int{}
	}
	c.r.Unmeasured[why]++
}

func waitersTopology(n, clients int) string {
	switch {
	case n == 1:
		return "one waiter"
	case clients == 1:
		return "many waiters in one client"
	}
	return "many waiters in many clients"
}

// holderGot is how the holder of what o freed had got it.
func (c *checker) holderGot(o opening) string {
	if len(o.freed) == 0 {
		return GotCut
	}
	return c.got[o.freed[0]]
}

func (c *checker) freedBy(o opening) string {
	if len(o.freed) == 0 {
		return "what a call of " + c.owner(o.fault.Proc) + " cut by its shutdown may have been granted"
	}
	s := ""
	for i, l := range o.freed {
		if i > 0 {
			s += ", "
		}
		s += c.describe(l) + " had by " + c.got[l]
	}
	return s
}

func (c *checker) waitList(ws []*Op) string {
	s := "waiting:"
	for _, w := range ws {
		s += fmt.Sprintf(" %s %s %s since %s;", c.owner(w.Proc), w.Kind, w.Mode, c.ts(w.Called()))
	}
	return s
}
