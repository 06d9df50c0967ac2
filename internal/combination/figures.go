package combination

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/pglease/pglease/internal/linhist"
)

// Figures add up the sequences of a run for its closing summary.
type Figures struct {
	Seeds      []uint64
	Sequences  int
	Steps      int
	Faults     map[string]int
	Violations int
	Kinds      map[string]int // violations by kind
	Latencies  map[Topology][]time.Duration
	Measured   int
	MeasuredQ  int // of those, a quota's
	Unmeasured map[string]int
	Allowed    int
	Slow       []string // within the slack, over the specification's bound
	Stale      [2]int   // stale guarded writes: rejected, attempted
	Upgrades   int      // sequences that began with agents of the previous release
	Fenced     int      // their sets the fence refused after the upgrade
	InFlight   int      // their single acquisitions the fence refused, in flight across the upgrade
	Quota      int      // refusals between a quota and another kind
	OldQuota   []string // what the agents of the previous release said, refused by a quota (each once)
	Open       []string // take-overs after a double death whose first waiter, without fast failover, may have taken the name before it died (held to the expiry bound), over fast failover's bound
}

// Add counts one sequence.
func (f *Figures) Add(h *History, r Report) {
	if f.Faults == nil {
		f.Faults, f.Kinds, f.Unmeasured = map[string]int{}, map[string]int{}, map[string]int{}
		f.Latencies = map[Topology][]time.Duration{}
	}
	f.Sequences++
	f.Steps += len(h.Steps)
	for _, x := range h.Faults {
		f.Faults[x.Kind]++
	}
	f.Violations += len(r.Violations)
	for _, v := range r.Violations {
		f.Kinds[v.Kind]++
	}
	for _, l := range r.Latencies {
		f.Latencies[l.Topology] = append(f.Latencies[l.Topology], l.D)
	}
	f.Measured += r.Measured
	f.MeasuredQ += r.MeasuredQuota
	for why, n := range r.Unmeasured {
		f.Unmeasured[why] += n
	}
	f.Allowed += r.AllowedOverlaps
	f.Slow = append(f.Slow, r.Slow...)
	f.Stale[0] += r.StaleRejected
	f.Stale[1] += r.StaleAttempts
	if h.Upgrade != 0 {
		f.Upgrades++
	}
	f.Fenced += r.Fenced
	f.InFlight += r.FencedInFlight
	f.Quota += r.QuotaRefusals
	for _, m := range r.OldQuota {
		if !slices.Contains(f.OldQuota, m) {
			f.OldQuota = append(f.OldQuota, m)
		}
	}
	f.Open = append(f.Open, r.Open...)
}

// String is the summary: totals, then one line of latencies per topology.
func (f *Figures) String() string {
	var b strings.Builder
	faults, total := countList(f.Faults)
	fmt.Fprintf(&b, "combination: %d sequences (seeds %s), %d steps, %d faults (%s), %d violations %s\n",
		f.Sequences, seedList(f.Seeds), f.Steps, total, faults, f.Violations, kindList(f.Kinds))
	skipped, n := countList(f.Unmeasured)
	fmt.Fprintf(&b, "  names freed with a waiter: %d measured (%d of a quota), %d not (%s); overlaps in the documented window %d; stale guarded writes rejected %d of %d\n",
		f.Measured, f.MeasuredQ, n, skipped, f.Allowed, f.Stale[0], f.Stale[1])
	fmt.Fprintf(&b, "  upgrades under agents of the previous release: %d sequences, %d of their sets refused by the fence, %d of their single acquisitions (in flight across the upgrade)\n",
		f.Upgrades, f.Fenced, f.InFlight)
	fmt.Fprintf(&b, "  refusals between a quota and another kind on a name: %d; what the previous release's agents said, refused by a quota: %d\n",
		f.Quota, len(f.OldQuota))
	for _, m := range f.OldQuota {
		fmt.Fprintf(&b, "    %s\n", m)
	}
	var topos []Topology
	for t := range f.Latencies {
		topos = append(topos, t)
	}
	sort.Slice(topos, func(i, j int) bool {
		a, b := topos[i], topos[j]
		if a.Event != b.Event {
			return a.Event < b.Event
		}
		if a.HolderGot != b.HolderGot {
			return a.HolderGot < b.HolderGot
		}
		return a.Waiters < b.Waiters
	})
	fmt.Fprintf(&b, "  %-14s %-18s %-29s %s\n", "event", "holder had it by", "waiters", "latency to the waiter's return")
	for _, t := range topos {
		fmt.Fprintf(&b, "  %-14s %-18s %-29s %s\n", t.Event, t.HolderGot, t.Waiters, Stats(f.Latencies[t]))
	}
	fmt.Fprintf(&b, "  a plain first waiter's grant outlived it (held to the expiry bound), over fast failover's: %d\n", len(f.Open))
	for _, s := range f.Open {
		fmt.Fprintf(&b, "    %s\n", s)
	}
	fmt.Fprintf(&b, "  over the specification's bound, within the slack: %d\n", len(f.Slow))
	for _, s := range f.Slow {
		fmt.Fprintf(&b, "    %s\n", s)
	}
	return b.String()
}

// Stats summarises durations as "p50 X, p99 Y, max Z (n N)".
func Stats(ds []time.Duration) string {
	if len(ds) == 0 {
		return "n 0"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
	return fmt.Sprintf("p50 %v, p99 %v, max %v (n %d)", r(q(0.5)), r(q(0.99)), r(s[len(s)-1]), len(s))
}

func countList(m map[string]int) (string, int) {
	var ks []string
	total := 0
	for k, n := range m {
		ks = append(ks, fmt.Sprintf("%s %d", k, n))
		total += n
	}
	sort.Strings(ks)
	return strings.Join(ks, ", "), total
}

func kindList(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	s, _ := countList(m)
	return "(" + s + ")"
}

func seedList(seeds []uint64) string {
	if len(seeds) > 12 {
		return fmt.Sprintf("%d … %d", seeds[0], seeds[len(seeds)-1])
	}
	var s []string
	for _, x := range seeds {
		s = append(s, fmt.Sprint(x))
	}
	return strings.Join(s, " ")
}

// RegisterOps turns a history into operations on fenced registers, one
// register per lease row, for the external linearizability checker:
// every acquisition, every release, every guarded write (committed or not,
// as the register's log says), and every read of a register.
func RegisterOps(h *History) []linhist.Op {
	var out []linhist.Op
	for _, l := range h.Leases {
		out = append(out, linhist.Op{Op: linhist.Acquire, Key: l.Row, Token: l.Token, Client: l.Proc, Call: l.Acq.Called(), Return: l.Acq.Ret})
		if l.RelCall != 0 {
			out = append(out, linhist.Op{Op: linhist.Release, Key: l.Row, Token: l.Token, Client: l.Proc, Call: l.RelCall, Return: l.RelRet})
		}
	}
	for _, o := range h.Ops {
		switch {
		case (o.Kind == CmdGuard || o.Kind == OpStaleGuard) && o.Target != nil:
			outcome := linhist.Rejected
			if o.Committed {
				outcome = linhist.OK
			}
			out = append(out, linhist.Op{Op: linhist.Write, Key: o.Target.Row, Token: o.Target.Token, Value: o.Value, Guarded: true,
				Outcome: outcome, Client: o.Proc, Call: o.Called(), Return: o.Ret})
		case o.Kind == OpRead && o.Ret != 0:
			out = append(out, linhist.Op{Op: linhist.Read, Key: o.Names[0], Value: o.Value, Client: o.Proc, Call: o.Call, Return: o.Ret})
		}
	}
	return out
}
