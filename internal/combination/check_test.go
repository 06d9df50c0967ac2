package combination

import (
	"strings"
	"testing"
	"time"
)

// hist builds histories by hand for the checker's own tests. Times are
// milliseconds from the history's beginning.
type hist struct {
	h  *History
	id int
}

func newHist() *hist {
	h := &History{TTL: 3 * time.Second, Poll: 5 * time.Second, Begin: 0, End: ms(60000)}
	for i := 1; i <= 4; i++ {
		h.Procs = append(h.Procs, &Proc{ID: i, Agent: i - 1})
	}
	return &hist{h: h}
}

func ms(n int) int64 { return int64(n) * int64(time.Millisecond) }

func (b *hist) op(proc int, kind string, mode Mode, names []string, call, ret int) *Op {
	b.id++
	o := &Op{ID: b.id, Proc: proc, Kind: kind, Mode: mode, Names: names, Sent: ms(call), Call: ms(call), Timeout: 20 * time.Second}
	if ret >= 0 {
		o.Ret = ms(ret)
	}
	b.h.Ops = append(b.h.Ops, o)
	return o
}

// acquire records an acquisition by proc of row with tok, called at call
// and returned at ret (a blocking one if kind is CmdAcquire).
func (b *hist) acquire(proc int, kind string, mode Mode, row string, tok int64, call, ret int) *Lease {
	o := b.op(proc, kind, mode, []string{Resource(row)}, call, ret)
	l := &Lease{Handle: o.ID, Proc: proc, Row: row, Resource: Resource(row), Slots: mode.Slots(), Session: mode.Fast(), Token: tok, Acq: o,
		Quota: mode.Quota(), Weight: mode.Weight()}
	o.Leases = []*Lease{l}
	b.h.Leases = append(b.h.Leases, l)
	return l
}

func (b *hist) release(l *Lease, call, ret int) {
	l.RelCall, l.RelRet, l.Done, l.Cause = ms(call), ms(ret), ms(call), &ErrInfo{Is: []string{"Released"}}
}

func (b *hist) guard(l *Lease, kind string, call, ret int, committed bool) *Op {
	o := b.op(l.Proc, kind, Plain, []string{l.Row}, call, ret)
	o.Target, o.Committed = l, committed
	return o
}

func (b *hist) fault(kind string, proc, start, end int) {
	b.h.Faults = append(b.h.Faults, Fault{Kind: kind, Proc: proc, Start: ms(start), End: ms(end)})
	if kind == FaultKill {
		b.h.Procs[proc-1].Killed = ms(start)
	}
}

func has(r Report, kind string) bool {
	for _, v := range r.Violations {
		if strings.HasPrefix(v.Kind, kind) {
			return true
		}
	}
	return false
}

// A clean history: a hand-off to a waiter 20 ms after the release, a
// fenced write, a stale write rejected. It passes, and the hand-off is
// measured.
func clean() *hist {
	b := newHist()
	a := b.acquire(1, CmdTry, Plain, "x", 1, 100, 110)
	b.guard(a, CmdGuard, 150, 160, true)
	w := b.acquire(2, CmdAcquire, Plain, "x", 2, 120, 520)
	b.release(a, 495, 500)
	b.guard(a, OpStaleGuard, 600, 610, false)
	b.release(w, 900, 905)
	return b
}

func TestCheckerPassesACleanHistoryAndMeasuresIt(t *testing.T) {
	r := Check(clean().h, bounds)
	if !r.OK() {
		t.Fatalf("violations in a clean history: %v", r.Violations)
	}
	if r.Measured != 1 || r.StaleAttempts != 1 || r.StaleRejected != 1 || r.Committed != 1 {
		t.Fatalf("report %+v", r)
	}
	var handoff []Latency
	for _, l := range r.Latencies {
		if l.Topology.Event == EvHandOff {
			handoff = append(handoff, l)
		}
	}
	if len(handoff) != 1 || handoff[0].D != 20*time.Millisecond || handoff[0].Topology.Waiters != "one waiter" || handoff[0].Topology.HolderGot != GotFirst {
		t.Fatalf("hand-off latencies %+v", handoff)
	}
}

// Each violation the checker knows is found in a history made for it.
func TestCheckerFindsEachViolation(t *testing.T) {
	for _, tc := range []struct {
		name string
		want string
		make func(b *hist)
	}{
		{"two plain holders", "overlap", func(b *hist) {
			b.acquire(3, CmdTry, Plain, "y", 7, 200, 210)
			b.acquire(4, CmdTry, Fast, "y", 8, 220, 230)
		}},
		{"a plain lease beside a slot (kind mixing)", "overlap", func(b *hist) {
			b.acquire(3, CmdTry, Plain, "y", 7, 200, 210)
			b.acquire(4, CmdTry, Slots2, "y#0", 8, 220, 230)
		}},
		{"a slot beside a plain lease (kind mixing)", "overlap", func(b *hist) {
			b.acquire(3, CmdTry, Slots2, "y#1", 7, 200, 210)
			b.acquire(4, CmdTry, Plain, "y", 8, 220, 230)
		}},
		{"more slot holders than slots", "overlap", func(b *hist) {
			b.acquire(1, CmdTry, Slots2, "y#0", 7, 200, 210)
			b.acquire(3, CmdTry, Slots2, "y#1", 8, 220, 230)
			b.acquire(4, CmdTry, Slots3, "y#2", 9, 240, 250)
		}},
		{"one slot twice", "overlap", func(b *hist) {
			b.acquire(3, CmdTry, Slots2, "y#0", 7, 200, 210)
			b.acquire(4, CmdTry, Slots2, "y#0", 8, 220, 230)
		}},
		{"an overlap before the termination", "overlap", func(b *hist) {
			b.acquire(3, CmdTry, Fast, "y", 7, 200, 210)
			b.acquire(4, CmdTry, Fast, "y", 8, 220, 230)
			b.fault(FaultTerminate, 3, 240, 241)
		}},
		{"a lower token after a higher one", "token order", func(b *hist) {
			l := b.acquire(3, CmdTry, Plain, "y", 9, 200, 210)
			b.release(l, 220, 225)
			b.acquire(4, CmdTry, Plain, "y", 8, 230, 240)
		}},
		{"a token twice", "token order", func(b *hist) {
			l := b.acquire(3, CmdTry, Plain, "y", 9, 200, 210)
			b.release(l, 220, 225)
			b.acquire(4, CmdTry, Plain, "y", 9, 230, 240)
		}},
		{"a write committed after a newer token was granted", "stale write", func(b *hist) {
			b.guard(b.h.Leases[0], CmdGuard, 530, 540, true)
		}},
		{"a write with a released lease committed", "stale write", func(b *hist) {
			b.h.Ops[len(b.h.Ops)-1].Committed = true // the stale guard
		}},
		{"the register's log out of token order", "stale write", func(b *hist) {
			b.h.Log = []LoggedWrite{{Seq: 1, Row: "x", Token: 2}, {Seq: 2, Row: "x", Token: 1}}
		}},
		{"a migration that failed without a fault", "unexpected error in migrate", func(b *hist) {
			b.op(3, CmdMigrate, Plain, nil, 10, 20).Err = &ErrInfo{Msg: `duplicate key value violates unique constraint "pg_class_relname_nsp_index"`}
		}},
		{"a release that failed without a fault", "unexpected error in release", func(b *hist) {
			b.op(3, CmdRelease, Plain, []string{"x"}, 10, 20).Err = &ErrInfo{Msg: "boom"}
		}},
		{"a lease lost without a fault", "lost lease", func(b *hist) {
			l := b.acquire(3, CmdTry, Plain, "y", 7, 200, 210)
			l.Done, l.Cause = ms(5000), &ErrInfo{Is: []string{"LeaseLost"}}
		}},
		{"a slow hand-off", "liveness of hand-off", func(b *hist) {
			b.h.Leases[1].Acq.Ret = ms(1000)
		}},
		{"no hand-off while a waiter waits", "liveness of hand-off", func(b *hist) {
			b.h.Leases = b.h.Leases[:1] // the waiter never got it
			b.h.Ops[2].Ret, b.h.Ops[2].Leases = 0, nil
		}},
		{"a slow fast-failover take-over", "liveness of fast-failover", func(b *hist) {
			b.acquire(3, CmdTry, Fast, "y", 7, 1000, 1010)
			b.acquire(4, CmdAcquire, Fast, "y", 8, 1100, 4000)
			b.fault(FaultKill, 3, 1500, 1501)
		}},
		{"a slow take-over by a plain waiter from a dead fast-failover holder", "liveness of fast-failover", func(b *hist) {
			b.acquire(3, CmdTry, Fast, "y", 7, 1000, 1010)
			b.acquire(4, CmdAcquire, Plain, "y", 8, 1100, 4000)
			b.fault(FaultKill, 3, 1500, 1501)
		}},
		{"a slow take-over by a set from a dead fast-failover holder", "liveness of fast-failover", func(b *hist) {
			b.acquire(3, CmdTry, Fast, "y", 7, 1000, 1010)
			b.acquire(4, CmdAll, Plain, "y", 8, 1100, 4000)
			b.fault(FaultKill, 3, 1500, 1501)
		}},
		{"a fast-failover lease not bound to its session", "unbound fast-failover lease", func(b *hist) {
			b.acquire(3, CmdTry, Fast, "y", 7, 1000, 1010).Session = false
		}},
		{"a slow expiry take-over", "liveness of expiry", func(b *hist) {
			b.acquire(3, CmdTry, Plain, "y", 7, 1000, 1010)
			b.acquire(4, CmdAcquire, Plain, "y", 8, 1100, 11000)
			b.fault(FaultPause, 3, 1500, 5500)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := clean()
			tc.make(b)
			r := Check(b.h, bounds)
			if !has(r, tc.want) {
				t.Fatalf("want a %q violation, got %v", tc.want, r.Violations)
			}
		})
	}
}

// What the specification allows is not reported: the documented window
// of a terminated fast-failover session, a refusal while another kind
// holds the name, errors near a fault, a plain holder's death (the
// expiry bound), a take-over near another fault (not measured).
func TestCheckerAllowsWhatTheSpecificationAllows(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(b *hist)
	}{
		{"an overlap in the window of a terminated session", func(b *hist) {
			b.acquire(3, CmdTry, Fast, "y", 7, 200, 210)
			b.fault(FaultTerminate, 3, 215, 216)
			b.acquire(4, CmdAcquire, Fast, "y", 8, 100, 230)
		}},
		{"slots of a terminated session taken over, counted once", func(b *hist) {
			b.acquire(3, CmdTry, FastSlots3, "y#0", 7, 200, 210)
			b.acquire(3, CmdTry, FastSlots3, "y#1", 8, 211, 220)
			b.acquire(4, CmdTry, FastSlots3, "y#2", 9, 221, 230)
			b.fault(FaultTerminate, 3, 235, 236)
			b.acquire(5, CmdAcquire, FastSlots3, "y#0", 10, 100, 240)
			b.acquire(5, CmdAcquire, FastSlots3, "y#1", 11, 100, 245)
		}},
		{"a refusal while another kind holds the name", func(b *hist) {
			b.acquire(3, CmdTry, Slots2, "y#0", 7, 200, 210)
			b.op(4, CmdTry, Plain, []string{"y"}, 220, 230).Err = &ErrInfo{Msg: "pglease: y is a semaphore"}
		}},
		{"a held name and a slot count mismatch", func(b *hist) {
			b.op(4, CmdTry, Plain, []string{"x"}, 220, 230).Err = &ErrInfo{Is: []string{"NotAcquired"}}
			b.op(4, CmdTry, Slots3, []string{"z"}, 220, 230).Err = &ErrInfo{Is: []string{"SlotsMismatch"}}
		}},
		{"an error during a restart", func(b *hist) {
			b.fault(FaultRestart, 0, 2000, 3000)
			b.op(4, CmdRelease, Plain, []string{"x"}, 2500, 2600).Err = &ErrInfo{Msg: "connection refused"}
		}},
		{"a lease lost in a partition", func(b *hist) {
			l := b.acquire(3, CmdTry, Plain, "y", 7, 200, 210)
			b.fault(FaultPartition, 3, 1000, 5000)
			l.Done, l.DoneDl, l.Cause = ms(5001), ms(2600), &ErrInfo{Is: []string{"LeaseLost"}}
			b.acquire(4, CmdAcquire, Plain, "y", 8, 300, 3500)
		}},
		{"a plain holder's death with a waiter: the expiry bound", func(b *hist) {
			b.acquire(3, CmdTry, Plain, "y", 7, 1000, 1010)
			b.acquire(4, CmdAcquire, Fast, "y", 8, 1100, 4000)
			b.fault(FaultKill, 3, 1500, 1501)
		}},
		{"a slow hand-off to a waiter partitioned just before", func(b *hist) {
			b.fault(FaultPartition, 2, 300, 400)
			b.h.Leases[1].Acq.Ret = ms(1000)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := clean()
			tc.make(b)
			if r := Check(b.h, bounds); !r.OK() {
				t.Fatalf("violations: %v", r.Violations)
			}
		})
	}
}

// Shared leases of a name hold it together; an exclusive lease beside one
// of them, or a semaphore's slot beside one, is an overlap. The hand-off
// from the last shared holder to an exclusive waiter is measured, and a
// waiter served late breaks the bound.
func TestCheckReadWriteRule(t *testing.T) {
	b := newHist()
	r1 := b.acquire(1, CmdTry, Shared, "x#0", 1, 100, 110)
	r2 := b.acquire(2, CmdTry, FastShared, "x#1", 2, 120, 130)
	w := b.acquire(3, CmdAcquire, Plain, "x", 3, 200, 620)
	b.release(r1, 400, 405)
	b.release(r2, 595, 600)
	b.release(w, 700, 710)
	if r := Check(b.h, bounds); !r.OK() || r.Measured != 1 {
		t.Fatalf("a clean read/write history: %v, measured %d", r.Violations, r.Measured)
	}

	b = newHist()
	r1 = b.acquire(1, CmdTry, Shared, "x#0", 1, 100, 110)
	w = b.acquire(3, CmdAcquire, Plain, "x", 3, 200, 300) // while r1 holds
	b.release(w, 350, 360)
	b.release(r1, 400, 405)
	if r := Check(b.h, bounds); !has(r, "overlap") {
		t.Errorf("an exclusive lease beside a shared one passed: %v", r.Violations)
	}

	b = newHist()
	r1 = b.acquire(1, CmdTry, Shared, "x#0", 1, 100, 110)
	s := b.acquire(2, CmdTry, Slots2, "x#1", 2, 200, 210)
	b.release(s, 250, 260)
	b.release(r1, 400, 405)
	if r := Check(b.h, bounds); !has(r, "overlap") {
		t.Errorf("a slot beside a shared lease passed: %v", r.Violations)
	}

	b = newHist()
	r1 = b.acquire(1, CmdTry, Shared, "x#0", 1, 100, 110)
	w = b.acquire(3, CmdAcquire, Plain, "x", 3, 200, 1400) // served a second after the release
	b.release(r1, 395, 400)
	b.release(w, 1500, 1510)
	if r := Check(b.h, bounds); !has(r, "liveness") {
		t.Errorf("an exclusive waiter served late after the last shared release passed: %v", r.Violations)
	}
}

// A quota's holders hold at most its capacity between them, and nothing
// of another kind holds its name beside them; a refusal between a quota
// and another kind is expected. A release hands the quota to its first
// waiter when the freed units suffice for it (measured), and is not
// measured when the units still held leave it no room.
func TestCheckQuotaRule(t *testing.T) {
	for _, tc := range []struct {
		name string
		want string // "": no violation
		make func(b *hist)
	}{
		{"weights 2 and 2 of a quota of 3 at once", "overlap", func(b *hist) {
			b.acquire(1, CmdTry, Quota3W2, "y#0", 1, 100, 110)
			b.acquire(2, CmdTry, FastQuota3W2, "y#1", 2, 200, 210)
		}},
		{"weights 1, 1 and 2 of a quota of 3 at once", "overlap", func(b *hist) {
			b.acquire(1, CmdTry, Quota3W1, "y#0", 1, 100, 110)
			b.acquire(2, CmdTry, Quota3W1, "y#1", 2, 150, 160)
			b.acquire(3, CmdTry, Quota3W2, "y#2", 3, 200, 210)
		}},
		{"weights 1 and 2 of a quota of 3 at once", "", func(b *hist) {
			b.acquire(1, CmdTry, Quota3W1, "y#0", 1, 100, 110)
			b.acquire(2, CmdTry, FastQuota3W2, "y#1", 2, 200, 210)
		}},
		{"weights 2 and 2, one after the other", "", func(b *hist) {
			l := b.acquire(1, CmdTry, Quota3W2, "y#0", 1, 100, 110)
			b.release(l, 150, 155)
			b.acquire(2, CmdTry, Quota3W2, "y#0", 2, 200, 210)
		}},
		{"one row of a quota held twice", "overlap", func(b *hist) {
			b.acquire(1, CmdTry, Quota3W1, "y#0", 1, 100, 110)
			b.acquire(2, CmdTry, Quota3W1, "y#0", 2, 200, 210)
		}},
		{"a quota's holder beside a plain lease on the name", "overlap", func(b *hist) {
			b.acquire(1, CmdTry, Quota3W1, "y#0", 1, 100, 110)
			b.acquire(2, CmdTry, Plain, "y", 2, 200, 210)
		}},
		{"a plain lease on the name beside a quota's holder", "overlap", func(b *hist) {
			b.acquire(2, CmdTry, Fast, "y", 2, 100, 110)
			b.acquire(1, CmdTry, Quota3W2, "y#0", 1, 200, 210)
		}},
		{"a quota's holder beside a set's lease on the name", "overlap", func(b *hist) {
			b.acquire(1, CmdTry, Quota3W1, "y#0", 1, 100, 110)
			b.acquire(2, CmdTryAll, Plain, "y", 2, 200, 210)
		}},
		{"a quota's holder beside a semaphore's slot", "overlap", func(b *hist) {
			b.acquire(1, CmdTry, Quota3W1, "y#0", 1, 100, 110)
			b.acquire(2, CmdTry, Slots3, "y#1", 2, 200, 210)
		}},
		{"a quota's holder beside a shared lease", "overlap", func(b *hist) {
			b.acquire(1, CmdTry, Shared, "y#0", 1, 100, 110)
			b.acquire(2, CmdTry, Quota3W1, "y#1", 2, 200, 210)
		}},
		{"a quota's units of a terminated session taken over", "", func(b *hist) {
			b.acquire(1, CmdTry, FastQuota3W2, "y#0", 1, 100, 110)
			b.fault(FaultTerminate, 1, 150, 151)
			b.acquire(2, CmdAcquire, Quota3W2, "y#1", 2, 120, 200)
		}},
		{"a kind error between a quota and a plain lease", "", func(b *hist) {
			b.acquire(1, CmdTry, Quota3W1, "y#0", 1, 100, 110)
			b.op(2, CmdTry, Plain, []string{"y"}, 200, 210).Err = &ErrInfo{Msg: "pglease: y is a quota of 3 units", Is: []string{"SlotsMismatch"}}
			b.op(3, CmdTry, Shared, []string{"y"}, 200, 210).Err = &ErrInfo{Msg: "pglease: y is a quota of 3 units", Is: []string{"SlotsMismatch"}}
		}},
		{"a refusal of a quota while a plain lease holds the name", "", func(b *hist) {
			b.acquire(1, CmdTry, Plain, "y", 1, 100, 110)
			b.op(2, CmdAcquire, Quota3W2, []string{"y"}, 200, 210).Err = &ErrInfo{Msg: "pglease: y is held as a lease of its own"}
		}},
		{"a refusal of a quota without a cause", "unexpected error", func(b *hist) {
			b.acquire(1, CmdTry, Quota3W1, "y#0", 1, 100, 110)
			b.op(2, CmdTry, Quota3W2, []string{"y"}, 200, 210).Err = &ErrInfo{Msg: "boom"}
		}},
		{"a hand-off of a quota's units to its first waiter", "", func(b *hist) {
			h := b.acquire(1, CmdTry, Quota3W2, "y#0", 1, 100, 110)
			b.acquire(2, CmdTry, Quota3W1, "y#1", 2, 120, 130)
			b.acquire(3, CmdAcquire, Quota3W2, "y#0", 3, 200, 520)
			b.release(h, 495, 500)
		}},
		{"a slow hand-off of a quota's units to its first waiter", "liveness of hand-off", func(b *hist) {
			h := b.acquire(1, CmdTry, Quota3W2, "y#0", 1, 100, 110)
			b.acquire(2, CmdTry, Quota3W1, "y#1", 2, 120, 130)
			b.acquire(3, CmdAcquire, Quota3W2, "y#0", 3, 200, 1500)
			b.release(h, 495, 500)
		}},
		{"no hand-off of a quota while a waiter it fits waits", "liveness of hand-off", func(b *hist) {
			h := b.acquire(1, CmdTry, Quota3W2, "y#0", 1, 100, 110)
			b.acquire(2, CmdTry, Quota3W1, "y#1", 2, 120, 130)
			b.op(3, CmdAcquire, Quota3W1, []string{"y"}, 200, -1)
			b.release(h, 495, 500)
		}},
		{"a release of a quota that leaves its first waiter no room", "", func(b *hist) {
			h := b.acquire(1, CmdTry, Quota3W1, "y#0", 1, 100, 110)
			b.acquire(2, CmdTry, Quota3W2, "y#1", 2, 120, 130)
			b.op(3, CmdAcquire, Quota3W2, []string{"y"}, 200, -1) // (the first in line: 2 + 2 > 3)
			b.op(4, CmdAcquire, Quota3W1, []string{"y"}, 210, -1)
			b.release(h, 495, 500)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newHist()
			tc.make(b)
			r := Check(b.h, bounds)
			switch {
			case tc.want == "" && !r.OK():
				t.Fatalf("violations: %v", r.Violations)
			case tc.want != "" && !has(r, tc.want):
				t.Fatalf("want a %q violation, got %v", tc.want, r.Violations)
			}
		})
	}
}

// A quota's hand-off is measured when the freed units suffice for its
// first waiter, and counted as not measured ("no room") otherwise.
func TestCheckQuotaMeasures(t *testing.T) {
	b := newHist()
	h := b.acquire(1, CmdTry, Quota3W2, "y#0", 1, 100, 110)
	b.acquire(2, CmdTry, Quota3W1, "y#1", 2, 120, 130)
	b.acquire(3, CmdAcquire, FastQuota3W2, "y#0", 3, 200, 505)
	b.release(h, 495, 500)
	if r := Check(b.h, bounds); !r.OK() || r.Measured != 1 || r.MeasuredQuota != 1 {
		t.Fatalf("violations %v, measured %d (%d of a quota)", r.Violations, r.Measured, r.MeasuredQuota)
	}
	b = newHist()
	h = b.acquire(1, CmdTry, Quota3W1, "y#0", 1, 100, 110)
	b.acquire(2, CmdTry, Quota3W2, "y#1", 2, 120, 130)
	b.op(3, CmdAcquire, Quota3W2, []string{"y"}, 200, -1)
	b.release(h, 495, 500)
	if r := Check(b.h, bounds); !r.OK() || r.Measured != 0 || r.Unmeasured["no room: a quota's units still held"] != 1 {
		t.Fatalf("violations %v, measured %d, not %v", r.Violations, r.Measured, r.Unmeasured)
	}
}

// Refusals between a quota and another kind are counted, either way, and
// what an agent of the previous release said once.
func TestCheckQuotaRefusals(t *testing.T) {
	b := newHist()
	b.h.Procs[3].Old = true
	b.acquire(1, CmdTry, Quota3W1, "y#0", 1, 100, 110)
	b.acquire(2, CmdTry, Fast, "z", 2, 100, 110)
	kind := func() *ErrInfo { return &ErrInfo{Msg: "another kind", Is: []string{"SlotsMismatch"}} }
	b.op(3, CmdTry, Quota3W2, []string{"z"}, 200, 210).Err = kind()   // a quota refused by a plain lease
	b.op(4, CmdTry, Plain, []string{"y"}, 200, 210).Err = kind()      // a plain lease refused by the quota (an old agent)
	b.op(4, CmdAcquire, Shared, []string{"y"}, 220, 230).Err = kind() // (the same message: once)
	b.op(3, CmdTry, Quota3W2, []string{"y"}, 220, 230).Err = &ErrInfo{Msg: "held", Is: []string{"NotAcquired"}}
	r := Check(b.h, bounds)
	if !r.OK() || r.QuotaRefusals != 3 || len(r.OldQuota) != 1 {
		t.Fatalf("violations %v, quota refusals %d, the old agents' %q", r.Violations, r.QuotaRefusals, r.OldQuota)
	}
}

// A lease ended by its maximum hold is not lost, but may not end early;
// its end hands the name to a waiter within the hand-off bound.
func TestCheckHoldLimit(t *testing.T) {
	b := newHist()
	h := b.acquire(1, CmdTry, Plain, "x", 1, 100, 110)
	h.Acq.Hold = time.Second
	h.Done, h.Cause = ms(1100), &ErrInfo{Is: []string{"LeaseLost", "HoldLimit"}}
	w := b.acquire(2, CmdAcquire, Plain, "x", 2, 200, 1120)
	b.release(w, 1500, 1510)
	if r := Check(b.h, bounds); !r.OK() || r.Measured != 1 {
		t.Fatalf("a hold limit handing the name on: %v, measured %d", r.Violations, r.Measured)
	}
	h.Done = ms(900)
	if r := Check(b.h, bounds); !has(r, "early hold limit") {
		t.Errorf("a lease ended before its maximum hold passed: %v", r.Violations)
	}
	h.Done = ms(1100)
	w.Acq.Ret = ms(2100)
	if r := Check(b.h, bounds); !has(r, "liveness") {
		t.Errorf("a waiter served a second after the hold limit passed: %v", r.Violations)
	}
}

// shutdown records a shutdown of proc as the driver does: told at sent,
// Close called at call and returned at ret, ending every lease proc held
// then (recorded as released by Close).
func (b *hist) shutdown(proc, sent, call, ret int) *Op {
	o := b.op(proc, OpClose, Plain, nil, call, ret)
	o.Sent = ms(sent)
	b.h.Procs[proc-1].Closed = ms(call)
	b.h.Faults = append(b.h.Faults, Fault{Kind: FaultShutdown, Proc: proc, Start: ms(sent), End: ms(ret)})
	for _, l := range b.h.Leases {
		if l.Proc == proc && l.RelCall == 0 && l.Done == 0 {
			l.RelCall, l.RelRet, l.ByClose = ms(call), ms(ret), true
			l.Done, l.Cause = ms(call+5), &ErrInfo{Is: []string{"Closed"}}
		}
	}
	return o
}

// A shutdown in the middle of a call: the holder of x, with a call on y in
// flight, is shut down; its cut call's error is expected; the waiter of x
// holds it within the hand-off bound of Close's return, and so does a
// waiter of y (which the cut call may have been granted). Close must
// leave nothing held and return no error without a fault nearby; a
// waiter served late breaks the bound.
func TestCheckShutdown(t *testing.T) {
	build := func() (b *hist, cl *Op, wx, wy *Lease) {
		b = newHist()
		b.acquire(1, CmdTry, Plain, "x", 1, 100, 110)
		wx = b.acquire(2, CmdAcquire, Plain, "x", 2, 200, 1025)
		b.op(1, CmdAcquire, Plain, []string{"y"}, 990, 1002).Err = &ErrInfo{Is: []string{"NotAcquired", "Canceled"}}
		wy = b.acquire(3, CmdAcquire, Fast, "y", 3, 995, 1030)
		cl = b.shutdown(1, 1000, 1003, 1020)
		return b, cl, wx, wy
	}
	b, _, _, _ := build()
	r := Check(b.h, bounds)
	if !r.OK() || r.Measured != 2 {
		t.Fatalf("a clean shutdown: %v, measured %d", r.Violations, r.Measured)
	}
	var got []Latency
	for _, l := range r.Latencies {
		if l.Topology.Event == EvShutdown {
			got = append(got, l)
		}
	}
	if len(got) != 2 || got[0].D != 5*time.Millisecond || got[0].Topology.HolderGot != GotFirst ||
		got[1].D != 10*time.Millisecond || got[1].Topology.HolderGot != GotCut {
		t.Fatalf("shutdown latencies %+v", got)
	}

	b, cl, _, _ := build()
	cl.Left = []Granted{{Row: "y", Token: 9}}
	if r := Check(b.h, bounds); !has(r, "left after close") {
		t.Errorf("a row left held by a Close that returned no error passed: %v", r.Violations)
	}
	b, cl, _, _ = build()
	lost := b.acquire(1, CmdTry, Plain, "z", 4, 300, 310)
	lost.Done, lost.Cause = ms(600), &ErrInfo{Is: []string{"LeaseLost"}}
	b.fault(FaultPartition, 1, 400, 500)
	cl.Left = []Granted{{Row: "z", Token: 4}}
	if r := Check(b.h, bounds); !r.OK() {
		t.Errorf("the row of a lease lost before the shutdown was reported: %v", r.Violations)
	}

	b, cl, _, _ = build()
	cl.Err = &ErrInfo{Msg: `pglease: release "y", whose acquisition reply was lost (it expires after its TTL)`}
	if r := Check(b.h, bounds); !has(r, "unexpected error in close") {
		t.Errorf("a Close that failed without a fault passed: %v", r.Violations)
	}
	b.fault(FaultPartition, 1, 500, 990)
	if r := Check(b.h, bounds); !r.OK() {
		t.Errorf("a Close that failed right after a partition was reported: %v", r.Violations)
	}
	b, cl, _, _ = build()
	cl.Ret = 0
	if r := Check(b.h, bounds); !has(r, "unexpected error in close") {
		t.Errorf("a Close that never returned passed: %v", r.Violations)
	}

	b, _, wx, _ := build()
	wx.Acq.Ret = ms(4000)
	if r := Check(b.h, bounds); !has(r, "liveness of shutdown") {
		t.Errorf("the holder's waiter served at the TTL passed: %v", r.Violations)
	}
	b, _, _, wy := build()
	wy.Acq.Ret = ms(4000)
	if r := Check(b.h, bounds); !has(r, "liveness of shutdown") {
		t.Errorf("the waiter of a cut call's name served at the TTL passed: %v", r.Violations)
	}
}

// A holder and the first waiter in its queue die together (one SIGKILL
// instant): the waiter left is measured, against fast failover's bound for
// a fast-failover holder and the expiry bound for a plain one, and served
// late it breaks the bound. A waiter killed after a release that woke it
// is another matter (the others wait until they look again): not
// measured.
func TestCheckDoubleDeath(t *testing.T) {
	build := func(m Mode) (*hist, *Lease) {
		b := newHist()
		b.acquire(1, CmdTry, m, "y", 1, 100, 110)
		b.op(2, CmdAcquire, m, []string{"y"}, 200, -1) // the first waiter, killed with the holder
		w := b.acquire(3, CmdAcquire, m, "y", 2, 210, 1100)
		b.fault(FaultKill, 1, 1000, 1001)
		b.fault(FaultKill, 2, 1000, 1002)
		return b, w
	}
	for _, tc := range []struct {
		mode     Mode
		event    string
		ok, late int
	}{{Fast, EvFast, 1100, 3000}, {Plain, EvExpiry, 9000, 10500}} {
		b, w := build(tc.mode)
		w.Acq.Ret = ms(tc.ok)
		r := Check(b.h, bounds)
		var got []Latency
		for _, l := range r.Latencies {
			if l.Topology.Event != EvFree {
				got = append(got, l)
			}
		}
		if !r.OK() || r.Measured != 1 || len(got) != 1 || got[0].Topology.Event != tc.event || got[0].D != time.Duration(ms(tc.ok-1000)) {
			t.Fatalf("%v holder and first waiter killed, the second served %d ms later: %v, measured %d, %+v",
				tc.mode, tc.ok-1000, r.Violations, r.Measured, got)
		}
		w.Acq.Ret = ms(tc.late)
		if r := Check(b.h, bounds); !has(r, "liveness of "+tc.event) {
			t.Errorf("%v holder and first waiter killed, the second served %d ms later: passed: %v", tc.mode, tc.late-1000, r.Violations)
		}
	}

	// The first waiter asked for no fast failover: it may have taken the
	// name before it died, a plain lease that lives until it expires: the
	// expiry bound, and counted.
	b, w := build(Fast)
	b.h.Ops[1].Mode = Plain
	w.Acq.Ret = ms(4000)
	if r := Check(b.h, bounds); !r.OK() || len(r.Open) != 1 {
		t.Errorf("a double death with a plain first waiter, taken over at the row's expiry: %v, open %v", r.Violations, r.Open)
	}

	b = newHist()
	h := b.acquire(1, CmdTry, Plain, "y", 1, 100, 110)
	b.op(2, CmdAcquire, Plain, []string{"y"}, 200, -1)
	b.acquire(3, CmdAcquire, Plain, "y", 2, 210, 5500)
	b.release(h, 1000, 1005)
	b.fault(FaultKill, 2, 1050, 1051) // after the release woke it
	if r := Check(b.h, bounds); !r.OK() || r.Measured != 0 {
		t.Errorf("a waiter killed after the release that woke it: %v, measured %d", r.Violations, r.Measured)
	}
}

// An upgrade under agents of the previous release: an old agent's set
// refused by the fence after the upgrade began is expected (not a new
// agent's, nor one before the upgrade), and an old agent's fast-failover
// lease is held to the expiry bound (its row carries the earlier form of
// the server incarnation), a new agent's to fast failover's.
func TestCheckUpgrade(t *testing.T) {
	build := func(proc int, upgrade int) (*hist, *Op) {
		b := newHist()
		b.h.Procs[0].Old, b.h.Procs[1].Old = true, true
		b.h.Upgrade = ms(upgrade)
		o := b.op(proc, CmdTryAll, Plain, []string{"m", "n"}, 1000, 1010)
		o.Err = &ErrInfo{Msg: `pglease: acquire the set ["m" "n"]: ERROR: table s.leases has schema version 9, and ` + fencedMsg + ` in it (SQLSTATE P0001)`}
		return b, o
	}
	b, _ := build(1, 500)
	if r := Check(b.h, bounds); !r.OK() || r.Fenced != 1 {
		t.Errorf("an old agent's set refused by the fence after the upgrade: %v, fenced %d", r.Violations, r.Fenced)
	}
	b, _ = build(3, 500)
	if r := Check(b.h, bounds); !has(r, "unexpected error in tryall") {
		t.Errorf("a new agent's set refused by the fence passed: %v", r.Violations)
	}
	b, _ = build(1, 0)
	if r := Check(b.h, bounds); !has(r, "unexpected error in tryall") {
		t.Errorf("an old agent's set refused without an upgrade passed: %v", r.Violations)
	}

	for _, tc := range []struct {
		holder int
		want   string
	}{{1, ""}, {3, "liveness of fast-failover"}} {
		b := newHist()
		b.h.Procs[0].Old = true
		b.h.Upgrade = ms(50)
		b.acquire(tc.holder, CmdTry, Fast, "y", 1, 100, 110)
		b.acquire(4, CmdAcquire, Fast, "y", 2, 200, 3500)
		b.fault(FaultKill, tc.holder, 1000, 1001)
		r := Check(b.h, bounds)
		if tc.want == "" && !r.OK() {
			t.Errorf("an old agent's fast-failover lease taken over at its expiry: %v", r.Violations)
		}
		if tc.want != "" && !has(r, tc.want) {
			t.Errorf("a new agent's fast-failover lease taken over at its expiry passed: %v", r.Violations)
		}
	}
}

// A name a killed plain holder's row still holds on the server leaves no
// room for a waiter until it expires: a release of another shared holder
// beside it is not measured (seed 463608: measured as a 2.3 s hand-off,
// the killed holder's row expiring then).
func TestCheckAKilledHoldersRowLeavesNoRoom(t *testing.T) {
	b := newHist()
	b.acquire(1, CmdTry, Shared, "c#0", 1, 100, 110)
	s := b.acquire(2, CmdTry, Shared, "c#1", 2, 120, 130)
	b.acquire(3, CmdAcquire, Plain, "c", 3, 150, 3200)
	b.fault(FaultKill, 1, 160, 190)
	b.release(s, 890, 900)
	if r := Check(b.h, bounds); !r.OK() || r.Unmeasured["no room: other holders"] != 2 {
		t.Fatalf("a release beside a killed shared holder's row: %v, unmeasured %v", r.Violations, r.Unmeasured)
	}
}
