package combination

import (
	"context"
	"slices"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/pgtest"
)

// run executes one step and records it.
func (s *sequence) run(st Step) {
	rec := StepRun{Step: st, Start: now()}
	s.step(st)
	rec.End = now()
	s.mu.Lock()
	s.h.Steps = append(s.h.Steps, rec)
	s.mu.Unlock()
}

func (s *sequence) step(st Step) {
	switch st.Do {
	case DoRead:
		s.read(st.Name)
		return
	case DoAwait:
		s.awaitWaiters(st.Name)
		return
	case DoSleep:
		time.Sleep(st.For) // the step itself: time passes (renewals, watchers)
		return
	case DoRestart:
		s.restart(st.Name)
		return
	case DoUpgrade:
		s.upgrade()
		return
	case DoStatsReset:
		// Routine in some monitoring setups; up to schema version 8 it
		// changed the server incarnation of every fast-failover row not
		// renewed since, whose holders then failed over at their expiry.
		pgtest.Exec(s.t, `SELECT pg_stat_reset_shared('bgwriter'), pg_stat_reset_shared('archiver'),
			pg_stat_reset_shared('wal'), pg_stat_reset_slru(NULL), pg_stat_reset()`)
		return
	}
	a := s.target(st)
	if a == nil {
		return // the step's target is gone: it does nothing
	}
	switch st.Do {
	case DoAcquire, DoTry:
		m := a.mode(st.Mode)
		cmd := acquireCmd(m)
		cmd.Names, cmd.MaxHold, cmd.Timeout = []string{st.Name}, st.Hold, st.For
		if st.Do == DoTry {
			cmd.Op, cmd.Timeout = CmdTry, 0
		}
		o := s.send(a, cmd, func(o *Op) { o.Mode, o.Hold = m, st.Hold })
		if st.Do == DoTry {
			s.waitReply(o)
		}
	case DoAll, DoTryAll:
		cmd := Command{Op: CmdAll, Names: st.Names, Timeout: st.For}
		if st.Do == DoTryAll {
			cmd.Op, cmd.Timeout = CmdTryAll, 0
		}
		o := s.send(a, cmd, nil)
		if st.Do == DoTryAll {
			s.waitReply(o)
		}
	case DoRelease:
		if l := s.liveLease(a.p.ID, st.Name); l != nil {
			o := s.send(a, Command{Op: CmdRelease, Handle: l.Handle}, func(o *Op) { o.Target, o.Names = l, []string{l.Row} })
			s.waitReply(o)
			s.awaitTakeover(st.Name, o.Call)
		}
	case DoGuard, DoStaleGuard:
		s.guard(a, st)
	case DoStepDown:
		s.stepDown(a, st.Name)
	case DoKill:
		s.killAgents(a)
	case DoDoubleKill:
		if w := s.firstWaiter(st.Name, a.p.ID); w != nil {
			s.killAgents(a, w) // the holder first: its death seen first is the harder order
		} else {
			s.killAgents(a)
		}
	case DoShutdown:
		if !a.old { // (an old agent does not report its Close)
			s.shutdown(a, st)
		}
	case DoPause, DoPartition:
		s.cut(a, st)
	case DoTerminate:
		held := s.heldResources(a.p.ID)
		start := now()
		pgtest.TerminateBackends(s.t, "pglease "+a.p.Owner)
		s.fault(FaultTerminate, a.p.ID, start)
		s.awaitTakeovers(held, start)
	case DoReset:
		// A middlebox reset: the agent's client reads a reset, the
		// server's backends live on (holding the client's locks) until
		// its new dedicated session ends the old one. Its fast-failover
		// leases end with the connection, and must be taken over at once;
		// its plain leases renew on the new session.
		held := s.heldResources(a.p.ID)
		start := now()
		a.proxy.ResetClients()
		s.fault(FaultReset, a.p.ID, start)
		s.awaitTakeovers(held, start)
	case DoDelay:
		s.delay(a, st.For)
	default:
		s.t.Fatalf("unknown step %v", st)
	}
}

// acquireCmd is a single acquisition in mode m (Names and the rest to
// fill).
func acquireCmd(m Mode) Command {
	return Command{Op: CmdAcquire, Slots: m.Slots(), Fast: m.Fast(), Shared: m.Shared(), Quota: m.Quota(), Weight: m.Weight()}
}

// mode is the mode the agent acquires in when a step asks for m: an agent
// of the previous release takes a plain lease of the name instead of a
// quota, fast failover or not, which meets the quota's holders as another
// kind (release 9, the previous release until issue 43, knew no quota and
// would have ignored the options it did not know).
func (a *agentProc) mode(m Mode) Mode {
	if a.old {
		return m.Unquota()
	}
	return m
}

// guard makes a fenced write with the agent's live lease on the step's
// name, or (DoStaleGuard) with its lease on it that ended last.
func (s *sequence) guard(a *agentProc, st Step) {
	l, kind := s.liveLease(a.p.ID, st.Name), CmdGuard
	if st.Do == DoStaleGuard {
		l, kind = s.endedLease(a.p.ID, st.Name), OpStaleGuard
	}
	if l == nil {
		return
	}
	o := s.send(a, Command{Op: CmdGuard, Handle: l.Handle, Row: l.Row, Value: s.value()},
		func(o *Op) { o.Kind, o.Target, o.Names = kind, l, []string{l.Row} })
	s.waitReply(o)
}

// stepDown has the agent ask the holder of the oldest live lease on name
// to step down; the holder's agent releases it.
func (s *sequence) stepDown(a *agentProc, name string) {
	s.mu.Lock()
	var l *Lease
	if ls := s.liveLeases(name); len(ls) > 0 {
		l = ls[0]
	}
	s.mu.Unlock()
	if l == nil {
		return
	}
	o := s.send(a, Command{Op: CmdStepDown, Names: []string{l.Row}}, nil)
	s.waitReply(o)
	if o.Err == nil {
		s.waitFor(replyWithin, func() bool { return l.RelRet != 0 || l.Done != 0 })
		s.awaitTakeover(name, l.RelCall)
	}
}

// killAgents SIGKILLs the agents' processes in the same instant, starts
// another in each slot and waits for the take-over of what they held.
func (s *sequence) killAgents(as ...*agentProc) {
	var held []string
	for _, a := range as {
		for _, r := range s.heldResources(a.p.ID) {
			if !slices.Contains(held, r) {
				held = append(held, r)
			}
		}
		s.delay(a, 0)
	}
	start := now()
	s.mu.Lock()
	for _, a := range as {
		a.p.Killed = start
	}
	s.mu.Unlock()
	for _, a := range as {
		_ = a.cmd.Process.Kill()
	}
	for _, a := range as {
		<-a.exited
		s.fault(FaultKill, a.p.ID, start)
		a.proxy.Close()
	}
	for _, a := range as {
		next := s.spawn(a.slot)
		s.mu.Lock()
		s.agents[a.slot] = next
		s.mu.Unlock()
		s.start(next)
	}
	s.awaitTakeovers(held, start)
}

// firstWaiter returns the agent of the oldest blocking acquisition of
// resource still waiting in a live process other than proc's, or nil.
func (s *sequence) firstWaiter(resource string, proc int) *agentProc {
	s.mu.Lock()
	var first *Op
	for _, o := range s.h.Ops {
		if o.Proc != proc && s.pending(o, resource) && (first == nil || o.Sent < first.Sent) {
			first = o
		}
	}
	s.mu.Unlock()
	if first == nil {
		return nil
	}
	return s.agentOf(first.Proc)
}

// shutdown shuts the agent down as a service does, in the middle of a
// call: it starts a blocking acquisition of st.Names, and st.For after
// the agent's first bytes to the server since (its statement on its way,
// as a rule) sends SIGTERM, on which the agent cuts the context of every
// call in flight and, once they have returned, closes its client at once
// (see RunAgent). Once Close has returned it reads which rows of the
// closed client are still held, starts another process in its slot (the
// old one exits meanwhile) and waits for the take-over of what the agent
// held or was acquiring.
func (s *sequence) shutdown(a *agentProc, st Step) {
	held := s.heldResources(a.p.ID)
	sent := a.proxy.ClientSent()
	switch {
	case len(st.Names) == 1:
		m := a.mode(st.Mode)
		cmd := acquireCmd(m)
		cmd.Names, cmd.Timeout = st.Names, waitLimit
		s.send(a, cmd, func(o *Op) { o.Mode = m })
	case len(st.Names) > 1:
		s.send(a, Command{Op: CmdAll, Names: st.Names, Timeout: waitLimit}, nil)
	}
	for _, n := range st.Names {
		if !slices.Contains(held, n) {
			held = append(held, n)
		}
	}
	select {
	case <-sent:
	case <-time.After(100 * time.Millisecond): // (no statement: queued in its client)
	}
	time.Sleep(st.For) // the call's statement is in flight, or not yet, or done
	s.mu.Lock()
	s.nextID++
	o := &Op{ID: s.nextID, Proc: a.p.ID, Kind: OpClose, Sent: now()}
	s.h.Ops = append(s.h.Ops, o)
	s.mu.Unlock()
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	if !s.waitFor(replyWithin, func() bool { return o.Ret != 0 || a.dead() }) {
		_ = a.cmd.Process.Signal(syscall.SIGQUIT)
		time.Sleep(time.Second)
		_ = a.cmd.Process.Kill()
		<-a.exited
		s.t.Errorf("agent p%d did not close its client within %v of its SIGTERM:\n%s", a.p.ID, replyWithin, s.stderrTails())
	}
	s.delay(a, 0)
	a.proxy.Close()
	// What the closed client left held: nothing, unless Close said so.
	ctx, cancel := context.WithTimeout(context.Background(), replyWithin)
	rows, err := s.admin.Query(ctx, `SELECT "name", "token" FROM `+pgx.Identifier{s.schema, "leases"}.Sanitize()+
		` WHERE "owner" = $1 AND "expires_at" > now()`, a.p.Owner)
	if err == nil {
		var left []Granted
		left, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Granted, error) {
			var g Granted
			return g, r.Scan(&g.Row, &g.Token)
		})
		s.mu.Lock()
		o.Left = left
		s.mu.Unlock()
	}
	cancel()
	if err != nil {
		s.t.Fatalf("reading the rows a closed client left: %v", err)
	}
	s.mu.Lock()
	end := o.Ret
	if end == 0 {
		end = now() // (no reply: the checker reports it)
	}
	s.h.Faults = append(s.h.Faults, Fault{Kind: FaultShutdown, Proc: a.p.ID, Start: o.Sent, End: end})
	s.mu.Unlock()
	next := s.spawn(a.slot)
	s.mu.Lock()
	s.agents[a.slot] = next
	s.mu.Unlock()
	s.start(next)
	s.awaitTakeovers(held, o.Sent)
}

// cut stops the agent (SIGSTOP) or cuts its network for st.For, longer
// than the TTL, then waits until it hears that its leases have ended.
func (s *sequence) cut(a *agentProc, st Step) {
	held := s.heldResources(a.p.ID)
	start := now()
	kind := FaultPause
	if st.Do == DoPause {
		_ = a.cmd.Process.Signal(syscall.SIGSTOP)
	} else {
		kind = FaultPartition
		a.proxy.Partition(true)
	}
	time.Sleep(st.For) // the fault itself
	if st.Do == DoPause {
		_ = a.cmd.Process.Signal(syscall.SIGCONT)
	} else {
		a.proxy.Partition(false)
	}
	s.fault(kind, a.p.ID, start)
	s.awaitTakeovers(held, start)
	s.waitFor(s.cfg.TTL+time.Second, func() bool {
		for _, l := range s.h.Leases {
			if l.Proc == a.p.ID && l.Start() < start && l.Done == 0 && l.RelCall == 0 {
				return false
			}
		}
		return true
	})
}

// restart restarts the server (mode "fast" or "immediate") and waits for
// the take-over of the fast-failover leases, which end with their
// sessions.
func (s *sequence) restart(mode string) {
	cl := pgtest.Cluster()
	if cl == nil {
		return // PGLEASE_TEST_DSN: not our server to restart
	}
	s.mu.Lock()
	var held []string
	for _, l := range s.h.Leases {
		if l.Session && s.isLive(l) && !slices.Contains(held, l.Resource) {
			held = append(held, l.Resource)
		}
	}
	s.mu.Unlock()
	start := now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	err := cl.Restart(ctx, mode)
	cancel()
	if err != nil {
		s.t.Fatalf("restart: %v", err)
	}
	// The admin pool's connections ended with the server: a pool hands
	// out a connection used less than a second ago unchecked.
	s.admin.Reset()
	s.fault(FaultRestart, 0, start)
	s.awaitTakeovers(held, start)
}

// delay makes the agent's proxy delay its traffic by d from now on (0:
// no more), and records the delay as a fault once it ends.
func (s *sequence) delay(a *agentProc, d time.Duration) {
	a.proxy.SetDelay(d)
	switch {
	case d > 0 && a.delayed == 0:
		a.delayed = now()
	case d == 0 && a.delayed != 0:
		s.fault(FaultDelay, a.p.ID, a.delayed)
		a.delayed = 0
	}
}

// fault records a fault that began at start and has just ended.
func (s *sequence) fault(kind string, proc int, start int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.h.Faults = append(s.h.Faults, Fault{Kind: kind, Proc: proc, Start: start, End: now()})
}

// target returns the agent a step acts through: its slot's process, the
// process holding the oldest live lease on the step's name (Holder), or
// the live process whose lease on it ended last (Ended); nil if none.
func (s *sequence) target(st Step) *agentProc {
	s.mu.Lock()
	defer s.mu.Unlock()
	var cands []*Lease
	switch st.Agent {
	case Holder:
		cands = s.liveLeases(st.Name)
	case Ended:
		for _, l := range slices.Backward(s.h.Leases) {
			if l.Resource == st.Name && (l.RelCall != 0 || l.Done != 0) {
				cands = append(cands, l)
			}
		}
	default:
		return s.agents[st.Agent%len(s.agents)] // nil: its agent has not arrived yet
	}
	for _, l := range cands {
		for _, a := range s.agents {
			if a != nil && a.p.ID == l.Proc {
				return a
			}
		}
	}
	return nil
}

// isLive reports whether l is held as far as the driver knows: not
// released, not ended, its process not killed or shut down. Call with
// s.mu held.
func (s *sequence) isLive(l *Lease) bool {
	p := s.h.proc(l.Proc)
	return l.RelCall == 0 && l.Done == 0 && p.Killed == 0 && p.Closed == 0
}

// liveLeases returns the live leases on resource, oldest first. Call with
// s.mu held.
func (s *sequence) liveLeases(resource string) []*Lease {
	var out []*Lease
	for _, l := range s.h.Leases {
		if l.Resource == resource && s.isLive(l) {
			out = append(out, l)
		}
	}
	return out
}

// liveLease returns the oldest live lease of proc on resource, or nil.
func (s *sequence) liveLease(proc int, resource string) *Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.liveLeases(resource) {
		if l.Proc == proc {
			return l
		}
	}
	return nil
}

// endedLease returns the latest lease of proc on resource that has ended
// (released or lost), or nil.
func (s *sequence) endedLease(proc int, resource string) *Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out *Lease
	for _, l := range s.h.Leases {
		if l.Proc == proc && l.Resource == resource && (l.RelCall != 0 || l.Done != 0) {
			out = l
		}
	}
	return out
}

// heldResources lists the resources proc holds live leases on.
func (s *sequence) heldResources(proc int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, l := range s.h.Leases {
		if l.Proc == proc && s.isLive(l) && !slices.Contains(out, l.Resource) {
			out = append(out, l.Resource)
		}
	}
	return out
}

// pending reports whether o is a blocking acquisition of resource still
// waiting, in a live process. Call with s.mu held.
func (s *sequence) pending(o *Op, resource string) bool {
	return (o.Kind == CmdAcquire || o.Kind == CmdAll) && slices.Contains(o.Names, resource) && o.Ret == 0 &&
		s.h.proc(o.Proc).Killed == 0 && s.h.proc(o.Proc).Closed == 0 && time.Duration(now()-o.Sent) < o.Timeout
}

// awaitTakeover waits, after resource was freed (from 'at' on), until a waiter
// holds it or nobody waits any more, within the expiry bound: the
// history shows how long it took (the checker judges it).
func (s *sequence) awaitTakeover(resource string, at int64) {
	if at == 0 {
		return
	}
	s.waitFor(s.cfg.TTL+s.cfg.Poll+bounds.ExpirySlack, func() bool {
		for _, l := range s.h.Leases {
			if l.Resource == resource && l.Start() > at {
				return true
			}
		}
		units, quota := 0, 0
		for _, l := range s.h.live(resource, time.Now().UnixNano()) {
			if l.Slots == 0 {
				return true // still held shared: nothing was freed for the waiters
			}
			if l.Quota > 0 {
				units, quota = units+l.Weight, l.Quota
			}
		}
		if quota > 0 {
			// Units still held: the first in line takes the quota only
			// when its units fit beside them (and those behind it wait).
			var first *Op
			for _, o := range s.h.Ops {
				if o.Kind == CmdAcquire && o.Mode.Quota() > 0 && s.pending(o, resource) && (first == nil || o.Sent < first.Sent) {
					first = o
				}
			}
			if first != nil && units+first.Mode.Weight() > quota {
				return true
			}
		}
		for _, o := range s.h.Ops {
			if s.pending(o, resource) {
				return false
			}
		}
		return true
	})
}

// awaitTakeovers awaits the take-over of each of resources.
func (s *sequence) awaitTakeovers(resources []string, at int64) {
	for _, res := range resources {
		s.awaitTakeover(res, at)
	}
}

// awaitWaiters waits until every waiter for resource has looked at it at
// least once (its client reported the contention, so it is queued), or is
// queued locally behind another waiter of its client, within a few
// seconds.
func (s *sequence) awaitWaiters(resource string) {
	s.waitFor(5*time.Second, func() bool {
		for _, o := range s.h.Ops {
			if !s.pending(o, resource) {
				continue
			}
			looked := false
			for _, c := range s.h.Contended {
				if c.Proc == o.Proc && Resource(c.Row) == resource && c.T >= o.Sent {
					looked = true
				}
			}
			for _, p := range s.h.Ops {
				if p != o && p.Proc == o.Proc && p.Sent < o.Sent && s.pending(p, resource) {
					looked = true // queued locally behind p
				}
			}
			for _, l := range s.liveLeases(resource) {
				if l.Proc == o.Proc {
					looked = true // queued locally behind its own client's lease
				}
			}
			if !looked {
				return false
			}
		}
		return true
	})
}

// value returns a new value for a guarded write.
func (s *sequence) value() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	return int64(s.nextID)
}

// read reads the register of every row of resource the driver has seen.
func (s *sequence) read(resource string) {
	s.mu.Lock()
	rows := []string{resource}
	for _, l := range s.h.Leases {
		if l.Resource == resource && !slices.Contains(rows, l.Row) {
			rows = append(rows, l.Row)
		}
	}
	s.mu.Unlock()
	q := `SELECT coalesce((SELECT value FROM ` + pgx.Identifier{s.schema, "register"}.Sanitize() + ` WHERE name = $1), 0)`
	for _, row := range rows {
		ctx, cancel := context.WithTimeout(context.Background(), replyWithin)
		call := now()
		var v int64
		err := s.admin.QueryRow(ctx, q, row).Scan(&v)
		ret := now()
		cancel()
		if err != nil {
			continue // a read that failed says nothing
		}
		s.mu.Lock()
		s.nextID++
		s.h.Ops = append(s.h.Ops, &Op{ID: s.nextID, Kind: OpRead, Names: []string{row}, Sent: call, Call: call, Ret: ret, Value: v})
		s.mu.Unlock()
	}
}
