package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pglease/pglease"
)

// ---- rendering ----

func us(sec float64) string { return num(sec * 1e6) }

func mib(b float64) string { return num(b / (1 << 20)) }

// round2 rounds v to two significant digits, for capacity figures that
// one run cannot give more precisely.
func round2(v float64) float64 {
	if v <= 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0
	}
	p := math.Pow(10, math.Floor(math.Log10(v))-1)
	return math.Round(v/p) * p
}

// about formats a capacity figure: two significant digits with thousands
// separators.
func about(v float64) string {
	v = round2(v)
	if v < 10 {
		return num(v)
	}
	s := strconv.FormatFloat(v, 'f', 0, 64)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func mode(ff bool) string {
	if ff {
		return "FastFailover"
	}
	return "plain"
}

// pct is a window's net server CPU in % of one core.
func pct(d delta, bg float64) float64 {
	if d.dur == 0 {
		return 0
	}
	return 100 * netCPU(d, bg) / d.dur.Seconds()
}

// cpuCell formats a CPU figure of window d, or "–" when d's CPU is below
// what the counters resolve.
func cpuCell(d delta, bg float64, format func(float64) string, v float64) string {
	if !resolved(d, bg) {
		return "–"
	}
	return format(v)
}

func pctCell(d delta, bg float64) string {
	return cpuCell(d, bg, func(v float64) string { return fmt.Sprintf("%.1f", v) }, pct(d, bg))
}

func (r *capResult) markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	cmd, note := "go run . -scenarios CAP", ""
	if r.quick {
		cmd, note = "go run . -quick -scenarios CAP", " **Quick run: the sizes and windows are too small for the figures to mean anything.**"
	}
	w("## Capacity model\n\n")
	w("Measured by `%s` in `bench/` on %s (the run took %v): one run, on the machine below, with the client processes on the same machine as the server.%s\n\n",
		cmd, r.when.UTC().Format("2006-01-02 15:04 UTC"), r.elapsed.Round(time.Second), note)
	for _, m := range r.machine {
		w("- %s\n", m)
	}
	if r.maxConns > 0 {
		raised := ""
		if r.raised {
			raised = " (raised for this scenario with ALTER SYSTEM and a restart)"
		}
		w("- max_connections %d%s, max_locks_per_transaction %s; idle server CPU %.2f%% of a core, subtracted from every CPU figure below; a CPU figure is – where its window's CPU is below %v, where the counters' 10 ms ticks and background work (autovacuum, checkpoints) would dominate\n", r.maxConns, raised, pgSettings["max_locks_per_transaction"], 100*r.bg(), minCPU)
	}
	w("\n")
	if r.err != nil {
		w("CAP failed: %s\n\n", errCell(r.err))
		return b.String()
	}
	r.mdLeases(w)
	r.mdClients(w)
	r.mdWaiters(w)
	r.mdPgb(w)
	r.mdModel(w, deriveModel(r))
	return b.String()
}

func (r *capResult) mdLeases(w func(string, ...any)) {
	if len(r.leases) == 0 {
		return
	}
	bg, cc := r.bg(), r.cc
	w("### Leases held by one client\n\n")
	w("One `Client` (MaxConns %d) acquires N leases on distinct names with %d goroutines (`TryAcquire`); its renewal loop then sends one statement per renewal interval (TTL/3) for all of them. The window is about %v of whole renewal intervals (at least three), two intervals after the last acquisition. Server CPU is user+system time of all PostgreSQL processes (WAL writer, checkpointer and autovacuum included) minus the idle rate; per renewal it counts the loop's one statement per interval. Rows and execution time (planning + execution, without the commit's WAL flush) come from pg_stat_statements; *slowest renewal* is the slowest of the whole row, the acquisition burst included. *Lost* counts leases that ended before the window's end: a renewal must end before the local deadline of the previous one (TTL − TTL/5 − TTL/3, at most `StatementTimeout`, 10 s). Client memory is the Go heap + stacks per lease after GC; server bytes are the table and its index per lease right after the acquisitions (with the dead row versions of the renewals made meanwhile).\n\n",
		cc.acquirers, cc.acquirers, cc.leaseWindow)
	w("| mode | leases | TTL | time to acquire | acquisitions/s | lost | renewal statements/s | rows per statement | exec ms per renewal | slowest renewal ms | server CPU ms per renewal | CPU µs per renewed row | server CPU %% | server bytes per lease | client bytes per lease |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.leases {
		if x.err != nil {
			w("| %s | %d | %v | | | | | | | | | | | | %s |\n", mode(x.ff), x.n, x.ttl, errCell(x.err))
			continue
		}
		rows, exec := "–", "–"
		if x.d.stmts > 0 {
			rows = num(float64(x.d.rows) / float64(x.d.stmts))
			exec = num(x.d.srvTime.Seconds() * 1e3 / float64(x.d.stmts))
		}
		cpu := x.renewCPU(bg)
		heap := "–" // growth below zero: garbage of an earlier row freed meanwhile
		if x.perLease > 0 {
			heap = fmt.Sprintf("%.0f", x.perLease)
		}
		w("| %s | %d | %v | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %.0f | %s |\n", mode(x.ff), x.n, x.ttl, secs(x.acquire), num(float64(x.n)/x.acquire.Seconds()),
			x.lost, num(x.d.stmtsPerSec()), rows, exec, ms(x.renew.max), cpuCell(x.d.delta, bg, num, cpu*1e3), cpuCell(x.d.delta, bg, us, cpu/float64(x.n)), pctCell(x.d.delta, bg),
			float64(x.tableBytes)/float64(x.n), heap)
	}
	w("\n")
}

func (r *capResult) mdClients(w func(string, ...any)) {
	if len(r.clients) == 0 {
		return
	}
	bg, cc := r.bg(), r.cc
	w("### Clients\n\n")
	w("C clients (`Open` with MaxConns 1, TTL %v: a renewal statement every %v per client) in %d child processes, each client holding %d leases. *Start-up* is from starting the processes until every client holds its leases (16 clients at a time per process). Connections are the bench database's, less the measuring process's own; server memory is the private memory (Private_Clean + Private_Dirty) of all PostgreSQL processes, less the same before the clients started. The window is %d renewal intervals, after every client renewed once. Then one goroutine of the measuring process runs `TryAcquire` + `Release` on distinct names for %v. The clients hold leases and neither wait nor listen for notifications (a client listens only while it needs them: see docs/DESIGN-WAITING.md), so a release signals none of them.\n\n",
		cc.clientTTL, cc.clientTTL/3, cc.clientProcs, cc.clientLeases, cc.clientIntervals, cc.churn)
	w("| clients | start-up | connections | per client | server memory MiB | MiB per connection | leases lost | renewal statements/s | per client | server CPU %% | CPU µs per statement | try+release cycles/s | try p50 ms | release p50 ms | CPU µs per cycle |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.clients {
		if x.err != nil {
			w("| %d | | | | | | | | | | | | | | %s |\n", x.clients, errCell(x.err))
			continue
		}
		perConn, mem := "–", "–"
		if x.privMem() > 0 {
			mem = mib(float64(x.privMem()))
			if x.conns() > 0 {
				perConn = num(float64(x.privMem()) / float64(x.conns()) / (1 << 20))
			}
		}
		cycles := "–"
		if x.churn.dur > 0 {
			cycles = num(float64(x.cycles) / x.churn.dur.Seconds())
		}
		w("| %d | %s | %d | %s | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", x.clients, secs(x.start), x.conns(),
			num(float64(x.conns())/float64(x.clients)), mem, perConn, x.lost, num(x.d.stmtsPerSec()), num(x.d.stmtsPerSec()/float64(x.clients)),
			pctCell(x.d.delta, bg), cpuCell(x.d.delta, bg, us, x.stmtCPU(bg)), cycles, ms(x.try), ms(x.release), cpuCell(x.churn.delta, bg, us, x.cycleCPU(bg)))
	}
	w("\n")
}

func (r *capResult) mdWaiters(w func(string, ...any)) {
	if len(r.waits) == 0 {
		return
	}
	bg, cc := r.bg(), r.cc
	w("### Waiters\n\n")
	w("One client holds the names (default TTL 30 s, so a waiter's fallback poll, every `PollInterval` = %v, comes before the holder's expiry); W goroutines in child processes, one `Client` per process, block in `Acquire`, goroutine i on name i mod names. A client queues its own goroutines on one name locally, so one (client, name) pair makes the server statements however many goroutines wait behind it: *expected* is pairs ÷ %v plus the holder's renewals. Waiting is measured over %v. Then the holder releases the first name; whoever acquires it reports the time, holds it %v, reports, releases and waits again, for %v: a hand-off is the time from a release to the next acquisition (wall clock of one host, across processes); its statements and CPU are the chain's less the waiting rate. An overlap would be an acquisition before the previous holder's release.\n\n",
		pgleasePoll, pgleasePoll, cc.waitWindow, cc.chainHold, cc.chain)
	w("| mode | waiters | names | processes | waiting statements/s | expected | server CPU %% | connections | hand-offs | p50 ms | p90 ms | p99 ms | max ms | statements per hand-off | server CPU µs per hand-off | overlaps |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.waits {
		if x.err != nil && len(x.lat) == 0 {
			w("| %s | %d | %d | %d | | | | | | | | | | | | %s |\n", mode(x.ff), x.waiters, x.names, x.procs, errCell(x.err))
			continue
		}
		w("| %s | %d | %d | %d | %s | %s | %s | %d | %d | %s | %s | %s | %s | %s | %s | %d |\n", mode(x.ff), x.waiters, x.names, x.procs,
			num(x.d.stmtsPerSec()), num(x.expectedRate()), pctCell(x.d.delta, bg), x.d.conns, len(x.lat),
			ms(x.lat.pct(50)), ms(x.lat.pct(90)), ms(x.lat.pct(99)), ms(x.lat.pct(100)), num(x.handoffStmts()), cpuCell(x.chain.delta, 0, us, x.handoffCPU()), x.overlaps)
	}
	w("\n")
}

func (r *capResult) mdPgb(w func(string, ...any)) {
	if len(r.pgbs) == 0 && r.pgbSkipped == nil {
		return
	}
	bg, cc := r.bg(), r.cc
	w("### Waiters behind PgBouncer (transaction pooling)\n\n")
	if r.pgbSkipped != nil {
		w("Skipped: %s.\n\n", errCell(r.pgbSkipped))
	}
	if len(r.pgbs) == 0 {
		return
	}
	w("W clients (`Open` with the defaults, one `Client` each) in child processes, each with one goroutine blocked in `Acquire` on one name, which a client of the measuring process, connected directly, holds (default TTL, renewed). *PgBouncer*: the waiters connect through PgBouncer%s in transaction pooling mode (default_pool_size %d, started by the bench), so each finds its dedicated session proxied (its backend pid differs from the connection's): it runs everything on its pool, cannot LISTEN or watch the holder's doorbell, and relies on looking again, every `PollInterval` (%v) or at the holder's expiry when that comes first: if only the first waiter's looks found the release, a wake-up would average PollInterval/2. *direct*: the same waiters connected to the server. Waiting is measured over %v, %v after the waiters started: statements from pg_stat_statements (through PgBouncer they still run on the server), *expected* W ÷ %v plus the holder's renewals (through PgBouncer the server also runs PgBouncer's `SET application_name` whenever a client's transaction lands on a server connection another client used last, pglease naming each client's connections: the bench logs the window's statements by kind); *server connections* are the bench database's backends the waiters added (through PgBouncer: its server connections), PgBouncer's client and server connections come from its SHOW POOLS; PgBouncer's own CPU is not in the server's. Then %d rounds: the holder releases the round's name, and the *wake-up* is the time until the first waiter acquires it (wall clock of one host, across processes); the winner keeps it, every client then waits on the next round's name, which the holder releases after a random %v to %v, once every client has looked at it.\n\n",
		r.pgbVer, capPgbPool, pgleasePoll, cc.pgbWindow, cc.pgbSettle, pgleasePoll, cc.pgbRounds, pgleasePoll+time.Second, 2*pgleasePoll+time.Second)
	w("| waiters connect | waiters (clients) | processes | waiting statements/s | expected | server CPU %% | server connections | PgBouncer client connections | PgBouncer server connections | PgBouncer CPU %% | wake-ups | mean ms | p50 ms | p90 ms | max ms |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.pgbs {
		if x.err != nil && len(x.wake) == 0 {
			w("| %s | %d | %d | | | | | | | | | | | | %s |\n", x.via(), x.waiters, x.procs, errCell(x.err))
			continue
		}
		pgbC, pgbS, pgbCPU := "–", "–", "–"
		if x.bouncer {
			pgbC, pgbS = strconv.Itoa(x.pgb.clients), strconv.Itoa(x.pgb.servers)
			if x.d.dur > 0 {
				pgbCPU = fmt.Sprintf("%.1f", 100*x.pgbCPU.Seconds()/x.d.dur.Seconds())
			}
		}
		w("| %s | %d | %d | %s | %s | %s | %d | %s | %s | %s | %d | %s | %s | %s | %s |\n", x.via(), x.waiters, x.procs,
			num(x.d.stmtsPerSec()), num(x.expectedRate()), pctCell(x.d.delta, bg), x.conns(), pgbC, pgbS, pgbCPU, len(x.wake),
			ms(x.wake.mean()), ms(x.wake.pct(50)), ms(x.wake.pct(90)), ms(x.wake.pct(100)))
	}
	w("\n")
	for _, x := range r.pgbs {
		if x.err != nil && len(x.wake) > 0 { // failed after some rounds
			w("%s, %d waiters: %s\n\n", x.via(), x.waiters, errCell(x.err))
		}
	}
}

func usOr(v float64, ok bool) string {
	if !ok {
		return "–"
	}
	return us(v)
}

func (r *capResult) mdModel(w func(string, ...any), m capModel) {
	def, _ := pglease.Config{}.Plan("bench")
	T := def.TTL.Seconds()
	w("### Model\n\n")
	w("Per-unit costs from the tables above. Server CPU is that of all PostgreSQL processes, so it includes the WAL writer, checkpointer and autovacuum work the statements cause. T is the TTL (default %v), C the number of clients (each with one dedicated connection, which listens for notifications only while the client needs them: waits that do not watch a bell, observers, holders that hear step-down requests, and for 30 s after), C_L those listening, L̄ the leases per client, R the releases per second.\n\n", def.TTL)
	w("- **Renewal**: each client that holds leases sends one statement per renewal interval (T/3 by default) for all of them: **C × 3/T statements/s**")
	if m.stmtsPerClient > 0 {
		w(" (measured %s per client at T = %v, where 3/T = %s)", num(m.stmtsPerClient), m.clientTTL, num(3/m.clientTTL.Seconds()))
	}
	w(", costing **C × 3/T × (a + b × L̄)** of server CPU")
	if m.renewFixedOK || m.rowOK {
		w(", a ≈ %s µs per statement, b ≈ %s µs per renewed row", usOr(m.renewFixed, m.renewFixedOK), usOr(m.renewRow, m.rowOK))
		if m.rowsInFixed > 0 {
			w(" (a: CPU per statement with %d clients of %d leases, less %d × b, so it includes what their %d idle connections cost; b: the slope of CPU per renewal between the smallest and the largest plain lease count)", m.fixedClients, m.rowsInFixed, m.rowsInFixed, m.fixedConns)
		}
	}
	w(".\n")
	w("- **Renewal time**: one statement renews all of a client's leases and must end before the local deadline of the previous renewal, T − T/5 − T/3 with the default margin and interval, and within `StatementTimeout` (10 s): **L̄ × e ≤ min(10 s, 0.47 T)**")
	if m.execOK {
		w(", e ≈ %s µs of execution per row in the steady window of %d leases, with no acquisitions running (the slowest renewal of that row took %s ms, during the acquisition burst)", us(m.execRow), m.slowRenewAt, ms(m.slowRenew))
	}
	w(". The statement runs on one backend, so a busy server stretches it: leave a wide margin.\n")
	w("- **Acquire + release**: two statements; a release that wakes nobody waiting notifies the table's channel, and each listening session costs the server a wake-up (docs/BENCHMARKS.md measures about 16 µs per listener): **R × (c + f × C + 16 µs × C_L)** of server CPU for R acquire + release cycles per second")
	if m.cycleOK {
		w(", c ≈ %s µs per try+release cycle (with %d clients connected)", us(m.cycle), m.cycleListeners)
	}
	if m.fanoutOK {
		w(", f ≈ %s µs per connected client that does not listen", us(m.fanout))
	}
	w(".\n")
	w("- **Waiting**: a blocked `Acquire` costs nothing while it sleeps; each (client, name) pair with a waiter tries once per `PollInterval` (%v), or at the holder's expiry when that comes first: **pairs ÷ min(PollInterval, holder's remaining TTL) statements/s**", pgleasePoll)
	if m.pollOK {
		w(", p ≈ %s µs of CPU each", us(m.poll))
	}
	w(". Goroutines of one client waiting on one name count once.\n")
	w("- **Hand-off**: a release wakes the first queued client alone, so s1 and h1, the cost per further waiting client, should be near 0; a hand-off costs **s0 + s1 × k statements and h0 + h1 × k of server CPU** for k clients waiting on the name")
	if m.handoffFitOK {
		w(", s0 ≈ %s, s1 ≈ %s, h0 ≈ %s µs, h1 ≈ %s µs (a line through the plain one-name rows, averaged per k; an intercept the fit puts below zero is shown as 0)", num(max(0, m.s0)), num(m.s1), us(max(0, m.h0)), us(m.h1))
	}
	if m.handoffOK {
		w("; with k = %d: %s statements, h ≈ %s µs, latency p50 %s ms, p99 %s ms", m.handoffClients, num(m.handoffStmts), us(m.handoffCPU), ms(m.handoffP50), ms(m.handoffP99))
	}
	w(". Waiters behind one client's queue do not add to k.\n")
	w("- **Connections**: per client one dedicated connection, which runs its statements, renewals and waits, plus a pool connection while two of its statements are already on that one (at most MaxConns, default 4; closed after 30 s idle): **C ≤ max_connections** at steady state")
	if m.connsOK {
		w(" (measured %s per client with MaxConns 1", num(m.connsPerClient))
		if m.memOK {
			w(", %s MiB of server memory each", num(m.memPerConn/(1<<20)))
		}
		if m.connRate > 0 {
			w("; %s connections/s while %d clients started at once", num(m.connRate), m.connClients)
		}
		w(")")
	}
	w(". A waiting client adds a connection per further holder client it watches at once (at most 16), and one for its first watcher while its session listens.\n")
	if m.leaseOK {
		w("- **Memory**: about %.0f bytes of client memory (Go heap) per held lease, %.0f bytes per lease in the server's table and index.\n", m.bytesPerLease, m.serverBytesPerLease)
	}
	w("\nIn all: **server CPU ≈ C × 3/T × (a + b L̄) + R × (c + f C) + hand-offs/s × (h0 + h1 k) + waiting pairs ÷ 5 s × p**, plus the idle server; one server is enough while that stays well below its cores and C below max_connections.\n\n")

	budget := r.budget()
	w("### What one server of this machine handles\n\n")
	w("At 50%% of its %d cores (%s CPU-second per second), from the costs above; two significant digits at most, from one run, extrapolated beyond what was measured. Acquisitions and renewals also wait for a WAL flush (fsync on), which CPU does not show.\n\n", r.cpus, num(budget))
	w("| workload | formula | about |\n|---|---|---:|\n")
	if m.renewFixedOK && m.rowOK {
		per := 3 / T * (m.renewFixed + 5*m.renewRow)
		w("| clients renewing 5 leases each, default TTL | budget ÷ (3/T × (a + 5b)) | %s clients |\n", about(budget/per))
		if m.connsOK {
			w("| … the connections they need, %s per client (measured) | %s × clients | %s |\n", num(m.connsPerClient), num(m.connsPerClient), about(m.connsPerClient*budget/per))
		}
		w("| leases renewed in all, default TTL | budget × T/3 ÷ b | %s leases |\n", about(budget*T/3/m.renewRow))
	}
	if m.execOK {
		for _, ttl := range []time.Duration{def.TTL, 6 * time.Second} {
			w("| leases one client can renew, TTL %v (steady state) | min(10 s, 0.47 T) ÷ e | %s leases |\n", ttl, about(renewBudget(ttl).Seconds()/m.execRow))
		}
	}
	if m.cycleOK && m.fanoutOK {
		for _, c := range []float64{10, 100, 1000, 10000} {
			w("| releases/s with %s clients connected, none listening | budget ÷ (c + f × C) | %s/s |\n", about(c), about(budget/(m.cycle+c*m.fanout)))
		}
	} else if m.cycleOK {
		w("| releases/s with %d clients connected | budget ÷ c | %s/s |\n", m.cycleListeners, about(budget/m.cycle))
	}
	if m.acqRate > 0 {
		w("| acquisitions/s measured, one client, %d goroutines (round trips and WAL flushes, not CPU) | measured | %s/s |\n", r.cc.acquirers, about(m.acqRate))
	}
	if m.handoffFitOK && m.h1 > 0 {
		for _, k := range []int{1, 10, 100} {
			w("| hand-offs/s with k = %d (clients waiting on the name) | budget ÷ (h0 + h1 × k) | %s/s |\n", k, about(budget/max(m.h0+m.h1*float64(k), 1e-9)))
		}
	} else if m.handoffOK && m.handoffCPU > 0 {
		w("| hand-offs/s, %d clients waiting on each name | budget ÷ h | %s/s |\n", m.handoffClients, about(budget/m.handoffCPU))
	}
	if m.pollOK && m.poll > 0 {
		w("| (client, name) pairs waiting, PollInterval %v | budget × PollInterval ÷ p | %s |\n", pgleasePoll, about(budget*pgleasePoll.Seconds()/m.poll))
	}
	if m.memOK {
		w("| connections per GiB of server memory (private memory only) | 1 GiB ÷ memory per connection | %s |\n", about(float64(1<<30)/m.memPerConn))
	}
	w("\n")
	r.mdStop(w, m, budget, def.TTL)
	pgb := "PgBouncer, "
	if len(r.pgbs) > 0 {
		pgb = "PgBouncer beyond the waiters above, "
	}
	w("Not measured here: a server on its own machine (clients and server share these cores, so client CPU competes with the server's), network round trips (loopback only), replication and synchronous standbys, %sfast failover beyond %d leases, bloat and vacuum of a table renewed at this rate over hours, and several tables (each has its own notification channel, so a release wakes only the clients of its table). Other work on the machine (another benchmark, builds) may have run at the same time.\n\n",
		pgb, slices.Max(append([]int{0}, r.cc.leaseFFNs...)))
}

// mdStop renders where one server stops being enough as the number of
// clients on one table grows.
func (r *capResult) mdStop(w func(string, ...any), m capModel, budget float64, ttl time.Duration) {
	if !m.renewFixedOK || !m.rowOK || !m.cycleOK || !m.fanoutOK {
		return
	}
	const leases = 5
	w("### Where one server stops being enough\n\n")
	per := 1.0
	if m.connsOK {
		per = m.connsPerClient
	}
	w("Clients on one table, %d leases each, default TTL (%v), MaxConns 1 (%s connections per client, as measured), none listening, from the model above: the renewal CPU they cost, and how many acquire + release cycles per second the rest of the 50%% budget (%s CPU-second per second) allows.\n\n", leases, ttl, num(per), num(budget))
	w("| clients | connections | server memory (private) | renewal CPU, %% of a core | acquire + release cycles/s left in the budget |\n|---:|---:|---:|---:|---:|\n")
	for _, c := range []float64{100, 1000, 2000, 10000} {
		renew := c * 3 / ttl.Seconds() * (m.renewFixed + leases*m.renewRow)
		conns, mem := per*c, "–"
		if m.memOK {
			mem = fmt.Sprintf("%s GiB", num(conns*m.memPerConn/(1<<30)))
		}
		left := "none"
		if renew < budget {
			left = about((budget-renew)/(m.cycle+c*m.fanout)) + "/s"
		}
		w("| %s | %s | %s | %.0f | %s |\n", about(c), about(conns), mem, 100*renew, left)
	}
	w("\n")
}

// writeCapacity saves the CAP section, when there is one, as capacity.md
// in dir.
func writeCapacity(dir, md string) error {
	if md == "" {
		return nil
	}
	path := filepath.Join(dir, "capacity.md")
	logf("CAP: wrote %s (also appended to results.md)", path)
	return os.WriteFile(path, []byte(md), 0o644)
}
