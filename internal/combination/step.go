package combination

import (
	"fmt"
	"strings"
	"time"
)

// Mode is how a step acquires a name: a plain (exclusive) lease, fast
// failover, a semaphore's slot, a shared lease, units of a quota, or one
// of those with fast failover. (Regression cases name modes by ident:
// new modes go at the end.)
type Mode int

// The modes.
const (
	Plain Mode = iota
	Fast
	Slots2
	Slots3
	FastSlots2
	FastSlots3
	Shared
	FastShared
	// Quota3W1 and Quota3W2 take 1 and 2 units of a quota of 3
	// (WithQuota(3, w)); FastQuota3W1 and FastQuota3W2 with fast failover.
	Quota3W1
	Quota3W2
	FastQuota3W1
	FastQuota3W2
)

var modeNames = [...]string{"plain", "fast", "slots2", "slots3", "fast-slots2", "fast-slots3", "shared", "fast-shared",
	"quota3w1", "quota3w2", "fast-quota3w1", "fast-quota3w2"}

func (m Mode) String() string { return modeNames[m] }

// Slots is the mode's slot count: 1 for a lease on the name itself (and
// for a quota's holder, whose kind Quota tells), 0 for a shared lease.
func (m Mode) Slots() int {
	switch m {
	case Slots2, FastSlots2:
		return 2
	case Slots3, FastSlots3:
		return 3
	case Shared, FastShared:
		return 0
	}
	return 1
}

// Fast reports whether the mode asks for fast failover.
func (m Mode) Fast() bool {
	return m == Fast || m == FastSlots2 || m == FastSlots3 || m == FastShared || m == FastQuota3W1 || m == FastQuota3W2
}

// Quota is the capacity of the quota the mode takes units of (0: not a
// quota).
func (m Mode) Quota() int {
	switch m {
	case Quota3W1, Quota3W2, FastQuota3W1, FastQuota3W2:
		return 3
	}
	return 0
}

// Weight is the units of its quota the mode takes (0: not a quota).
func (m Mode) Weight() int {
	switch m {
	case Quota3W1, FastQuota3W1:
		return 1
	case Quota3W2, FastQuota3W2:
		return 2
	}
	return 0
}

// Unquota is what an agent of the previous release makes of the mode,
// knowing no quota: a plain lease, fast failover or not; other modes as
// they are.
func (m Mode) Unquota() Mode {
	switch {
	case m.Quota() == 0:
		return m
	case m.Fast():
		return Fast
	}
	return Plain
}

// Shared reports whether the mode asks for a shared lease.
func (m Mode) Shared() bool { return m == Shared || m == FastShared }

// Action is what a step does.
type Action string

// The actions. Acquire and AcquireAll return at once (the call goes on in
// its agent, up to Step.For); every other step waits for its outcome, and
// a step that frees a name (release, step-down, a fault on its holder)
// waits, within the bound that applies, until a waiter has taken it.
const (
	DoAcquire    Action = "acquire"     // Client.Acquire, blocking up to For
	DoTry        Action = "try"         // Client.TryAcquire
	DoAll        Action = "all"         // Client.AcquireAll of Names, blocking up to For
	DoTryAll     Action = "tryall"      // Client.TryAcquireAll of Names
	DoRelease    Action = "release"     // the agent's oldest live lease on Name
	DoGuard      Action = "guard"       // a fenced write with the agent's live lease on Name
	DoStaleGuard Action = "stale-guard" // a fenced write with the agent's latest ended lease on Name
	DoRead       Action = "read"        // the driver reads the registers of Name's rows
	DoStepDown   Action = "stepdown"    // the agent asks the holder of Name to step down
	DoAwait      Action = "await"       // wait until every waiter for Name has looked at it once
	DoSleep      Action = "sleep"       // let For pass
	DoKill       Action = "kill"        // SIGKILL the agent's process; a new one takes its place
	DoPause      Action = "pause"       // SIGSTOP the agent for For: its leases expire
	DoPartition  Action = "partition"   // cut the agent's network for For
	DoTerminate  Action = "terminate"   // pg_terminate_backend of the agent's client's backends
	DoDelay      Action = "delay"       // delay the agent's traffic by For from now on (0: no more)
	DoRestart    Action = "restart"     // restart the server (Name: "fast" or "immediate")
	DoStatsReset Action = "stats-reset" // an operator resets every statistic that can be reset
	DoReset      Action = "reset"       // the agent's connections fail on its side only (a middlebox reset): its backends live on
	// DoShutdown shuts the agent down as a service does (SIGTERM): it
	// starts a blocking acquisition of Names (AcquireAll for two or more,
	// else Acquire in Mode), and For after its first statement left it
	// cuts the context of every call in flight and closes its client at
	// once; a new process takes its place.
	DoShutdown Action = "shutdown"
	// DoDoubleKill SIGKILLs, in the same instant, the holder of Name
	// (Agent, as a rule Holder) and the process of the first live waiter
	// for Name in another process (the oldest blocking acquisition of it
	// still waiting): a holder and the first waiter in its queue that die
	// together, as when one node ran both. New processes take both places.
	DoDoubleKill Action = "double-kill"
	// DoUpgrade brings agents of this version into the slots that agents
	// of the previous release left empty (a sequence with config.Old):
	// they open their clients and migrate the table to this version at
	// once, under the old agents, which go on.
	DoUpgrade Action = "upgrade"
)

// Targets a Step's Agent may name instead of an agent, found when the
// step runs: Holder, the agent of the oldest live lease on the step's
// Name; Ended, the agent of the lease on Name that ended last (for a
// stale write).
const (
	Holder = -1
	Ended  = -2
)

// Step is one step of a sequence. Steps name their targets (an agent, a
// name), not leases or tokens, so that a sequence replays and shrinks:
// a step whose target is missing when it runs does nothing.
type Step struct {
	Do    Action
	Agent int
	Name  string
	Names []string // sets
	Mode  Mode
	For   time.Duration
	// Hold is an acquisition's maximum hold (WithMaxHold), 0 for none: the
	// lease ends by itself then, and frees the name for a waiter.
	Hold time.Duration
}

func (s Step) agent() string {
	switch s.Agent {
	case Holder:
		return "holder(" + s.Name + ")"
	case Ended:
		return "ended(" + s.Name + ")"
	}
	return fmt.Sprintf("a%d", s.Agent)
}

func (s Step) String() string {
	switch s.Do {
	case DoAcquire, DoTry:
		out := fmt.Sprintf("%s %s %s %s", s.agent(), s.Do, s.Name, s.Mode)
		if s.Hold > 0 {
			out += fmt.Sprintf(" max-hold %v", s.Hold)
		}
		if s.Do == DoAcquire {
			out += fmt.Sprintf(" (up to %v)", s.For)
		}
		return out
	case DoAll, DoTryAll:
		out := fmt.Sprintf("%s %s [%s]", s.agent(), s.Do, strings.Join(s.Names, " "))
		if s.Do == DoAll {
			out += fmt.Sprintf(" (up to %v)", s.For)
		}
		return out
	case DoRead, DoAwait:
		return fmt.Sprintf("%s %s", s.Do, s.Name)
	case DoSleep:
		return fmt.Sprintf("sleep %v", s.For)
	case DoRestart:
		return fmt.Sprintf("restart the server (%s)", s.Name)
	case DoStatsReset:
		return "reset the server's statistics"
	case DoUpgrade:
		return "agents of this version arrive and migrate the table"
	case DoShutdown:
		what := fmt.Sprintf("[%s]", strings.Join(s.Names, " "))
		if len(s.Names) == 1 {
			what = fmt.Sprintf("%s %s", s.Names[0], s.Mode)
		}
		return fmt.Sprintf("shut %s down %v into its acquisition of %s", s.agent(), s.For, what)
	case DoPause, DoPartition:
		return fmt.Sprintf("%s %s for %v", s.Do, s.agent(), s.For)
	case DoKill, DoTerminate, DoReset:
		return fmt.Sprintf("%s %s", s.Do, s.agent())
	case DoDoubleKill:
		return fmt.Sprintf("kill %s and the first waiter for %s at once", s.agent(), s.Name)
	case DoDelay:
		if s.For == 0 {
			return fmt.Sprintf("%s: no more delay", s.agent())
		}
		return fmt.Sprintf("delay %s's traffic by %v", s.agent(), s.For)
	}
	return fmt.Sprintf("%s %s %s", s.agent(), s.Do, s.Name)
}

// Literal is the step as a Go composite literal, for a regression case.
func (s Step) Literal() string {
	var f []string
	f = append(f, "Do: Do"+actionIdent[s.Do])
	switch s.Agent {
	case Holder:
		f = append(f, "Agent: Holder")
	case Ended:
		f = append(f, "Agent: Ended")
	case 0:
	default:
		f = append(f, fmt.Sprintf("Agent: %d", s.Agent))
	}
	if s.Name != "" {
		f = append(f, fmt.Sprintf("Name: %q", s.Name))
	}
	if len(s.Names) > 0 {
		f = append(f, fmt.Sprintf("Names: %#v", s.Names))
	}
	if s.Mode != Plain {
		f = append(f, "Mode: "+modeIdent[s.Mode])
	}
	switch {
	case s.For == 0:
	case s.For%time.Millisecond != 0:
		f = append(f, fmt.Sprintf("For: %d * time.Microsecond", s.For.Microseconds()))
	default:
		f = append(f, fmt.Sprintf("For: %d * time.Millisecond", s.For.Milliseconds()))
	}
	if s.Hold != 0 {
		f = append(f, fmt.Sprintf("Hold: %d * time.Millisecond", s.Hold.Milliseconds()))
	}
	return "{" + strings.Join(f, ", ") + "}"
}

var actionIdent = map[Action]string{
	DoAcquire: "Acquire", DoTry: "Try", DoAll: "All", DoTryAll: "TryAll", DoRelease: "Release",
	DoGuard: "Guard", DoStaleGuard: "StaleGuard", DoRead: "Read", DoStepDown: "StepDown",
	DoAwait: "Await", DoSleep: "Sleep", DoKill: "Kill", DoPause: "Pause", DoPartition: "Partition",
	DoTerminate: "Terminate", DoRestart: "Restart", DoDelay: "Delay", DoStatsReset: "StatsReset",
	DoReset:      "Reset",
	DoShutdown:   "Shutdown",
	DoDoubleKill: "DoubleKill",
	DoUpgrade:    "Upgrade",
}

var modeIdent = [...]string{"Plain", "Fast", "Slots2", "Slots3", "FastSlots2", "FastSlots3", "Shared", "FastShared",
	"Quota3W1", "Quota3W2", "FastQuota3W1", "FastQuota3W2"}

// Listing formats steps one per line, numbered, and as a Go literal.
func Listing(steps []Step) string {
	var b strings.Builder
	for i, s := range steps {
		fmt.Fprintf(&b, "  %3d. %s\n", i+1, s)
	}
	b.WriteString("  as a regression case: []Step{\n")
	for _, s := range steps {
		fmt.Fprintf(&b, "  \t%s,\n", s.Literal())
	}
	b.WriteString("  }\n")
	return b.String()
}
