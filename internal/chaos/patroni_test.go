package chaos

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/patroni"
)

// EnvHA selects the whole high-availability suite (make ha): every fault,
// synchronous and asynchronous replication, PGLEASE_HA_ROUNDS rounds
// (default 3). Without it TestPatroni runs the short variant: one
// switchover and one kill, synchronous replication.
const EnvHA = "PGLEASE_HA"

// haTTL is the holders' lease TTL in the HA suite: long enough for a
// plain lease to be renewed across a planned switchover, shorter than a
// crash failover takes (Patroni's ttl, 10 s here, plus the promotion).
// Critical sections (3–8 s) outlast a switchover, so that leases are held
// through it.
const haTTL = 10 * time.Second

// haFault is one way of making Patroni change the primary.
type haFault struct {
	// inject acts on the primary; heal undoes what inject did to it once a
	// new primary serves (nil: nothing to undo).
	inject func(ctx context.Context, c *patroni.Cluster, primary *patroni.Node) error
	heal   func(primary *patroni.Node) error
}

var haFaults = map[string]haFault{
	"switchover": {
		inject: func(ctx context.Context, c *patroni.Cluster, p *patroni.Node) error { return c.Switchover(ctx, p, nil) }},
	"kill": {
		inject: func(_ context.Context, _ *patroni.Cluster, p *patroni.Node) error { return p.Kill() },
		heal:   func(p *patroni.Node) error { return p.Start() }},
	// lagging-kill: the replicas fall haLagWindow behind, then the primary
	// crashes. Asynchronous replication loses what the window held;
	// synchronous replication holds its commits back instead.
	"lagging-kill": {
		inject: func(_ context.Context, _ *patroni.Cluster, p *patroni.Node) error {
			p.DelayReplication(true)
			time.Sleep(haLagWindow) // the fault itself: commits the replicas do not see
			return p.Kill()
		},
		heal: func(p *patroni.Node) error { p.DelayReplication(false); return p.Start() }},
	"partition": {
		inject: func(_ context.Context, _ *patroni.Cluster, p *patroni.Node) error { p.Partition(true); return nil },
		heal:   func(p *patroni.Node) error { p.Partition(false); return nil }},
}

// haLagWindow is how far behind the replicas fall before a lagging-kill.
const haLagWindow = 1500 * time.Millisecond

// haTally adds up the suite for its summary line.
type haTally struct {
	scenarios  map[string]bool // fault/replication/lease mode
	failovers  int
	violations int
	rows       []string
}

// TestPatroni runs plain and fast-failover holders, with waiters in other
// processes, against a real Patroni cluster (internal/patroni) while the
// primary changes: a planned switchover (patronictl), the primary's
// PostgreSQL and Patroni SIGKILLed, and the primary partitioned from
// clients, replicas and etcd. Both lease modes run at once, each in a
// schema of its own, through the same failovers. With synchronous
// replication the history must be clean (no overlap, tokens increasing
// across every failover, fenced writes in order, every name held again);
// with asynchronous replication what was lost is measured and reported.
// For every failover it measures how long each name had no holder and
// how long holders took to notice.
func TestPatroni(t *testing.T) {
	full := os.Getenv(EnvHA) != ""
	if err := patroni.Available(); err != nil {
		if full {
			t.Fatal(err)
		}
		t.Skipf("skipping the Patroni suite: %v", err)
	}
	rounds := 1
	plan := []string{"switchover", "kill"}
	repl := []bool{true}
	if full {
		rounds = 3
		if v, err := strconv.Atoi(os.Getenv("PGLEASE_HA_ROUNDS")); err == nil && v > 0 {
			rounds = v
		}
		plan = []string{"switchover", "kill", "partition", "lagging-kill"}
		repl = []bool{true, false}
	}
	if v := os.Getenv("PGLEASE_HA_FAULTS"); v != "" {
		plan = strings.Split(v, ",")
		for _, f := range plan {
			if _, ok := haFaults[f]; !ok {
				t.Fatalf("PGLEASE_HA_FAULTS: unknown fault %q: use switchover, kill, partition or lagging-kill, comma-separated", f)
			}
		}
	}
	if v := os.Getenv("PGLEASE_HA_REPLICATION"); v == "sync" || v == "async" {
		repl = []bool{v == "sync"}
	}
	tally := &haTally{scenarios: map[string]bool{}}
	for _, sync := range repl {
		t.Run(replName(sync), func(t *testing.T) { haSuite(t, sync, plan, rounds, tally) })
	}
	for _, row := range tally.rows {
		fmt.Println(row)
	}
	fmt.Printf("ha: %d scenarios, %d failovers, %d violations\n", len(tally.scenarios), tally.failovers, tally.violations)
}

func replName(sync bool) string {
	if sync {
		return "sync"
	}
	return "async"
}

// haSuite starts a cluster and both lease modes' holders, runs the plan
// rounds times and reports.
func haSuite(t *testing.T, sync bool, plan []string, rounds int, tally *haTally) {
	c := patroni.Start(t, patroni.Options{Sync: sync})
	dsn := c.DSN()
	runs := map[bool]*run{}
	for _, fast := range []bool{false, true} {
		runs[fast] = startRun(t, scenario{holders: 3, names: []string{"a", "b"}, dsn: dsn, admin: dsn,
			schema: strings.ReplaceAll(modeName(fast), "-", "_"), fast: fast, ttl: haTTL,
			csMin: 3 * time.Second, csMax: 8 * time.Second})
	}
	for _, r := range runs {
		r.waitBeliefs(10)
	}
	// The runs' tables (leases, fence) were created on the primary just
	// now: before any fault, every replica must have them, or the first
	// failover could promote a node without them (with asynchronous
	// replication nothing else makes sure of it). WaitHealthy checks that
	// every replica has replayed the primary's WAL.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	began := time.Now()
	if err := c.WaitHealthy(ctx); err != nil {
		cancel()
		t.Fatalf("the cluster was not healthy once the tables were created: %v\n%s", err, c.Logs())
	}
	cancel()
	t.Logf("every replica had replayed the tables' creation %v after the holders made progress", time.Since(began).Round(time.Millisecond))
	var faults []Fault
	for round := range rounds {
		for _, name := range plan {
			f := haFaults[name]
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			primary, err := c.WaitPrimary(ctx)
			if err != nil {
				cancel()
				t.Fatalf("%v\n%s", err, c.Logs())
			}
			start := Now()
			if err := f.inject(ctx, c, primary); err != nil {
				cancel()
				t.Fatalf("%s of %s: %v\n%s", name, primary.Name, err, c.Logs())
			}
			next, err := c.WaitPrimary(ctx, primary)
			if err != nil {
				cancel()
				t.Fatalf("after the %s of %s: %v\n%s", name, primary.Name, err, c.Logs())
			}
			fault := Fault{Kind: "patroni-" + name, Start: start, End: Now()}
			faults = append(faults, fault)
			t.Logf("round %d: %s: %s → %s, new primary writable after %v", round+1, name, primary.Name, next.Name,
				time.Duration(fault.End-fault.Start).Round(time.Millisecond))
			for _, r := range runs {
				r.mu.Lock()
				r.faults = append(r.faults, fault)
				r.mu.Unlock()
			}
			for _, r := range runs {
				r.waitProgress(fault.End)
			}
			if f.heal != nil {
				if err := f.heal(primary); err != nil {
					cancel()
					t.Fatal(err)
				}
			}
			if err := c.WaitHealthy(ctx); err != nil {
				cancel()
				t.Fatalf("the cluster did not recover from the %s: %v\n%s", name, err, c.Logs())
			}
			cancel()
			tally.failovers++
		}
	}
	for _, fast := range []bool{false, true} {
		r := runs[fast]
		opt := Options{Liveness: r.sc.ttl + 20*time.Second}
		rep, events := r.check(opt)
		if sync {
			r.judge(rep)
		}
		tally.violations += len(rep.Violations)
		for _, name := range plan {
			tally.scenarios[name+"/"+replName(sync)+"/"+modeName(fast)] = true
		}
		lost := lostWrites(events, r.writes())
		for _, name := range plan {
			m := measureFailovers(events, faults, "patroni-"+name, r.sc.names, opt.Liveness)
			var took []time.Duration
			for _, f := range faults {
				if f.Kind == "patroni-"+name {
					took = append(took, time.Duration(f.End-f.Start))
				}
			}
			row := fmt.Sprintf("ha: %-5s %-12s %-13s failovers %d  new primary after %s  unavailable %s  noticed %s  kept %d",
				replName(sync), name, modeName(fast), m.failovers, durStats(took), durStats(m.unavailable), durStats(m.noticed), m.kept)
			row += fmt.Sprintf("  reissued-tokens %d  lost-writes %d", m.reissued, lostBefore(lost, faults, "patroni-"+name))
			t.Log(row)
			tally.rows = append(tally.rows, row)
		}
		if sync && len(lost) > 0 {
			t.Errorf("%s: %d fenced writes that committed were missing after the failovers, with synchronous replication", modeName(fast), len(lost))
			tally.violations += len(lost)
		}
		if !sync {
			row := fmt.Sprintf("ha: async %s: %d failovers, %d violations, %d acknowledged fenced writes missing after the failovers",
				modeName(fast), len(faults), len(rep.Violations), len(lost))
			t.Log(row)
			if len(rep.Violations) > 0 {
				t.Logf("async %s violations (reported, not failed: the price of asynchronous replication):\n%s", modeName(fast), rep)
			}
			tally.rows = append(tally.rows, row)
		}
	}
}

// failoverMeasures are the measurements of a set of failovers.
type failoverMeasures struct {
	failovers   int
	unavailable []time.Duration // per failover and name: the longest time nobody held it
	noticed     []time.Duration // per lease held at the fault that ended by itself: fault start → its end
	kept        int             // leases held at the fault, renewed after the fault had failed one of their writes
	reissued    int             // acquisitions after a fault with a token not above one handed out before it
}

// span is one lease as its holder saw it.
type span struct {
	name     string
	tok      int64
	pid      int
	from, to int64 // Acquire's return; Release, Done or the local deadline, whichever came first
	ended    int64 // when it ended by itself (Done or the deadline before any Release), else 0
	renewed  []int64
	failed   []int64 // fenced writes that failed
}

// spans rebuilds every lease from the holders' events. A lease whose end
// was not recorded ends at its last event.
func spans(events []Event) []span {
	type key struct {
		name string
		tok  int64
		pid  int
	}
	type raw struct {
		span
		rel, done, last int64
	}
	by := map[key]*raw{}
	var order []key
	for _, e := range events {
		k := key{e.Name, e.Tok, e.Pid}
		s := by[k]
		if s == nil {
			if e.K != KindAcquired {
				continue
			}
			s = &raw{span: span{name: e.Name, tok: e.Tok, pid: e.Pid, from: e.T}}
			by[k] = s
			order = append(order, k)
		}
		s.last = max(s.last, e.T)
		switch e.K {
		case KindReleased:
			if s.rel == 0 {
				s.rel = e.T
			}
		case KindDone:
			if s.done == 0 {
				s.done = e.T
				if e.Dl > 0 && e.Dl < s.done {
					s.done = e.Dl
				}
			}
		case KindRenewed:
			s.renewed = append(s.renewed, e.T)
		case KindWrite:
			if !e.OK {
				s.failed = append(s.failed, e.T)
			}
		}
	}
	out := make([]span, 0, len(order))
	for _, k := range order {
		s := by[k]
		switch {
		case s.done > 0 && (s.rel == 0 || s.done < s.rel):
			s.to, s.ended = s.done, s.done
		case s.rel > 0:
			s.to = s.rel
		default:
			s.to = s.last
		}
		out = append(out, s.span)
	}
	return out
}

// measureFailovers measures the faults of one kind from the holders'
// events: per fault and name the longest time nobody held the name (from
// the last release or end before the fault, or during it, to the next
// acquisition), how long each lease held at the fault took to end by
// itself (how soon its holder noticed), how many such leases were kept
// (renewed after the fault had failed one of their writes), and how many acquisitions after
// a fault got a token not above one the old primary handed out. A fault's
// effects are looked for until window after it ended or until the next
// fault of any kind began, whichever is first; faults must be in order.
func measureFailovers(events []Event, faults []Fault, kind string, names []string, window time.Duration) failoverMeasures {
	var m failoverMeasures
	all := spans(events)
	for i, f := range faults {
		if f.Kind != kind {
			continue
		}
		m.failovers++
		until := f.End + int64(window)
		if i+1 < len(faults) {
			until = min(until, faults[i+1].Start)
		}
		for _, name := range names {
			var ss []span
			var maxBefore int64
			for _, s := range all {
				if s.name != name {
					continue
				}
				ss = append(ss, s)
				if s.from < f.End { // granted by the old primary
					maxBefore = max(maxBefore, s.tok)
				} else if s.from < until && s.tok <= maxBefore {
					m.reissued++
				}
			}
			m.unavailable = append(m.unavailable, longestGap(ss, f.Start, f.End, until))
		}
		for _, s := range all {
			if s.from >= f.Start || s.to <= f.Start {
				continue
			}
			// Kept: renewed after one of its writes had failed in the fault.
			i := slices.IndexFunc(s.failed, func(t int64) bool { return t >= f.Start })
			switch {
			case s.ended > 0 && s.ended <= until:
				m.noticed = append(m.noticed, time.Duration(s.ended-f.Start))
			case i >= 0 && slices.ContainsFunc(s.renewed, func(t int64) bool { return t > s.failed[i] }):
				m.kept++
			}
		}
	}
	return m
}

// longestGap returns the longest interval during which no span covered
// the time, among those that end after from and begin before healed (a
// gap that begins later is the holders' ordinary hand-off, not the
// fault's doing). A gap still open at the last span lasts until until.
func longestGap(ss []span, from, healed, until int64) time.Duration {
	slices.SortFunc(ss, func(a, b span) int { return cmp.Compare(a.from, b.from) })
	var longest time.Duration
	var covered int64 // end of the coverage so far
	for i, s := range ss {
		if i > 0 && s.from > covered && s.from > from && covered < healed {
			longest = max(longest, time.Duration(s.from-covered))
		}
		covered = max(covered, s.to)
	}
	if len(ss) > 0 && covered < healed {
		longest = max(longest, time.Duration(until-max(covered, from)))
	}
	return longest
}

// lostWrites returns the times of the fenced writes that holders saw
// commit but that are not in the resource's log afterwards: per name,
// token and holder, the latest acknowledged writes beyond the number the
// log kept (a failover keeps a prefix of the history).
func lostWrites(events []Event, ws []Write) []int64 {
	type key struct {
		name string
		tok  int64
		pid  int
	}
	acked, kept := map[key][]int64{}, map[key]int{}
	for _, e := range events {
		if e.K == KindWrite && e.OK {
			k := key{e.Name, e.Tok, e.Pid}
			acked[k] = append(acked[k], e.T)
		}
	}
	for _, w := range ws {
		kept[key{w.Name, w.Token, w.Pid}]++
	}
	var lost []int64
	for k, ts := range acked {
		if n := kept[k]; n < len(ts) {
			lost = append(lost, ts[n:]...)
		}
	}
	slices.Sort(lost)
	return lost
}

// lostBefore counts the times in lost that a fault of kind lost: those
// before its end (a lagging primary commits during the fault) and after
// the end of the fault before it (faults in order).
func lostBefore(lost []int64, faults []Fault, kind string) int {
	n := 0
	for _, t := range lost {
		i := slices.IndexFunc(faults, func(f Fault) bool { return f.End >= t })
		if i >= 0 && faults[i].Kind == kind {
			n++
		}
	}
	return n
}

// durStats summarises durations as "p50 X max Y (n N)".
func durStats(ds []time.Duration) string {
	if len(ds) == 0 {
		return "n/a"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("p50 %v max %v (n %d)", s[len(s)/2].Round(10*time.Millisecond), s[len(s)-1].Round(10*time.Millisecond), len(s))
}
