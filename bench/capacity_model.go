package main

import (
	"slices"
	"time"
)

// ---- the model ----

// capModel is the per-unit costs derived from one run. CPU and time
// figures are in seconds; ok flags say whether the run measured them.
type capModel struct {
	bg float64 // idle server CPU, seconds per second

	renewFixed, renewRow float64 // server CPU per renewal statement, per renewed row
	renewFixedOK, rowOK  bool
	rowsInFixed          int // leases per client in the statements renewFixed comes from
	fixedClients         int // clients in that row
	fixedConns           int // their connections

	stmtsPerClient float64 // renewal statements/s per client at the clients' TTL
	clientTTL      time.Duration

	execRow     float64 // renewal execution time per row, at the largest plain lease count
	execOK      bool
	slowRenew   time.Duration // slowest renewal of that row (the acquisition burst included)
	slowRenewAt int           // its lease count

	cycle, fanout     float64 // try+release; per listening client
	cycleOK, fanoutOK bool
	cycleListeners    int
	acqRate           float64 // best plain acquisitions/s in the lease sweep

	poll   float64 // CPU per waiting statement
	pollOK bool

	handoffStmts   float64 // at the largest k measured
	handoffCPU     float64
	handoffClients int // k: clients waiting on the name in that row
	handoffOK      bool
	handoffP50     time.Duration
	handoffP99     time.Duration
	// statements and CPU of a hand-off as s0 + s1 k and h0 + h1 k
	s0, s1, h0, h1 float64
	handoffFitOK   bool

	connsPerClient      float64
	memPerConn          float64 // bytes
	connsOK, memOK      bool
	connRate            float64 // connections opened per second in the largest start-up
	connClients         int     // its clients
	bytesPerLease       float64 // client
	serverBytesPerLease float64
	leaseOK             bool
}

// twoPoint returns the intercept and slope of the line through the
// points of the smallest and the largest x.
func twoPoint(xs, ys []float64) (a, b float64, ok bool) {
	if len(xs) < 2 || len(xs) != len(ys) {
		return 0, 0, false
	}
	lo, hi := 0, 0
	for i := range xs {
		if xs[i] < xs[lo] {
			lo = i
		}
		if xs[i] > xs[hi] {
			hi = i
		}
	}
	if xs[hi] == xs[lo] {
		return 0, 0, false
	}
	b = (ys[hi] - ys[lo]) / (xs[hi] - xs[lo])
	return ys[lo] - b*xs[lo], b, true
}

// meanByX averages the ys of equal xs, in order of first appearance.
func meanByX(xs, ys []float64) (ux, uy []float64) {
	n := map[float64]int{}
	for i, x := range xs {
		j := slices.Index(ux, x)
		if j < 0 {
			ux, uy = append(ux, x), append(uy, 0)
			j = len(ux) - 1
		}
		uy[j] += ys[i]
		n[x]++
	}
	for j, x := range ux {
		uy[j] /= float64(n[x])
	}
	return ux, uy
}

func deriveModel(r *capResult) capModel {
	m := capModel{bg: r.bg()}
	// Renewal cost per row: the plain lease sweep, one statement per
	// interval carrying every lease (rows that lost leases excluded).
	var ns, cpus []float64
	var largest *capLeaseRow
	for i := range r.leases {
		x := &r.leases[i]
		if x.err != nil || x.ff || x.d.dur == 0 || x.lost > 0 {
			continue
		}
		ns = append(ns, float64(x.n))
		cpus = append(cpus, x.renewCPU(m.bg))
		m.acqRate = max(m.acqRate, float64(x.n)/x.acquire.Seconds())
		if largest == nil || x.n > largest.n {
			largest = x
		}
	}
	if largest != nil {
		m.bytesPerLease, m.serverBytesPerLease, m.leaseOK = largest.perLease, float64(largest.tableBytes)/float64(largest.n), true
		if e := largest.execPerRow(); e > 0 {
			m.execRow, m.execOK = e, true
			m.slowRenew, m.slowRenewAt = largest.renew.max, largest.n
		}
	}
	var fixedFromLeases float64
	if a, b, ok := twoPoint(ns, cpus); ok && b > 0 {
		m.renewRow, m.rowOK, fixedFromLeases = b, true, a
	}
	// Fixed cost per renewal statement: the clients sweep at its largest
	// client count (the most statements) whose CPU the counters resolve,
	// less its rows. Connections and memory: the largest client count.
	var big, most *capClientRow
	for i := range r.clients {
		x := &r.clients[i]
		if x.err != nil || x.d.stmts == 0 || x.lost > 0 {
			continue
		}
		if most == nil || x.clients > most.clients {
			most = x
		}
		if resolved(x.d.delta, m.bg) && (big == nil || x.clients > big.clients) {
			big = x
		}
	}
	if big != nil {
		m.renewFixed = big.stmtCPU(m.bg) - float64(big.leases)*m.renewRow
		m.rowsInFixed, m.fixedClients, m.fixedConns = big.leases, big.clients, big.conns()
		m.renewFixedOK = m.renewFixed > 0
	}
	if most != nil {
		m.stmtsPerClient = most.d.stmtsPerSec() / float64(most.clients)
		m.clientTTL, m.connClients = most.ttl, most.clients
		if c := most.conns(); c > 0 {
			m.connsPerClient, m.connsOK = float64(c)/float64(most.clients), true
			if p := most.privMem(); p > 0 {
				m.memPerConn, m.memOK = float64(p)/float64(c), true
			}
			if most.start > 0 {
				m.connRate = float64(c) / most.start.Seconds()
			}
		}
	}
	if !m.renewFixedOK && m.rowOK && fixedFromLeases > 0 {
		m.renewFixed, m.renewFixedOK, m.rowsInFixed, m.fixedClients = fixedFromLeases, true, 0, 1
	}
	// Try+release, and what each listening client adds to it.
	var ls, cyc []float64
	for _, x := range r.clients {
		if x.err == nil && x.cycles > 0 && resolved(x.churn.delta, m.bg) {
			ls = append(ls, float64(x.clients))
			cyc = append(cyc, x.cycleCPU(m.bg))
		}
	}
	if len(cyc) > 0 {
		i := slices.Index(ls, slices.Min(ls))
		m.cycle, m.cycleListeners, m.cycleOK = cyc[i], int(ls[i]), true
	}
	if _, b, ok := twoPoint(ls, cyc); ok && b > 0 {
		m.fanout, m.fanoutOK = b, true
	}
	// Waiting: CPU per statement where waiting makes the most statements.
	// Hand-off: plain rows on one name, as a line in k (the clients
	// waiting on it); the figures quoted are of the largest k with the
	// most waiters.
	var busiest, hand *capWaitRow
	var ks, hs, hc []float64
	for i := range r.waits {
		x := &r.waits[i]
		if x.err != nil {
			continue
		}
		if resolved(x.d.delta, m.bg) && (busiest == nil || x.d.stmts > busiest.d.stmts) {
			busiest = x
		}
		if x.ff || x.names != 1 || len(x.lat) == 0 {
			continue
		}
		ks, hs, hc = append(ks, float64(x.procs)), append(hs, x.handoffStmts()), append(hc, x.handoffCPU())
		if hand == nil || x.procs > hand.procs || (x.procs == hand.procs && x.waiters > hand.waiters) {
			hand = x
		}
	}
	if busiest != nil && busiest.d.stmts > 0 {
		m.poll, m.pollOK = netCPU(busiest.d.delta, m.bg)/float64(busiest.d.stmts), true
	}
	if hand != nil {
		m.handoffStmts, m.handoffCPU, m.handoffClients = hand.handoffStmts(), hand.handoffCPU(), hand.procs
		m.handoffP50, m.handoffP99, m.handoffOK = hand.lat.pct(50), hand.lat.pct(99), true
	}
	ux, uy := meanByX(ks, hs)
	_, uc := meanByX(ks, hc)
	if s0, s1, ok := twoPoint(ux, uy); ok {
		h0, h1, _ := twoPoint(ux, uc)
		m.s0, m.s1, m.h0, m.h1, m.handoffFitOK = s0, s1, h0, h1, true
	}
	return m
}

// budget is the server CPU the capacity figures allow: half of the
// server machine's cores, in CPU seconds per second.
func (r *capResult) budget() float64 { return float64(r.cpus) / 2 }

// pgleaseStmtTimeout is Config.StatementTimeout's default, which bounds a
// renewal statement.
const pgleaseStmtTimeout = 10 * time.Second

// renewBudget is how long one renewal statement may take with TTL ttl and
// the default margin (TTL/5) and interval (TTL/3): it must end before the
// local deadline of the previous renewal, and within StatementTimeout.
func renewBudget(ttl time.Duration) time.Duration {
	return min(pgleaseStmtTimeout, ttl-ttl/5-ttl/3)
}
