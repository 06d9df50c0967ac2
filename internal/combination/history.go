package combination

import (
	"strings"
	"time"
)

// History is what one sequence did, as the driver recorded it: every call
// its agents made (with the agents' own timestamps), every lease they
// got, every fault, and the fenced writes that committed. Times are wall
// clock, Unix nanoseconds, shared by every process on the machine.
type History struct {
	TTL, Poll  time.Duration
	Begin, End int64 // End: when the driver began stopping the agents
	// Upgrade is when agents of this version began to migrate a table an
	// earlier release's agents had created (0: no upgrade; see
	// config.Old).
	Upgrade   int64
	Ops       []*Op
	Leases    []*Lease // in the order the driver heard of them
	Faults    []Fault
	Procs     []*Proc
	Contended []Contention
	Steps     []StepRun
	// Log is the committed writes in commit order (the register's log).
	Log []LoggedWrite
}

// Op kinds beyond the agents' commands (see Command for those).
const (
	OpRead       = "read"        // the driver read a register
	OpStaleGuard = "stale-guard" // a guard with a lease that has ended
	// OpClose is a shutdown's Client.Close (Sent: when the agent was told
	// to shut down; Call, Ret: when Close was called and returned; Left:
	// the rows of the client the driver found held right after).
	OpClose = "close"
)

// Op is one call: sent by the driver, made and answered by an agent.
type Op struct {
	ID      int
	Proc    int    // the agent process
	Kind    string // a Command's Op, OpStaleGuard or OpRead
	Names   []string
	Mode    Mode
	Hold    time.Duration // an acquisition's maximum hold (0: none)
	Timeout time.Duration
	Sent    int64 // when the driver sent it
	Call    int64 // when the agent called (0: no reply; Sent bounds it)
	Ret     int64 // when it returned (0: never: its process died, or the run ended first)
	Leases  []*Lease
	Err     *ErrInfo
	// Target is the lease a release or guard acted on; Value what a guard
	// wrote or a read returned; Committed whether the guard's write is in
	// the register's log.
	Target    *Lease
	Value     int64
	Committed bool
	Left      []Granted
}

// Called is the earliest the call can have begun.
func (o *Op) Called() int64 {
	if o.Call != 0 {
		return o.Call
	}
	return o.Sent
}

// Returned reports whether the op returned by t.
func (o *Op) Returned(t int64) bool { return o.Ret != 0 && o.Ret <= t }

// Lease is one lease an agent held: a name's, a slot's, or one of a set's.
type Lease struct {
	Handle   int
	Proc     int
	Row      string // the lease's row ("x", "x#1")
	Resource string // what it excludes others from: the name without a slot suffix
	Slots    int    // 1: a lease on the name itself (also each lease of a set, and a quota's holder); 0: shared
	Session  bool   // session-bound (fast failover)
	Token    int64
	Acq      *Op
	// Quota is the capacity of the quota the lease holds Weight units of
	// (0: not a quota; Slots is 1 then).
	Quota, Weight int
	// Release: when the first release of it was called and returned (0:
	// never), its error, and whether it answered a step-down request or
	// was the Close of a shutdown.
	RelCall, RelRet int64
	RelErr          *ErrInfo
	StepDown        bool
	ByClose         bool
	// Done: when its Done fired, its local deadline then, and why.
	Done, DoneDl int64
	Cause        *ErrInfo
}

// Fast reports whether the lease was asked for WithFastFailover.
func (l *Lease) Fast() bool {
	return l.Acq.Kind != CmdAll && l.Acq.Kind != CmdTryAll && l.Acq.Mode.Fast()
}

// Start is when the holder began to believe in the lease.
func (l *Lease) Start() int64 { return l.Acq.Ret }

// Proc is one agent process.
type Proc struct {
	ID     int
	Agent  int // the agent slot it fills
	Owner  string
	Table  string // as it spells its table
	Start  int64
	Killed int64 // 0: not killed
	Closed int64 // when a shutdown called its client's Close (0: none)
	Old    bool  // an agent of the previous release (oldRelease)
}

// Fault kinds.
const (
	FaultKill      = "kill"
	FaultPause     = "pause"
	FaultPartition = "partition"
	FaultTerminate = "terminate"
	FaultReset     = "reset" // the agent's connections failed on its side only
	FaultRestart   = "restart"
	FaultDelay     = "delay" // the proxy delayed every chunk of the agent's traffic
	// FaultShutdown is a shutdown (DoShutdown): from when the agent was
	// told until its Close returned.
	FaultShutdown = "shutdown"
)

// Fault is one injected fault on one process (Proc 0: the server).
type Fault struct {
	Kind       string
	Proc       int
	Start, End int64
}

// Contention is an attempt of Proc that found Row held.
type Contention struct {
	Proc int
	Row  string
	T    int64
}

// StepRun is one executed step and when it ran.
type StepRun struct {
	Step       Step
	Start, End int64
}

// LoggedWrite is one committed fenced write, from the register's log.
type LoggedWrite struct {
	Seq   int64
	Cmd   int
	Row   string
	Token int64
	Value int64
}

// Resource is the name a row belongs to: a slot row's semaphore, or the
// row itself.
func Resource(row string) string {
	if i := strings.LastIndexByte(row, '#'); i > 0 {
		return row[:i]
	}
	return row
}

// end is when the holder stopped believing in l: its release call, its
// Done (or local deadline then, if earlier), its process's death, the
// call of its client's Close in a shutdown, or the end of the run,
// whichever came first.
func (h *History) end(l *Lease) int64 {
	e := h.End
	if h.End == 0 {
		e = 1<<63 - 1
	}
	for _, t := range []int64{l.RelCall, l.Done, l.DoneDl, h.proc(l.Proc).Killed, h.proc(l.Proc).Closed} {
		if t != 0 && t < e {
			e = t
		}
	}
	return e
}

// ended reports whether the holder knew by t that l had ended (released,
// or its Done fired, or its local deadline passed).
func (h *History) ended(l *Lease, t int64) bool {
	return (l.RelCall != 0 && l.RelCall <= t) || (l.Done != 0 && l.Done <= t) || (l.DoneDl != 0 && l.DoneDl <= t)
}

func (h *History) proc(id int) *Proc {
	for _, p := range h.Procs {
		if p.ID == id {
			return p
		}
	}
	return &Proc{ID: id}
}

// live returns the leases on resource that were held at t.
func (h *History) live(resource string, t int64) []*Lease {
	var out []*Lease
	for _, l := range h.Leases {
		if l.Resource == resource && l.Start() <= t && t < h.end(l) {
			out = append(out, l)
		}
	}
	return out
}
