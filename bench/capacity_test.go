package main

import (
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestTwoPoint(t *testing.T) {
	// y = 100 + 5x, given out of order with a middle point off the line.
	a, b, ok := twoPoint([]float64{10000, 1000, 100000}, []float64{60000, 5100, 500100})
	if !ok || math.Abs(a-100) > 1e-6 || math.Abs(b-5) > 1e-9 {
		t.Errorf("twoPoint = %v, %v, %v; want 100, 5, true", a, b, ok)
	}
	for _, c := range []struct{ xs, ys []float64 }{
		{nil, nil},
		{[]float64{1}, []float64{2}},
		{[]float64{3, 3}, []float64{1, 2}},
		{[]float64{1, 2}, []float64{1}},
	} {
		if _, _, ok := twoPoint(c.xs, c.ys); ok {
			t.Errorf("twoPoint(%v, %v) ok, want not", c.xs, c.ys)
		}
	}
}

func TestHandoffs(t *testing.T) {
	const t0 = 1000
	ev := func(got bool, name string, at int64) capEvent { return capEvent{got: got, name: name, at: at} }
	events := []capEvent{
		ev(true, "n0", 900),   // before the chain: ignored
		ev(false, "n0", 1040), // out of order on purpose
		ev(true, "n0", 1003),
		ev(true, "n1", 1004), // another name: ignored
		ev(true, "n0", 1050),
		ev(false, "n0", 1080),
		ev(true, "n0", 1080), // same stamp as the release: not an overlap
		ev(true, "n0", 1090), // no release since 1080: overlap
		ev(true, "n0", 5000), // after the end
	}
	lat, overlaps := handoffs(events, "n0", t0, 2000)
	want := durs{0, 3, 10}
	if !slices.Equal(lat, want) || overlaps != 1 {
		t.Errorf("handoffs = %v, %d overlaps; want %v, 1", lat, overlaps, want)
	}
	if lat, overlaps := handoffs(nil, "n0", t0, 2000); len(lat) != 0 || overlaps != 0 {
		t.Errorf("no events: %v, %d", lat, overlaps)
	}
}

func TestAbout(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{
		{0, "0"}, {-3, "0"}, {math.Inf(1), "0"}, {math.NaN(), "0"},
		{1.234, "1.20"}, {9.96, "10"}, {12.6, "13"}, {1264, "1,300"}, {31623, "32,000"},
		{617283.9, "620,000"}, {1.26e6, "1,300,000"},
	} {
		if got := about(c.v); got != c.want {
			t.Errorf("about(%v) = %q, want %q", c.v, got, c.want)
		}
	}
}

func TestWaitCasePairs(t *testing.T) {
	for _, c := range []struct {
		w    capWaitCase
		want int
	}{
		{capWaitCase{waiters: 10000, names: 1, procs: 10}, 10},
		{capWaitCase{waiters: 10000, names: 100, procs: 10}, 1000},
		{capWaitCase{waiters: 20, names: 100, procs: 10}, 20}, // fewer waiters than names
		{capWaitCase{}, 0},
	} {
		if got := c.w.pairs(); got != c.want {
			t.Errorf("%+v pairs = %d, want %d", c.w, got, c.want)
		}
	}
	r := capWaitRow{capWaitCase: capWaitCase{waiters: 1000, names: 1, procs: 10}, holderTTL: 30 * time.Second}
	if got := r.expectedRate(); math.Abs(got-2.1) > 1e-9 {
		t.Errorf("expectedRate = %v, want 2.1 (10 pairs / 5 s + 3 / 30 s)", got)
	}
}

func TestMaxConnsNeeded(t *testing.T) {
	cc := capConfig{acquirers: 16, clientNs: []int{10, 1000}, waits: []capWaitCase{{10000, 100, 10, true}}}
	// clients: 2 × 1000; waiters: 2 × 10 + 10 × 100 watchers = 1020.
	if got := cc.maxConnsNeeded(); got != 2000+16+100 {
		t.Errorf("maxConnsNeeded = %d, want 2116", got)
	}
	quick := capConfigFor(&config{quick: true})
	if got := quick.maxConnsNeeded(); got > 600 {
		t.Errorf("the quick run needs %d connections: it would restart the cluster", got)
	}
}

func TestCapSpecRoundTrip(t *testing.T) {
	s := capSpec{Role: "waiters", Table: "t", Prefix: "p-", Waiters: 7, Names: 3, FF: true, Hold: 20 * time.Millisecond}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var got capSpec
	if err := json.Unmarshal(b, &got); err != nil || got != s {
		t.Errorf("round trip = %+v, %v; want %+v", got, err, s)
	}
}

func TestKBField(t *testing.T) {
	if got := kbField("     1234 kB"); got != 1234 {
		t.Errorf("kbField = %d", got)
	}
	if got := kbField("junk"); got != 0 {
		t.Errorf("kbField(junk) = %d", got)
	}
}

func window(dur time.Duration, stmts, rows int64, cpu time.Duration, conns int) capDelta {
	return capDelta{delta: delta{dur: dur, stmts: stmts, cpu: cpu, conns: conns, srvTime: time.Duration(stmts) * time.Millisecond}, rows: rows}
}

// synthetic is a run whose costs are known: idle 1% of a core; a renewal
// costs 200 µs + 5 µs per row; a try+release 500 µs + 2 µs per connected
// client; a waiting statement 300 µs; a hand-off 12 statements and 3 ms.
func synthetic() *capResult {
	const sec = time.Second
	cc := capConfigFor(&config{})
	r := &capResult{cc: cc, when: time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC), elapsed: 5 * time.Minute,
		machine: []string{"test machine"}, cpus: 2, maxConns: 2116, raised: true}
	r.idle = window(10*sec, 0, 0, 100*time.Millisecond, 0)
	bgCPU := func(d time.Duration) time.Duration { return d / 100 }
	for _, n := range []int{1000, 10000, 100000} {
		// 10 s window, interval 2 s: 5 renewals.
		per := 200*time.Microsecond + time.Duration(n)*5*time.Microsecond
		d := window(10*sec, 5, int64(5*n), 5*per+bgCPU(10*sec), 3)
		// Execution time: 10 µs per row.
		d.srvTime = 5 * time.Duration(n) * 10 * time.Microsecond
		r.leases = append(r.leases, capLeaseRow{n: n, ttl: 6 * sec, interval: 2 * sec, acquire: time.Duration(n) * 300 * time.Microsecond,
			perLease: 700, tableBytes: int64(n) * 150, d: d, renew: renewStats{calls: 9, mean: time.Duration(n) * 10 * time.Microsecond, max: time.Duration(n) * 40 * time.Microsecond}})
	}
	// A row that lost leases does not count, whatever its figures.
	lossy := r.leases[1]
	lossy.n, lossy.lost = 200000, 5
	r.leases = append(r.leases, lossy, capLeaseRow{ff: true, n: 1000, ttl: 6 * sec, err: errors.New("boom | here")})
	for _, c := range []int{10, 100, 1000} {
		stmts := int64(c) * 4 // 8 s window, 0.5 per client per second
		per := 200*time.Microsecond + 5*5*time.Microsecond
		x := capClientRow{clients: c, procs: 5, leases: 5, ttl: 6 * sec, start: time.Second,
			base: capSnap{c: counters{conns: 2}, priv: 10 << 20},
			d:    window(8*sec, stmts, stmts*5, time.Duration(stmts)*per+bgCPU(8*sec), 2+2*c),
		}
		x.d.priv = 10<<20 + int64(2*c)*(2<<20)
		x.cycles = 1000
		x.churn = window(2*sec, 2000, 2000, 1000*(500*time.Microsecond+time.Duration(c)*2*time.Microsecond)+bgCPU(2*sec), 2+2*c)
		r.clients = append(r.clients, x)
	}
	// A hand-off: 2 + k statements, 1 ms + 200 µs × k of CPU.
	for _, w := range []capWaitCase{{1000, 1, 2, false}, {1000, 1, 10, false}, {10000, 100, 10, false}} {
		x := capWaitRow{capWaitCase: w, holderTTL: 30 * sec}
		stmts := int64(float64(w.pairs()) / 5 * 10)
		x.d = window(10*sec, stmts, 0, time.Duration(stmts)*300*time.Microsecond+bgCPU(10*sec), 2+2*w.procs)
		x.lat = durs{time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond}
		rate := x.d.cpu.Seconds() / x.d.dur.Seconds()
		k := int64(w.procs)
		// 5 s: the waiting rate times the chain is a whole number.
		x.chain = window(5*sec, int64(x.d.stmtsPerSec()*5)+3*(2+k), 0,
			time.Duration(rate*5*float64(sec))+3*(time.Millisecond+time.Duration(k)*200*time.Microsecond), 2+2*w.procs)
		r.waits = append(r.waits, x)
	}
	return r
}

func near(got, want float64) bool { return math.Abs(got-want) <= 1e-3*math.Abs(want)+1e-9 }

func TestDeriveModel(t *testing.T) {
	m := deriveModel(synthetic())
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"bg", m.bg, 0.01},
		{"renewRow", m.renewRow, 5e-6},
		{"renewFixed", m.renewFixed, 200e-6},
		{"stmtsPerClient", m.stmtsPerClient, 0.5},
		{"cycle", m.cycle, 520e-6},
		{"fanout", m.fanout, 2e-6},
		{"poll", m.poll, 300e-6},
		{"handoffStmts", m.handoffStmts, 12},
		{"handoffCPU", m.handoffCPU, 3e-3},
		{"s0", m.s0, 2},
		{"s1", m.s1, 1},
		{"h0", m.h0, 1e-3},
		{"h1", m.h1, 200e-6},
		{"connsPerClient", m.connsPerClient, 2},
		{"memPerConn", m.memPerConn, 2 << 20},
		{"bytesPerLease", m.bytesPerLease, 700},
		{"execRow", m.execRow, 10e-6},
		{"slowRenew", m.slowRenew.Seconds(), 4},
		{"connRate", m.connRate, 2000},
		{"serverBytesPerLease", m.serverBytesPerLease, 150},
	} {
		if !near(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if !m.renewFixedOK || !m.rowOK || !m.cycleOK || !m.fanoutOK || !m.pollOK || !m.handoffOK || !m.handoffFitOK || !m.connsOK || !m.memOK || !m.leaseOK {
		t.Errorf("a cost is missing: %+v", m)
	}
	if m.rowsInFixed != 5 || m.fixedClients != 1000 || m.cycleListeners != 10 || m.handoffClients != 10 || m.slowRenewAt != 100000 {
		t.Errorf("rowsInFixed %d, fixedClients %d, cycleListeners %d, handoffClients %d, slowRenewAt %d", m.rowsInFixed, m.fixedClients, m.cycleListeners, m.handoffClients, m.slowRenewAt)
	}
}

func TestDeriveModelEmpty(t *testing.T) {
	m := deriveModel(&capResult{})
	if m.renewFixedOK || m.rowOK || m.cycleOK || m.fanoutOK || m.pollOK || m.handoffOK || m.handoffFitOK || m.connsOK || m.memOK || m.leaseOK {
		t.Errorf("an empty run measured something: %+v", m)
	}
	md := (&capResult{}).markdown()
	if !strings.Contains(md, "## Capacity model") || strings.Contains(md, "NaN") || strings.Contains(md, "Inf") {
		t.Errorf("empty markdown:\n%s", md)
	}
}

func TestCapMarkdown(t *testing.T) {
	md := synthetic().markdown()
	for _, want := range []string{
		"## Capacity model",
		"`go run . -scenarios CAP`",
		"on 2026-12-03 12:00 UTC",
		"test machine",
		"max_connections 2116 (raised",
		"### Leases held by one client",
		"| plain | 100000 |",
		"| FastFailover | 1000 | 6s | | | | | | | | | | | | error: boom / here |",
		"### Clients",
		"| 1000 | 1.00 s | 2000 | 2.00 | 4000 | 2.00 | 0 | 500 | 0.50 |",
		"### Waiters",
		"| plain | 10000 | 100 | 10 | 200 | 200 |",
		"**C × 3/T statements/s**",
		"a ≈ 200 µs per statement, b ≈ 5.00 µs per renewed row",
		"e ≈ 10.0 µs of execution per row in the steady window of 100000 leases",
		"the slowest renewal of that row took 4000 ms",
		"s0 ≈ 2.00, s1 ≈ 1.00, h0 ≈ 1000 µs, h1 ≈ 200 µs",
		"with k = 10: 12.0 statements, h ≈ 3000 µs",
		"| hand-offs/s with k = 10 (clients waiting on the name) | budget ÷ (h0 + h1 × k) | 330/s |",
		"### Where one server stops being enough",
		// 1,000 clients: 1,000 × 3/30 s × 225 µs = 2.25% of a core for
		// renewals; (1 − 0.0225) ÷ (520 µs + 1,000 × 2 µs) cycles/s.
		"| 1,000 | 2,000 | 3.91 GiB | 2 | 390/s |",
		// 10 clients: 40 statements of 225 µs, below what the counters resolve
		"| 10 | 1.00 s | 20 | 2.00 | 40.0 | 2.00 | 0 | 5.00 | 0.50 | – | – |",
		"c ≈ 520 µs per try+release cycle (with 10 clients connected), f ≈ 2.00 µs per connected client that does not listen",
		"| … the connections they need, 2.00 per client (measured) |",
		"| leases one client can renew, TTL 30s (steady state) | min(10 s, 0.47 T) ÷ e | 1,000,000 leases |",
		"| leases one client can renew, TTL 6s (steady state) | min(10 s, 0.47 T) ÷ e | 280,000 leases |",
		"### What one server of this machine handles",
		"Not measured here",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	if strings.Contains(md, "NaN") || strings.Contains(md, "Inf") || strings.Contains(md, "%!") {
		t.Errorf("markdown has a bad number or verb:\n%s", md)
	}
	// The capacity figure of renewing clients follows from the costs:
	// budget ÷ (3/30 × (200 + 5 × 5) µs).
	if want := about(1 / (0.1 * 225e-6)); !strings.Contains(md, "| "+want+" clients |") {
		t.Errorf("markdown lacks the clients figure %s:\n%s", want, md)
	}
}

func TestCapMarkdownQuick(t *testing.T) {
	r := synthetic()
	r.quick = true
	if md := r.markdown(); !strings.Contains(md, "go run . -quick -scenarios CAP") || !strings.Contains(md, "Quick run") {
		t.Errorf("quick markdown does not say so:\n%s", md[:300])
	}
}

func TestRenewBudget(t *testing.T) {
	for _, c := range []struct{ ttl, want time.Duration }{
		{30 * time.Second, 10 * time.Second}, // 14 s, bounded by StatementTimeout
		{6 * time.Second, 2800 * time.Millisecond},
		{time.Second, 466666667},
	} {
		if got := renewBudget(c.ttl); (got - c.want).Abs() > time.Microsecond {
			t.Errorf("renewBudget(%v) = %v, want %v", c.ttl, got, c.want)
		}
	}
}
