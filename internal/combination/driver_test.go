package combination

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/pgtest"
)

func TestMain(m *testing.M) {
	if cfg := os.Getenv(EnvAgent); cfg != "" {
		os.Exit(RunAgent(cfg))
	}
	pgtest.Main(m)
}

// config is what a sequence runs with.
type config struct {
	Agents int
	TTL    time.Duration
	Poll   time.Duration
	// OneByOne opens the agents' clients one after another instead of
	// all at once (a regression case about something else).
	OneByOne bool
	// Old is how many agent slots (the first ones) start as agents of the
	// previous release (oldRelease), which create the table at its schema
	// version; the other slots stay empty until a DoUpgrade step, when
	// agents of this version arrive and migrate the table under them.
	Old int
}

// short is the configuration of every sequence: a TTL long enough that a
// fast-failover takeover (1 s) and an expiry (at least 2/3 of the TTL
// after the holder's last renewal) are told apart, and the default poll
// interval, which is what a waiter that misses its wake-up falls back on.
var short = config{Agents: 4, TTL: 3 * time.Second, Poll: 5 * time.Second}

// bounds are the specification's liveness bounds, with the slack a
// two-core machine running the race detector needs (see doc.go).
var bounds = Bounds{
	HandOff: 100 * time.Millisecond, HandOffSlack: 250 * time.Millisecond,
	FastFailover: time.Second, FastFailoverSlack: 500 * time.Millisecond,
	ExpirySlack: time.Second,
}

// replyWithin bounds the wait for an agent's answer to a call that does
// not block (a try, a release, a guarded write): generous, since the
// machine may be slow; a call that never answers fails the test.
const replyWithin = 30 * time.Second

// sequence is one run of steps against a fresh, empty schema, by agents
// (each a pglease.Client in a process of its own, behind a fault proxy).
type sequence struct {
	t      *testing.T
	cfg    config
	schema string
	base   string // superuser DSN, direct
	admin  *pgxpool.Pool
	dir    string // agents' stderr

	mu      sync.Mutex
	changed chan struct{} // closed and replaced whenever h changes
	h       *History
	ops     map[int]*Op
	handles map[int][]*Lease
	agents  []*agentProc // by slot
	nextID  int
	nextPID int
	readers sync.WaitGroup
}

// agentProc is one agent process.
type agentProc struct {
	slot    int
	p       *Proc
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	proxy   *pgtest.Proxy
	old     bool // an agent of the previous release (see config.Old)
	exited  chan struct{}
	errLog  string
	delayed int64 // when its traffic began to be delayed (0: it is not)
}

// newSequence creates the schema and register tables and starts the
// agents, which open their clients and then all create the table at once
// on the empty schema, half of them spelling it "leases" under a
// search_path, half "schema.leases": many replicas starting together.
func newSequence(t *testing.T, cfg config) *sequence {
	t.Helper()
	s := &sequence{t: t, cfg: cfg, base: pgtest.DSN(t), dir: t.TempDir(), changed: make(chan struct{}),
		ops: map[int]*Op{}, handles: map[int][]*Lease{}}
	s.schema = pgtest.Schema(t)
	pgtest.Exec(t, RegisterDDL(s.schema))
	s.admin = pgtest.Pool(t)
	s.h = &History{TTL: cfg.TTL, Poll: cfg.Poll, Begin: now()}
	s.agents = make([]*agentProc, cfg.Agents)
	var first []int
	for i := range s.agents {
		switch {
		case cfg.Old == 0:
			s.agents[i] = s.spawn(i)
		case i < cfg.Old:
			s.agents[i] = s.spawnAs(i, oldAgent(t))
		default:
			continue // arrives with the upgrade
		}
		first = append(first, i)
	}
	t.Cleanup(s.kill) // if the test stops before finish
	s.open(first)
	return s
}

// open has the agents of slots connect, then every one create the table
// at once (or one after the other: OneByOne), trying again after a
// failure.
func (s *sequence) open(slots []int) {
	for _, cmd := range []string{CmdOpen, CmdMigrate} {
		var ops []*Op
		for _, i := range slots {
			ops = append(ops, s.send(s.agents[i], Command{Op: cmd}, nil))
			if s.cfg.OneByOne {
				s.waitReply(ops[len(ops)-1])
			}
		}
		for i, o := range ops {
			s.waitReply(o)
			if o.Err != nil {
				s.start(s.agents[slots[i]])
			}
		}
	}
}

// start opens an agent's client and creates the table, trying again after
// a failure (as a replica restarted by its supervisor would), so that the
// sequence can go on; a failure stays in the history.
func (s *sequence) start(a *agentProc) {
	for range 5 {
		o := s.send(a, Command{Op: CmdOpen}, nil)
		s.waitReply(o)
		if o.Err == nil {
			o = s.send(a, Command{Op: CmdMigrate}, nil)
			s.waitReply(o)
		}
		if o.Err == nil {
			return
		}
	}
}

// spawn starts the agent process of a slot: of the previous release
// while the sequence awaits its upgrade (a replica restarted before its
// upgrade), else of this version.
func (s *sequence) spawn(slot int) *agentProc {
	s.mu.Lock()
	before := s.cfg.Old > 0 && s.h.Upgrade == 0
	s.mu.Unlock()
	if before {
		return s.spawnAs(slot, oldAgent(s.t))
	}
	return s.spawnAs(slot, "")
}

// spawnAs starts the agent process of a slot: the binary bin (an earlier
// release's test binary, see oldAgent), or this test binary if bin is "".
func (s *sequence) spawnAs(slot int, bin string) *agentProc {
	s.mu.Lock()
	s.nextPID++
	p := &Proc{ID: s.nextPID, Agent: slot, Start: now(), Old: bin != ""}
	s.mu.Unlock()
	p.Owner = fmt.Sprintf("combo-%s-a%dp%d", s.schema[len(s.schema)-min(len(s.schema), 8):], slot, p.ID)
	a := &agentProc{slot: slot, p: p, old: bin != "", exited: make(chan struct{})}
	a.proxy = pgtest.NewProxy(s.t, pgtest.HostPort(s.t, s.base))
	dsn := a.proxy.DSN(s.base)
	p.Table = s.schema + ".leases"
	if slot%2 == 0 {
		// The other spelling of the same table: unqualified, found through
		// the search_path.
		p.Table = "leases"
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		dsn += sep + "search_path=" + s.schema
	}
	b, _ := json.Marshal(AgentConfig{DSN: dsn, Table: p.Table, Schema: s.schema, Owner: p.Owner, TTL: s.cfg.TTL, Poll: s.cfg.Poll})
	a.errLog = filepath.Join(s.dir, fmt.Sprintf("p%d.stderr", p.ID))
	ef, err := os.Create(a.errLog)
	if err != nil {
		s.t.Fatal(err)
	}
	if bin == "" {
		bin = os.Args[0]
	}
	a.cmd = exec.Command(bin, "-test.run=^$")
	a.cmd.Env = append(os.Environ(), EnvAgent+"="+string(b))
	a.cmd.Stderr = ef
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := a.cmd.StdoutPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	if a.stdin, err = a.cmd.StdinPipe(); err != nil {
		s.t.Fatal(err)
	}
	if err := a.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.mu.Lock()
	s.h.Procs = append(s.h.Procs, p)
	s.mu.Unlock()
	s.readers.Add(1)
	go func() {
		defer s.readers.Done()
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var r Reply
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				s.apply(p.ID, r)
			}
		}
		_ = a.cmd.Wait()
		ef.Close()
		close(a.exited)
	}()
	return a
}

// send sends cmd to an agent and records it as an op (of kind, if given,
// else the command's).
func (s *sequence) send(a *agentProc, cmd Command, init func(*Op)) *Op {
	s.mu.Lock()
	s.nextID++
	cmd.ID = s.nextID
	if cmd.Handle == 0 {
		cmd.Handle = cmd.ID
	}
	o := &Op{ID: cmd.ID, Proc: a.p.ID, Kind: cmd.Op, Names: cmd.Names, Timeout: cmd.Timeout, Value: cmd.Value, Sent: now()}
	if init != nil {
		init(o)
	}
	s.ops[o.ID] = o
	s.h.Ops = append(s.h.Ops, o)
	s.mu.Unlock()
	b, _ := json.Marshal(cmd)
	_, _ = a.stdin.Write(append(b, '\n')) // a dead agent's pipe fails: the op never returns
	return o
}

// apply records a reply of process proc.
func (s *sequence) apply(proc int, r Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() {
		close(s.changed)
		s.changed = make(chan struct{})
	}()
	release := func(ls []*Lease, call, ret int64, err *ErrInfo, stepDown bool) {
		for _, l := range ls {
			if l.RelCall == 0 || call < l.RelCall {
				l.RelCall, l.RelRet, l.RelErr, l.StepDown = call, ret, err, stepDown
			}
		}
	}
	switch r.K {
	case ReplyReturn:
		o := s.ops[r.Cmd]
		if o == nil {
			return
		}
		o.Call, o.Ret, o.Err = r.Call, r.T, r.Err
		for _, g := range r.Leases {
			slots := o.Mode.Slots()
			if o.Kind == CmdAll || o.Kind == CmdTryAll {
				slots = 1
			}
			l := &Lease{Handle: r.Handle, Proc: proc, Row: g.Row, Resource: Resource(g.Row), Slots: slots, Session: g.Session, Token: g.Token, Acq: o}
			if o.Kind == CmdAcquire || o.Kind == CmdTry {
				l.Quota, l.Weight = o.Mode.Quota(), o.Mode.Weight()
			}
			o.Leases = append(o.Leases, l)
			s.h.Leases = append(s.h.Leases, l)
			s.handles[r.Handle] = append(s.handles[r.Handle], l)
		}
		if o.Kind == CmdRelease {
			release(s.handles[r.Handle], r.Call, r.T, r.Err, false)
		}
	case ReplyReleased:
		release(s.handles[r.Handle], r.Call, r.T, r.Err, true)
	case ReplyDone:
		for _, l := range s.handles[r.Handle] {
			if l.Row == r.Name && l.Done == 0 {
				l.Done, l.DoneDl, l.Cause = r.T, r.Dl, r.Cause
			}
		}
	case ReplyContended:
		s.h.Contended = append(s.h.Contended, Contention{Proc: proc, Row: r.Name, T: r.T})
	case ReplyClosed:
		// A shutdown's Close (not the one at the end of the run): every
		// lease the client held when Close was called ends with it,
		// recorded as released by Close.
		var o *Op
		for _, x := range s.h.Ops {
			if x.Kind == OpClose && x.Proc == proc && x.Ret == 0 {
				o = x
			}
		}
		if o == nil {
			return
		}
		o.Call, o.Ret, o.Err = r.Call, r.T, r.Err
		s.h.proc(proc).Closed = r.Call
		for _, l := range s.h.Leases {
			if l.Proc == proc && l.Start() <= r.Call && (l.Done == 0 || l.Done >= r.Call) && (l.RelCall == 0 || r.Call < l.RelCall) {
				l.RelCall, l.RelRet, l.RelErr, l.StepDown, l.ByClose = r.Call, r.T, r.Err, false, true
			}
		}
	}
}

// waitFor waits up to bound until cond (called under s.mu) holds, and
// reports whether it did.
func (s *sequence) waitFor(bound time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(bound)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		ok, ch := cond(), s.changed
		s.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-deadline.C:
			s.mu.Lock()
			defer s.mu.Unlock()
			return cond()
		}
	}
}

// waitReply waits for an op's reply; one that does not come within
// replyWithin (from a live agent) fails the test.
func (s *sequence) waitReply(o *Op) {
	a := s.agentOf(o.Proc)
	if a == nil {
		return
	}
	if !s.waitFor(replyWithin, func() bool { return o.Ret != 0 || a.dead() }) {
		s.t.Errorf("%s %s %v: no reply within %v\n%s", a.p.Owner, o.Kind, o.Names, replyWithin, s.stderrTails())
	}
}

func (a *agentProc) dead() bool {
	select {
	case <-a.exited:
		return true
	default:
		return false
	}
}

func (s *sequence) agentOf(proc int) *agentProc {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.agents {
		if a != nil && a.p.ID == proc {
			return a
		}
	}
	return nil
}

// finish stops the agents (each closes its client, which releases what it
// holds), reads the register's log and returns the history.
func (s *sequence) finish() *History {
	s.mu.Lock()
	agents := slices.DeleteFunc(slices.Clone(s.agents), func(a *agentProc) bool { return a == nil })
	s.mu.Unlock()
	for _, a := range agents {
		s.delay(a, 0)
	}
	s.mu.Lock()
	s.h.End = now()
	s.mu.Unlock()
	for _, a := range agents {
		_ = a.cmd.Process.Signal(syscall.SIGCONT)
		_ = a.stdin.Close()
	}
	for _, a := range agents {
		select {
		case <-a.exited:
		case <-time.After(time.Minute):
			_ = a.cmd.Process.Signal(syscall.SIGQUIT)
			time.Sleep(time.Second)
			_ = a.cmd.Process.Kill()
			<-a.exited
			s.t.Errorf("agent p%d did not stop within a minute of its stdin's end:\n%s", a.p.ID, s.stderrTails())
		}
		a.proxy.Close()
	}
	s.readers.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rows, err := s.admin.Query(ctx, `SELECT seq, cmd, name, token, value FROM `+pgx.Identifier{s.schema, "writes"}.Sanitize()+` ORDER BY seq`)
	if err != nil {
		s.t.Fatal(err)
	}
	log, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (LoggedWrite, error) {
		var w LoggedWrite
		return w, r.Scan(&w.Seq, &w.Cmd, &w.Row, &w.Token, &w.Value)
	})
	if err != nil {
		s.t.Fatal(err)
	}
	s.h.Log = log
	for _, w := range log {
		if o := s.ops[w.Cmd]; o != nil {
			o.Committed = true
		}
	}
	return s.h
}

// kill kills every agent still running and waits for it.
func (s *sequence) kill() {
	s.mu.Lock()
	agents := slices.Clone(s.agents)
	s.mu.Unlock()
	for _, a := range agents {
		if a != nil && !a.dead() {
			_ = a.cmd.Process.Kill()
			<-a.exited
		}
	}
}

// stderrTails returns the end of each agent's stderr.
func (s *sequence) stderrTails() string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(s.dir, "*.stderr"))
	for _, f := range files {
		out, _ := os.ReadFile(f)
		if len(out) > 2000 {
			out = out[len(out)-2000:]
		}
		if len(out) > 0 {
			fmt.Fprintf(&b, "--- %s:\n%s\n", filepath.Base(f), out)
		}
	}
	return b.String()
}
