package chaos

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// Event kinds recorded by holders.
const (
	KindAcquired = "acq"    // Acquire returned a lease (not yet a belief)
	KindBelief   = "b"      // a check found the lease held; T is taken before the check
	KindWrite    = "w"      // a guarded, fenced write; OK = committed, Msg = why not
	KindStale    = "stale"  // a check found Err() == nil after the local deadline
	KindResume   = "resume" // the holder found a gap (a pause) in its loop; OK = lease already ended
	KindStaleW   = "sw"     // a plain fenced write (no Guard) after a pause; OK = accepted
	KindLost     = "lost"   // the lease ended on its own (Msg = cause)
	KindReleased = "rel"    // the holder calls Release (it no longer believes in the lease)
	KindError    = "err"    // an acquire or write failed (Msg)
	KindStart    = "start"  // the holder process started
	KindWaiting  = "held"   // an attempt found the lease held by another owner (Msg): the holder waits
	KindRenewed  = "renew"  // a renewal of the lease succeeded
	KindDone     = "done"   // the lease's Done fired (its context was cancelled); Dl = its local deadline then, Msg = cause
)

// Event is one line of a holder's history file.
type Event struct {
	K     string `json:"k"`
	Pid   int    `json:"pid"`
	Owner string `json:"o,omitempty"`
	Name  string `json:"n,omitempty"`
	Tok   int64  `json:"tok,omitempty"`
	T     int64  `json:"t"` // wall clock, Unix nanoseconds
	OK    bool   `json:"ok,omitempty"`
	Gap   int64  `json:"gap,omitempty"` // nanoseconds (resume: the pause; stale: past the deadline)
	Last  int64  `json:"last,omitempty"`
	Dl    int64  `json:"dl,omitempty"` // acq, done: the lease's local deadline (wall clock, Unix nanoseconds)
	Msg   string `json:"msg,omitempty"`
}

// Recorder appends events to a file with one write(2) per event, so that a
// SIGKILL loses at most the event being written. Safe for concurrent use.
type Recorder struct {
	mu    sync.Mutex
	f     *os.File
	pid   int
	owner string
}

// NewRecorder opens (appending) the history file at path.
func NewRecorder(path, owner string) (*Recorder, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &Recorder{f: f, pid: os.Getpid(), owner: owner}, nil
}

// Now is the clock every holder stamps events with.
func Now() int64 { return time.Now().UnixNano() }

// Record writes e, filling in the pid and owner.
func (r *Recorder) Record(e Event) {
	e.Pid, e.Owner = r.pid, r.owner
	if e.T == 0 {
		e.T = Now()
	}
	b, _ := json.Marshal(e)
	b = append(b, '\n')
	r.mu.Lock()
	_, _ = r.f.Write(b)
	r.mu.Unlock()
}

// Close closes the file.
func (r *Recorder) Close() error { return r.f.Close() }

// LoadDir reads every *.log history file in dir. A torn last line (a
// holder killed mid-write) is skipped.
func LoadDir(dir string) ([]Event, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		return nil, err
	}
	var all []Event
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var e Event
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				all = append(all, e)
			}
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].T < all[j].T })
	return all, nil
}

// Write is one committed fenced write, read back from the resource's log
// table in commit order (Seq).
type Write struct {
	Seq   int64
	Name  string
	Token int64
	Pid   int
}

// Fault is one injected fault: [Start, End] on the holders' clock. End is
// when the fault was healed; liveness is measured from it.
type Fault struct {
	Kind       string
	Start, End int64
	Pid        int // the process it targeted, if any
}

// Section is one critical section: the beliefs of one holder process in
// one (name, token).
type Section struct {
	Name       string
	Token      int64
	Pid        int
	Owner      string
	Start, End int64 // first and last belief
	Beliefs    int
}

// Options tunes Check.
type Options struct {
	// Names are the lease names the holders contended for; liveness is
	// checked for each.
	Names []string
	// Liveness is how soon after a fault is healed some holder must hold
	// each name again (TTL plus a few seconds). Zero disables the check.
	Liveness time.Duration
	// End is when the run stopped; faults healed less than Liveness before
	// End are not checked for liveness.
	End int64
	// FastPids lists the pids of holders with fast-failover leases. When a
	// fault ends the session of one of them from outside ("terminate",
	// pg_terminate_backend; "reset", its proxy resetting its connections,
	// which closes the server side too), the lease it held then may overlap
	// its successor's until its Done fires: the holder cannot learn of the
	// end before the server does, the documented window (doc.go, "Fast
	// failover": an operator or a proxy ending a live holder's session).
	// Such overlaps are counted, not reported, and the window is measured;
	// every other overlap is a violation.
	FastPids map[int]bool
	// StaleTolerance is how far past its local deadline a holder not known
	// to be paused may still see its lease held (timer latency) before it
	// counts as a violation; within it, mutual exclusion still holds since
	// the row outlives the deadline by the safety margin. Default 0.
	StaleTolerance time.Duration
}

// endsSession reports whether a fault of kind ends the holder's database
// session from outside, without the holder's doing.
func endsSession(kind string) bool { return kind == "terminate" || kind == "reset" }

// Report is the outcome of Check.
type Report struct {
	Sections      int // critical sections with at least one belief
	VoidSections  int // acquisitions lost before the holder's first check
	Beliefs       int
	Writes        int // committed fenced writes
	Faults        int
	Resumes       int // pauses the holders noticed
	StaleRejected int // stale writes after a pause that the fence rejected
	StaleAccepted int // stale writes after a pause the fence accepted (no newer write yet)
	AllowedOverl  int // overlaps inside the documented window (FastPids)
	// Windows are, per fast-failover session ended from outside, how
	// long after the successor's acquisition the old holder's lease Done
	// fired (negative: before the successor acquired).
	Windows     []time.Duration
	LateCancels int // checks that saw a lease held past its deadline, within StaleTolerance
	Violations  []string
}

// OK reports whether no property was violated.
func (r Report) OK() bool { return len(r.Violations) == 0 }

func (r Report) String() string {
	s := fmt.Sprintf("sections=%d void=%d beliefs=%d writes=%d faults=%d resumes=%d stale-writes-rejected=%d/%d allowed-overlaps=%d late-cancels=%d violations=%d",
		r.Sections, r.VoidSections, r.Beliefs, r.Writes, r.Faults, r.Resumes, r.StaleRejected, r.StaleRejected+r.StaleAccepted,
		r.AllowedOverl, r.LateCancels, len(r.Violations))
	if len(r.Violations) > 0 {
		v := r.Violations
		if len(v) > 20 {
			v = append(v[:20:20], fmt.Sprintf("... and %d more", len(r.Violations)-20))
		}
		s += "\n  " + strings.Join(v, "\n  ")
	}
	return s
}

// Sections groups belief events into critical sections, sorted by start.
func Sections(events []Event) (secs []Section, void int) {
	type key struct {
		name string
		tok  int64
		pid  int
	}
	by := map[key]*Section{}
	acquired := map[key]bool{}
	for _, e := range events {
		k := key{e.Name, e.Tok, e.Pid}
		switch e.K {
		case KindAcquired:
			acquired[k] = true
		case KindBelief:
			s := by[k]
			if s == nil {
				s = &Section{Name: e.Name, Token: e.Tok, Pid: e.Pid, Owner: e.Owner, Start: e.T, End: e.T}
				by[k] = s
			}
			s.Start, s.End = min(s.Start, e.T), max(s.End, e.T)
			s.Beliefs++
		}
	}
	for k := range acquired {
		if by[k] == nil {
			void++
		}
	}
	for _, s := range by {
		secs = append(secs, *s)
	}
	sort.Slice(secs, func(i, j int) bool {
		if secs[i].Start != secs[j].Start {
			return secs[i].Start < secs[j].Start
		}
		return secs[i].Token < secs[j].Token
	})
	return secs, void
}

// Check verifies a history: no two holders' critical sections of one name
// overlap, tokens increase in the order sections start and are never
// handed out twice, no holder believed in a lease past its local deadline,
// committed fenced writes of each name carry non-decreasing tokens, and
// every name is held again within opt.Liveness after each fault is healed.
func Check(events []Event, writes []Write, faults []Fault, opt Options) Report {
	var r Report
	secs, void := Sections(events)
	r.Sections, r.VoidSections, r.Writes, r.Faults = len(secs), void, len(writes), len(faults)
	violate := func(format string, args ...any) { r.Violations = append(r.Violations, fmt.Sprintf(format, args...)) }
	ns := func(t int64) string { return time.Unix(0, t).Format("15:04:05.000000") }

	// Leases as the holders saw them: acquired (Acquire returned) and
	// ended (Done fired, or the local deadline passed if that was earlier).
	type lkey struct {
		name string
		tok  int64
		pid  int
	}
	acqAt, doneAt, relAt := map[lkey]Event{}, map[lkey]Event{}, map[lkey]Event{}
	for _, e := range events {
		k := lkey{e.Name, e.Tok, e.Pid}
		switch e.K {
		case KindAcquired:
			acqAt[k] = e
		case KindReleased:
			relAt[k] = e
		case KindDone:
			if _, dup := doneAt[k]; !dup {
				doneAt[k] = e
			}
		}
	}
	// inWindow reports whether the lease k (of a fast-failover holder) was
	// held when the server terminated its session, and succ began after
	// that: the documented window.
	inWindow := func(k lkey, start, succ int64) bool {
		if !opt.FastPids[k.pid] {
			return false
		}
		if a, ok := acqAt[k]; ok {
			start = min(start, a.T)
		}
		for _, f := range faults {
			if endsSession(f.Kind) && f.Pid == k.pid && start <= f.End && succ >= f.Start {
				return true
			}
		}
		return false
	}
	type pair struct {
		name     string
		old, new int64
	}
	allowed := map[pair]bool{}
	allow := func(name string, old, new int64) {
		if p := (pair{name, old, new}); !allowed[p] {
			allowed[p] = true
			r.AllowedOverl++
		}
	}

	byName := map[string][]Section{}
	for _, s := range secs {
		r.Beliefs += s.Beliefs
		byName[s.Name] = append(byName[s.Name], s)
	}
	for name, ss := range byName {
		var prev *Section // the section with the latest end so far
		seen := map[int64]Section{}
		for i := range ss {
			s := ss[i]
			if o, dup := seen[s.Token]; dup {
				violate("duplicate token: %q token %d held by pid %d and pid %d", name, s.Token, o.Pid, s.Pid)
			}
			seen[s.Token] = s
			if i > 0 && s.Token <= ss[i-1].Token {
				violate("token order: %q token %d (pid %d) started at %s after token %d (pid %d) started at %s",
					name, s.Token, s.Pid, ns(s.Start), ss[i-1].Token, ss[i-1].Pid, ns(ss[i-1].Start))
			}
			if prev != nil && s.Start <= prev.End {
				if inWindow(lkey{name, prev.Token, prev.Pid}, prev.Start, s.Start) {
					allow(name, prev.Token, s.Token)
				} else {
					violate("overlap: %q token %d (pid %d) believed held until %s, token %d (pid %d) from %s (%v overlap)",
						name, prev.Token, prev.Pid, ns(prev.End), s.Token, s.Pid, ns(s.Start), time.Duration(prev.End-s.Start))
				}
			}
			if prev == nil || s.End > prev.End {
				prev = &ss[i]
			}
		}
	}

	// A holder believes in its lease from Acquire's return until it calls
	// Release, Done fires or its local deadline passes, whichever is first
	// (Err checks the deadline itself), whether or not it is checking at
	// that moment (a partitioned holder may be stuck in a write). No other
	// holder may acquire the name inside that interval. Done is recorded by
	// a goroutine of its own, a little after it fired: a release, whose
	// Done precedes the successor's grant, is bounded by its Release call.
	type lease struct {
		k          lkey
		acq, until int64 // until: 0 if the holder never recorded the end (killed)
	}
	leases := map[string][]lease{}
	for k, a := range acqAt {
		l := lease{k: k, acq: a.T}
		if d, ok := doneAt[k]; ok {
			l.until = d.T
			if d.Dl > 0 && d.Dl < l.until {
				l.until = d.Dl
			}
			if rel, ok := relAt[k]; ok && rel.T < l.until {
				l.until = rel.T
			}
		}
		leases[k.name] = append(leases[k.name], l)
	}
	for name, ls := range leases {
		sort.Slice(ls, func(i, j int) bool { return ls[i].k.tok < ls[j].k.tok })
		var last *lease // the earlier lease that ended latest
		for i := range ls {
			l := ls[i]
			if last != nil && last.k.pid != l.k.pid && l.acq < last.until {
				if inWindow(last.k, last.acq, l.acq) {
					allow(name, last.k.tok, l.k.tok)
				} else {
					violate("lease overlap: %q token %d (pid %d) held until %s (its Done or local deadline), token %d (pid %d) acquired at %s (%v before)",
						name, last.k.tok, last.k.pid, ns(last.until), l.k.tok, l.k.pid, ns(l.acq), time.Duration(last.until-l.acq))
				}
			}
			if l.until > 0 && (last == nil || l.until > last.until) {
				last = &ls[i]
			}
		}
		// The documented window, measured: from the successor's
		// acquisition to the moment the terminated holder's lease ended.
		for _, f := range faults {
			if !endsSession(f.Kind) || !opt.FastPids[f.Pid] {
				continue
			}
			for i, l := range ls {
				d, ok := doneAt[l.k]
				if l.k.pid != f.Pid || l.acq > f.End || !ok || d.T < f.Start {
					continue
				}
				for _, succ := range ls[i+1:] {
					if succ.acq >= f.Start {
						r.Windows = append(r.Windows, time.Duration(d.T-succ.acq))
						break
					}
				}
			}
		}
	}

	for _, e := range events {
		switch e.K {
		case KindStale:
			if time.Duration(e.Gap) <= opt.StaleTolerance {
				r.LateCancels++
				continue
			}
			violate("stale belief: pid %d found %q token %d still held %v past its local deadline at %s",
				e.Pid, e.Name, e.Tok, time.Duration(e.Gap), ns(e.T))
		case KindResume:
			r.Resumes++
			if !e.OK {
				violate("resumed holder pid %d: %q token %d not yet cancelled after a %v pause past its deadline",
					e.Pid, e.Name, e.Tok, time.Duration(e.Gap))
			}
		case KindStaleW:
			if e.OK {
				r.StaleAccepted++
			} else {
				r.StaleRejected++
			}
		case KindWrite:
			if e.Msg == "fence" {
				violate("guard passed but the fence had seen a newer token: pid %d %q token %d (last %d) at %s",
					e.Pid, e.Name, e.Tok, e.Last, ns(e.T))
			}
		}
	}

	last := map[string]Write{}
	for _, w := range writes {
		if p, ok := last[w.Name]; ok && w.Token < p.Token {
			violate("stale write accepted: %q token %d (pid %d, seq %d) committed after token %d (pid %d, seq %d)",
				w.Name, w.Token, w.Pid, w.Seq, p.Token, p.Pid, p.Seq)
		}
		last[w.Name] = w
	}

	if opt.Liveness > 0 {
		beliefs := map[string][]int64{}
		for _, e := range events {
			if e.K == KindBelief {
				beliefs[e.Name] = append(beliefs[e.Name], e.T)
			}
		}
		for _, f := range faults {
			if opt.End != 0 && f.End+int64(opt.Liveness) > opt.End {
				continue
			}
			for _, name := range opt.Names {
				ts := beliefs[name]
				i := sort.Search(len(ts), func(i int) bool { return ts[i] >= f.End })
				if i == len(ts) || ts[i] > f.End+int64(opt.Liveness) {
					violate("liveness: nobody held %q within %v after the %s fault healed at %s", name, opt.Liveness, f.Kind, ns(f.End))
				}
			}
		}
	}
	return r
}
