package combination

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// names are the names every sequence works on.
var names = []string{"a", "b", "c", "d"}

// waitLimit is how long a waiter of an episode waits: past every bound, so
// that it is still waiting when its turn comes.
const waitLimit = 20 * time.Second

// generator chooses the steps of a random sequence from its seed and
// from what the run has done so far (who holds what), in episodes: a
// name, its holders and waiters (one or many, in one client or many), a
// guarded write, then one or two events that free the name (a release, a
// step-down, a fault on the holder), and what follows; with other steps
// between episodes. The steps it chose are the sequence's replayable
// form.
type generator struct {
	rng      *rand.Rand
	home     map[string]Mode // the mode each name is mostly used in
	agents   int
	restarts int // left: at most one per sequence, and only on a cluster of our own
	plan     []Step
	// old is how many agents of the previous release the sequence begins
	// with (config.Old; 0: none), upgraded whether DoUpgrade is planned:
	// until then the steps go to the old agents only.
	old      int
	upgraded bool
}

func newGenerator(seed uint64, agents int) *generator {
	g := &generator{rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)), agents: agents, home: map[string]Mode{}}
	if pgtest.Cluster() != nil {
		g.restarts = 1
	}
	// A fast-failover name, a semaphore or a quota, any mode, and shared
	// leases.
	g.home["a"] = g.pickMode(Fast, Fast, Plain)
	g.home["b"] = g.pickMode(Slots2, Slots3, FastSlots2, FastSlots3)
	if g.chance(0.35) {
		g.home["b"] = g.pickMode(quotaModes...)
	}
	g.home["c"] = g.pickMode(allModes...)
	g.home["d"] = g.pickMode(Shared, FastShared)
	if g.chance(0.25) {
		// An upgrade under agents of the previous release: two of them
		// create the table, hold and wait; then the others arrive.
		g.old = 2
	}
	return g
}

// next returns the sequence's next step.
func (g *generator) next(s *sequence) Step {
	for len(g.plan) == 0 {
		g.plan = g.episode(s)
		if g.old > 0 && !g.upgraded {
			// The agents of this version arrive once the old agents'
			// waiters of the first episode are queued, before what frees
			// the name.
			g.upgraded = true
			i := slices.IndexFunc(g.plan, func(st Step) bool { return st.Do == DoAwait }) + 1
			up := []Step{{Do: DoUpgrade}}
			if g.chance(0.5) {
				// An old agent's set, which the fence refuses from now on.
				up = append(up, Step{Do: DoTryAll, Agent: g.rng.IntN(g.old), Names: []string{"a", "c"}})
			}
			if g.chance(0.6) && g.agents > g.old {
				up = append(up, g.quotaMeetsOld()...)
			}
			g.plan = slices.Insert(g.plan, i, up...)
		}
	}
	st := g.plan[0]
	g.plan = g.plan[1:]
	return st
}

// quotaMeetsOld has an agent of this version take units of a quota (of a
// name whose home is a quota, or of c), and agents of the previous
// release, which know no quota, try the name and wait for it in other
// kinds: their acquisitions meet the quota's holder as another kind.
func (g *generator) quotaMeetsOld() []Step {
	n, m := "c", g.pickMode(quotaModes...)
	for _, x := range names {
		if g.home[x].Quota() > 0 {
			n, m = x, g.home[x]
		}
	}
	return []Step{
		{Do: DoTry, Agent: g.old + g.rng.IntN(g.agents-g.old), Name: n, Mode: m},
		{Do: DoTry, Agent: g.rng.IntN(g.old), Name: n, Mode: g.pickMode(Plain, Fast, Shared, Slots3)},
		{Do: DoAcquire, Agent: g.rng.IntN(g.old), Name: n, Mode: g.pickMode(Plain, FastShared, FastSlots2), For: 2 * time.Second},
	}
}

func (g *generator) chance(p float64) bool { return g.rng.Float64() < p }

func (g *generator) agent() int {
	if g.old > 0 && !g.upgraded {
		return g.rng.IntN(g.old)
	}
	return g.rng.IntN(g.agents)
}

func (g *generator) pickMode(ms ...Mode) Mode { return ms[g.rng.IntN(len(ms))] }

// hold is an acquisition's maximum hold: now and then one of 1 to 2.5 s
// (the TTL is 3 s), which ends the lease by itself and hands the name on.
func (g *generator) hold() time.Duration {
	if g.chance(0.12) {
		return g.ms(1000, 2500)
	}
	return 0
}

func (g *generator) ms(lo, hi int) time.Duration {
	return time.Duration(lo+g.rng.IntN(hi-lo)) * time.Millisecond
}

// The modes, and the quota's.
var (
	allModes = []Mode{Plain, Fast, Slots2, Slots3, FastSlots2, FastSlots3, Shared, FastShared,
		Quota3W1, Quota3W2, FastQuota3W1, FastQuota3W2}
	quotaModes = []Mode{Quota3W1, Quota3W2, FastQuota3W1, FastQuota3W2}
)

// mode is the mode of a step on name: mostly its home mode; sometimes
// with or without fast failover, another slot count (which the library
// refuses with a KindError while slots are held), another weight of a
// quota, or another kind (a lease on the name beside a semaphore or a
// quota of that name, which it must refuse too).
func (g *generator) mode(name string) Mode {
	m := g.home[name]
	switch x := g.rng.Float64(); {
	case x < 0.72:
		return m
	case x < 0.86:
		return toggleFast(m)
	case x < 0.92 && m.Slots() > 1:
		return g.pickMode(Slots2, Slots3, FastSlots2, FastSlots3)
	case x < 0.92 && m.Shared():
		// Shared leases' exclusive counterpart on the same name.
		return g.pickMode(Plain, Fast)
	case x < 0.92 && m.Quota() > 0:
		return g.pickMode(quotaModes...)
	default:
		return g.pickMode(allModes...)
	}
}

func toggleFast(m Mode) Mode {
	return [...]Mode{Plain: Fast, Fast: Plain, Slots2: FastSlots2, Slots3: FastSlots3, FastSlots2: Slots2, FastSlots3: Slots3,
		Shared: FastShared, FastShared: Shared, Quota3W1: FastQuota3W1, Quota3W2: FastQuota3W2, FastQuota3W1: Quota3W1,
		FastQuota3W2: Quota3W2}[m]
}

// otherWeight is m with the quota's other weight, fast failover as m.
func otherWeight(m Mode) Mode {
	return map[Mode]Mode{Quota3W1: Quota3W2, Quota3W2: Quota3W1, FastQuota3W1: FastQuota3W2, FastQuota3W2: FastQuota3W1}[m]
}

// episode plans the next steps.
func (g *generator) episode(s *sequence) []Step {
	var out []Step
	for i := 0; i < 2 && g.chance(0.4); i++ {
		out = append(out, g.noise())
	}
	name := names[g.rng.IntN(len(names))]
	mode := g.mode(name)
	s.mu.Lock()
	lives := s.liveLeases(name)
	s.mu.Unlock()
	live := len(lives)
	holders := mode.Slots()
	if mode.Shared() {
		holders = 1 + g.rng.IntN(2) // shared holders, which an exclusive waiter waits for together
	}
	if mode.Quota() > 0 {
		// A quota's holders fill it, of one weight or both.
		units := 0
		for _, l := range lives {
			units += l.Weight
		}
		for units < mode.Quota() {
			m := mode
			if g.chance(0.3) {
				m = otherWeight(m)
			}
			if units+m.Weight() > mode.Quota() {
				m = otherWeight(m) // (1 unit: it fits)
			}
			out = append(out, Step{Do: DoTry, Agent: g.agent(), Name: name, Mode: m, Hold: g.hold()})
			units += m.Weight()
		}
		holders = 0
	}
	for i := live; i < holders; i++ {
		out = append(out, Step{Do: DoTry, Agent: g.agent(), Name: name, Mode: mode, Hold: g.hold()})
	}
	w, one := g.agent(), g.chance(0.35)
	var waiting []int // the waiters' agents, each once
	for range 1 + g.rng.IntN(3) {
		a := w
		if !one {
			a = g.agent()
		}
		if !slices.Contains(waiting, a) {
			waiting = append(waiting, a)
		}
		wm := mode
		switch {
		case mode.Quota() > 0 && g.chance(0.35):
			// A quota's waiters of both weights, first in line first.
			wm = otherWeight(mode)
		case mode.Shared() && g.chance(0.6):
			// Behind shared holders, an exclusive waiter (shared ones
			// would join them at once, unless one queues first).
			wm = g.pickMode(Plain, Fast)
		case !g.chance(0.8):
			wm = g.mode(name)
		}
		out = append(out, Step{Do: DoAcquire, Agent: a, Name: name, Mode: wm, For: waitLimit, Hold: g.hold()})
	}
	out = append(out, Step{Do: DoAwait, Name: name})
	if g.chance(0.5) {
		out = append(out, Step{Do: DoGuard, Agent: Holder, Name: name})
	}
	slow := -1
	if g.chance(0.15) {
		// A slow client (its traffic delayed) for the rest of the episode.
		slow = g.agent()
		out = append(out, Step{Do: DoDelay, Agent: slow, For: g.ms(20, 150)})
	}
	out = append(out, g.resetBefore(g.opening(name, mode, false, len(waiting)), mode)...)
	if g.chance(0.75) {
		// The new holder, however it got the name, is freed in turn.
		if g.chance(0.5) {
			out = append(out, Step{Do: DoSleep, For: g.ms(50, 800)})
		}
		if g.chance(0.5) {
			out = append(out, Step{Do: DoGuard, Agent: Holder, Name: name})
		}
		out = append(out, g.resetBefore(g.opening(name, mode, true, len(waiting)), mode)...)
	}
	if slow >= 0 {
		out = append(out, Step{Do: DoDelay, Agent: slow})
	}
	if g.chance(0.5) {
		out = append(out, Step{Do: DoStaleGuard, Agent: Ended, Name: name})
	}
	if g.chance(0.3) {
		out = append(out, Step{Do: DoRead, Name: name})
	}
	if g.chance(0.3) {
		for range 3 {
			out = append(out, Step{Do: DoRelease, Agent: Holder, Name: name})
		}
	}
	return out
}

// resetBefore returns the opening op, now and then after an operator's
// statistics reset when op ends a fast-failover holder's session: the
// hand-off that follows is bound by fast failover's bound all the same.
func (g *generator) resetBefore(op Step, m Mode) []Step {
	if m.Fast() && (op.Do == DoKill || op.Do == DoTerminate) && g.chance(0.3) {
		return []Step{{Do: DoStatsReset}, op}
	}
	return []Step{op}
}

// opening is an event that frees name: fast-failover names see more of
// the faults that end a session, the more so for a second holder. With
// waiters in two agents or more, the holder and the first waiter may die
// together (the one left takes over: fast failover's bound for a
// fast-failover holder, the expiry bound for a plain one).
func (g *generator) opening(name string, m Mode, second bool, waiting int) Step {
	type choice struct {
		w  int
		st Step
	}
	hold := g.agent()
	cs := []choice{
		{30, Step{Do: DoRelease, Agent: Holder, Name: name}},
		{15, Step{Do: DoStepDown, Agent: hold, Name: name}},
		{15, Step{Do: DoKill, Agent: Holder, Name: name}},
		{8, Step{Do: DoTerminate, Agent: Holder, Name: name}},
		{3, Step{Do: DoReset, Agent: Holder, Name: name}},
		{8, Step{Do: DoPause, Agent: Holder, Name: name, For: short.TTL + g.ms(500, 1500)}},
		{8, Step{Do: DoPartition, Agent: Holder, Name: name, For: short.TTL + g.ms(500, 1500)}},
		{10, g.shutdown(name)},
	}
	switch {
	case m.Fast() && second:
		cs[2].w, cs[3].w, cs[4].w = 60, 30, 20
	case m.Fast():
		cs[2].w, cs[3].w, cs[4].w = 30, 15, 10
	}
	if waiting >= 2 {
		w := 8
		if m.Fast() {
			w = 30
		}
		cs = append(cs, choice{w, Step{Do: DoDoubleKill, Agent: Holder, Name: name}})
	}
	if g.restarts > 0 {
		cs = append(cs, choice{4, Step{Do: DoRestart, Name: [...]string{"fast", "immediate"}[g.rng.IntN(2)]}})
	}
	total := 0
	for _, c := range cs {
		total += c.w
	}
	x := g.rng.IntN(total)
	for _, c := range cs {
		if x -= c.w; x < 0 {
			if c.st.Do == DoRestart {
				g.restarts--
			}
			return c.st
		}
	}
	panic("unreachable")
}

// shutdown shuts the holder of name down in the middle of a call: a
// blocking acquisition of one name in any mode, or of a set, cut up to
// 2 ms after its statement left, while it may be in flight.
func (g *generator) shutdown(name string) Step {
	st := Step{Do: DoShutdown, Agent: Holder, Name: name, For: time.Duration(g.rng.IntN(2000)) * time.Microsecond}
	if g.chance(0.35) {
		st.Names = []string{"a", "c"}
		if g.chance(0.5) {
			i := g.rng.IntN(3)
			st.Names = []string{names[i], names[(i+1+g.rng.IntN(2))%3]}
		}
		return st
	}
	n := names[g.rng.IntN(len(names))]
	st.Names, st.Mode = []string{n}, g.mode(n)
	return st
}

// noise is a step between episodes.
func (g *generator) noise() Step {
	name := names[g.rng.IntN(len(names))]
	switch x := g.rng.IntN(100); {
	case x < 30:
		return Step{Do: DoTry, Agent: g.agent(), Name: name, Mode: g.mode(name)}
	case x < 45:
		set := []string{"a", "c"}
		if g.chance(0.3) {
			set = []string{names[g.rng.IntN(3)], names[g.rng.IntN(3)]}
		}
		if set[0] == set[1] {
			set = set[:1]
		}
		if g.chance(0.5) {
			return Step{Do: DoTryAll, Agent: g.agent(), Names: set}
		}
		return Step{Do: DoAll, Agent: g.agent(), Names: set, For: g.ms(2000, 8000)}
	case x < 60:
		return Step{Do: DoGuard, Agent: g.agent(), Name: name}
	case x < 70:
		return Step{Do: DoRead, Name: name}
	case x < 85:
		return Step{Do: DoRelease, Agent: g.agent(), Name: name}
	case x < 95:
		return Step{Do: DoSleep, For: g.ms(50, 500)}
	}
	return Step{Do: DoStaleGuard, Agent: g.agent(), Name: name}
}
