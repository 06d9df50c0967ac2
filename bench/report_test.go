package main

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// sampleReport has a row of every kind in every scenario: figures for the
// ratios and targets, a failed peer, a row without samples.
func sampleReport() *report {
	p := peerByID
	return &report{
		cfg:   quickConfig(),
		chart: "handoff.png",
		s1: []s1Row{
			{peer: p("pglease"), n: 1, pair: msDurs(1.2), try: msDurs(1), release: msDurs(0.2), opsPerSec: 800, stmtsPerOp: 1, srvPerOp: 20 * time.Microsecond},
			{peer: p("ref"), n: 1, pair: msDurs(1), try: msDurs(0.8), release: msDurs(0.2), opsPerSec: 1000, stmtsPerOp: 2, srvPerOp: 20 * time.Microsecond},
			{peer: p("pglock"), err: errors.New("table a|b\nmissing")},
			{peer: p("redsync"), n: 2, pair: msDurs(0.1, 0.3), try: msDurs(0.05, 0.1), release: msDurs(0.05, 0.2), opsPerSec: 5000},
		},
		s2: []s2Row{
			{peer: p("pglease"), acqPerSec: 500, jain: 1, minC: 10, maxC: 10, stmtsPerAcq: 1.5},
			{peer: p("pglease"), label: labelClients, acqPerSec: 50, jain: 0.5, minC: 0, maxC: 9, errs: 2, firstErr: errors.New("boom")},
			{peer: p("pglease-ff"), label: labelClients, acqPerSec: 40, jain: 0.9, minC: 2, maxC: 3, stmtsPerAcq: 7},
			{peer: p("ref"), acqPerSec: 250, jain: 0.9, minC: 5, maxC: 20, stmtsPerAcq: 12},
			{peer: p("ref50"), label: labelClients, acqPerSec: 50, jain: 0.3, minC: 0, maxC: 40, stmtsPerAcq: 4},
			{peer: p("advisory"), label: labelClients, err: errors.New("too many")},
			{peer: p("pglock"), acqPerSec: 100, jain: 0.07, maxC: 100, stmtsPerAcq: 3},
			{peer: p("pglock"), label: labelClients, acqPerSec: 25, jain: 0.2, maxC: 20, stmtsPerAcq: 3},
			{peer: p("etcd"), err: errors.New("no etcd")},
		},
		s3: []s3Row{
			{peer: p("pglease"), waiters: 8, lat: msDurs(1, 2, 3, 4, 30)},
			{peer: p("pglease-ff"), waiters: 8, lat: msDurs(1, 2)},
			{peer: p("advisory"), waiters: 8, lat: msDurs(0.5)},
			{peer: p("pglock"), waiters: 8, within: 300 * time.Millisecond},
			{peer: p("etcd"), waiters: 8, err: errors.New("etcd down")},
			{peer: p("pglease"), waiters: 8, oneClient: true, lat: msDurs(2, 2, 4)},
			{peer: p("pglease-ff"), waiters: 8, oneClient: true, lat: msDurs(3)},
			{peer: p("advisory"), waiters: 8, oneClient: true, lat: msDurs(0.25)},
			{peer: p("pglock"), waiters: 8, oneClient: true, within: 300 * time.Millisecond},
		},
		s4: []s4Row{
			{peer: p("pglease"), setting: "2s", ttl: 2 * time.Second, lat: durs{2500 * time.Millisecond}},
			{peer: p("pglease-ff"), setting: "default", ttl: 30 * time.Second, lat: durs{5 * time.Millisecond}},
			{peer: p("advisory"), setting: "session", lat: durs{3 * time.Millisecond}},
			{peer: p("etcd"), setting: "2s", ttl: 2 * time.Second, err: errors.New("etcd down")},
		},
		s5: []s5Row{
			{peer: p("pglease"), waiters: 20, procs: 1, window: 10 * time.Second, d: delta{dur: 10 * time.Second, stmts: 5, cpu: time.Second, conns: 3}},
			{peer: p("redislock"), waiters: 20, procs: 1, window: 10 * time.Second, d: delta{dur: 10 * time.Second, stmts: 4000, conns: 21}},
			{peer: p("etcd"), waiters: 20, procs: 1, err: errors.New("etcd down")},
		},
		s6: []s6Row{
			{peer: p("pglease"), n: 100, interval: 400 * time.Millisecond, acquireTime: 1500 * time.Millisecond, perLease: 1500,
				d: delta{dur: 800 * time.Millisecond, stmts: 4, cpu: 80 * time.Millisecond}, dSmall: &delta{dur: 800 * time.Millisecond, stmts: 2}},
			{peer: p("pglease-ff"), n: 100, interval: 400 * time.Millisecond, acquireTime: 3000 * time.Millisecond, perLease: 1000,
				d: delta{dur: 800 * time.Millisecond, stmts: 2}},
			{peer: p("pglock"), n: 20, interval: 400 * time.Millisecond, acquireTime: 2 * time.Second, perLease: 5000,
				d: delta{dur: 800 * time.Millisecond, stmts: 100}},
			{peer: p("etcd"), n: 100, err: errors.New("etcd down")},
		},
	}
}

// wantLines fails unless every line of want is a whole line of md.
func wantLines(t *testing.T, md string, want ...string) {
	t.Helper()
	lines := strings.Split(md, "\n")
	for _, w := range want {
		if !slices.Contains(lines, w) {
			t.Errorf("no line %q in\n%s", w, md)
		}
	}
}

func TestMarkdownRows(t *testing.T) {
	md := sampleReport().markdown()
	wantLines(t, md,
		// S1: ratios to the reference; statements only for PostgreSQL peers.
		"| pglease | 1 | 1.2 | 1.2 | 1.0 | 0.20 | 800 | 1.20× | 1.25× | 1.00 | 0.020 |",
		"| upsert reference | 1 | 1.0 | 1.0 | 0.80 | 0.20 | 1000 | 1.00× | 1.00× | 2.00 | 0.020 |",
		"| redsync | 2 | 0.10 | 0.30 | 0.05 | 0.05 | 5000 | 0.10× | 0.20× | – | – |",
		"| cirello.io/pglock | | | | | | | | | | error: table a/b missing |",
		// S2: ratios to the reference and to pglock; the first error.
		"| pglease | 500 | 2.00× | 5.00× | 1.00 | 10–10 | 1.50 | 0 | 0 |",
		// 16 clients: ratios to the rows of the same mode (no reference here).
		"| pglease (16 clients) | 50.0 | – | 2.00× | 0.50 | 0–9 | 0 | 0 | 2 (boom) |",
		"| upsert reference, 50 ms polling (16 clients) | 50.0 | – | 2.00× | 0.30 | 0–40 | 4.00 | 0 | 0 |",
		"| advisory lock (16 clients) | | | | | | | | error: too many |",
		"| etcd Mutex | | | | | | | | error: no etcd |",
		// S3: ratios to advisory locks of the same mode; rows without samples.
		"| 8 | one each | pglease | 5 | 3.0 | 30 | 30 | 30 | 6.00× | 60.0× | 0 |",
		"| 8 | one each | advisory lock | 1 | 0.50 | 0.50 | 0.50 | 0.50 | 1.00× | 1.00× | 0 |",
		"| 8 | one each | cirello.io/pglock | 0 | | | | | | | no hand-off within 300ms |",
		"| 8 | one each | etcd Mutex | 0 | | | | | | | error: etcd down |",
		"| 8 | one for all | pglease | 3 | 2.0 | 4.0 | 4.0 | 4.0 | 8.00× | 16.0× | 0 |",
		"| 8 | one for all | cirello.io/pglock | 0 | | | | | | | no hand-off within 300ms |",
		"![hand-off latency CDF](handoff.png)",
		// S4: the overshoot past the TTL; session-bound rows have none.
		"| pglease | 2s | 2.00 s | 1 | 2.50 s | 2.50 s | +0.50 s |",
		"| advisory lock | session | session | 1 | 3.0 ms | 3.0 ms | – |",
		"| etcd Mutex | 2s | 2.00 s | 0 | | | error: etcd down |",
		// S5: etcd has no connection count.
		"| pglease | 20 | 1 | 10s | 0.50 | 0.50 | 10.0 | 3 |",
		"| bsm/redislock | 20 | 1 | 10s | 400 | 400 | 0.0 | 21 |",
		// S6: statements per renewal interval (two intervals measured).
		"| pglease | 100 | 1.00 | 2.00 | 1500 | 10.0 | 1.50 s |",
		"| etcd Mutex | 100 | | | | | error: etcd down |",
		// Contention: the layout, – where a peer did not run.
		"| case | pglease | pglease FastFailover | cirello.io/pglock | upsert reference, 50 ms polling | advisory lock |",
		"| 16 separate clients, one name, acquire → release loop: acquisitions/s | 50.0 (Jain 0.50) | 40.0 (Jain 0.90) | 25.0 (Jain 0.20) | 50.0 (Jain 0.30) | error (see S2) |",
		"| 16 goroutines of one client, same loop: acquisitions/s | 500 (Jain 1.00) | – | 100 (Jain 0.07) | – | – |",
		"| hand-off to the next of 8 waiters, all in one client: p50 | 2.0 ms (p99 4.0 ms, n=3) | 3.0 ms (p99 3.0 ms, n=1) | no hand-off within 300ms | – | 0.25 ms (p99 0.25 ms, n=1) |",
		"| 100 leases acquired by one client | 1.50 s; 2.00 renewal statements per 400ms | 3.00 s; 1.00 renewal statements per 400ms | 2.00 s for 20 leases; 50.0 renewal statements per 400ms | – | – |",
		"| overlapping critical sections (every S2 and S3 row) | 0 | 0 | 0 | 0 | 0 |",
	)
}

func TestMarkdownTargets(t *testing.T) {
	r := sampleReport()
	wantLines(t, r.markdown(),
		"| S1 try+release ≤ 1.25× reference | p50 1.2 ms vs 1.0 ms = 1.20×; ops/s 800 vs 1000 | **met** |",
		"| S2 16 goroutines of one client: ≥ 2× pglock acquisitions/s | 500/s vs 100/s = 5.0× (fairness 1.00 vs 0.07) | **met** |",
		"| S3 pglease, 8 waiters: p50 ≤ 5 ms, p99 ≤ 25 ms | p50 3.0 ms, p99 30 ms (n=5) | **missed** |",
		"| S3 pglease FastFailover, 8 waiters: p50 ≤ 5 ms, p99 ≤ 25 ms | p50 1.0 ms, p99 2.0 ms (n=2) | **met** |",
		"| S4 plain (2s TTL) ≤ TTL + 1 s | max 2.50 s vs TTL 2.00 s (n=1) | **met** |",
		"| S4 fast failover (default TTL) p50 ≤ 1 s | p50 5.0 ms, max 5.0 ms (n=1) | **met** |",
		// 10 s window: at most 1·(⌊10/5⌋+1) polls + ⌊10/10⌋+1 renewals = 5.
		"| S5 pglease, 20 waiters in 1 process(es): ≤ 1 statement per process per poll interval (5 s), plus the holder's renewals | 0.50 statements/s (5 in 10 s); at most 5 allowed (0.50/s) | **met** |",
		"| S6 pglease: renewal statements per interval independent of lease count | 2.00 statements per interval at 100 leases, 1.00 at 10 | **met** |",
		"| S6 pglease: ≤ 2 KiB client memory per lease | 1500 bytes | **met** |",
		"| (a) S2 16 separate clients: pglease ≥ 2× pglock acquisitions/s | 50.0/s vs 25.0/s = 2.00× (fairness 0.50 vs 0.20) | **met** |",
		"| (a) S2 16 separate clients: pglease ≥ upsert reference with 50 ms polling acquisitions/s | 50.0/s vs 50.0/s = 1.00× (fairness 0.50 vs 0.30) | **met** |",
		"| (a) S2 16 separate clients: FastFailover ≥ 0.8× pglease acquisitions/s | 40.0/s vs 50.0/s = 0.80× (fairness 0.90 vs 0.50) | **met** |",
		"| (b) S3 8 waiters in one client: FastFailover hand-off p50 ≤ 1.5× pglease's | p50 3.0 ms vs 2.0 ms = 1.50× (p99 3.0 vs 4.0 ms; n=1, 3) | **met** |",
		"| (c) S6: FastFailover acquires 100 leases in one client in ≤ 2× pglease's time | 3.00 s vs 1.50 s for 100 leases = 2.00×; renewal statements per 400ms: 1.00 vs 2.00 | **met** |",
		"| (d) S2, S3: no overlapping critical sections | 0 in 7 rows of pglease and FastFailover; other peers: 0 in 8 rows | **met** |",
	)

	// Just past each bound.
	r.s1[0].pair = msDurs(1.26)
	r.s2[0].acqPerSec = 199
	r.s3[1].lat = msDurs(1, 26)
	r.s4[0].lat = durs{3001 * time.Millisecond}
	r.s4[1].lat = durs{1001 * time.Millisecond}
	r.s5[0].d.stmts = 6
	r.s6[0].d.stmts = 6
	r.s6[0].perLease = 2049
	r.s2[1].acqPerSec = 49 // 16 clients: 1.96× pglock, 0.98× ref50
	r.s2[2].acqPerSec = 38 // 0.78× pglease
	r.s3[6].lat = msDurs(3.1)
	r.s6[1].acquireTime = 3100 * time.Millisecond
	r.s6[1].d.stmts = 6
	r.s6[1].perLease = 2049
	r.s3[0].violations = 1
	r.s3[2].violations = 2
	md := r.markdown()
	wantLines(t, md, "| (d) S2, S3: no overlapping critical sections | 1 in 7 rows of pglease and FastFailover; other peers: 2 in 8 rows (advisory lock 2) | **missed** |")
	for _, target := range []string{"| S1 ", "| S2 ", "| S3 pglease FastFailover", "| S4 plain", "| S4 fast", "| S5 pglease", "| S6 pglease: renewal", "| S6 pglease: ≤ 2 KiB",
		"| (a) S2 16 separate clients: pglease ≥ 2×", "| (a) S2 16 separate clients: pglease ≥ upsert", "| (a) S2 16 separate clients: FastFailover", "| (b) ", "| (c) ", "| (d) "} {
		for _, l := range strings.Split(md, "\n") {
			if strings.HasPrefix(l, target) && !strings.HasSuffix(l, "| **missed** |") {
				t.Errorf("past its bound, still met: %s", l)
			}
		}
	}
	if strings.Contains(md, "**met**") {
		t.Errorf("a target is met past its bound:\n%s", md)
	}
}

// TestMarkdownTables checks that every row of every table has as many cells
// as its header, so that no figure lands under another column's title.
func TestMarkdownTables(t *testing.T) {
	md := sampleReport().markdown()
	var header []string
	tables := 0
	for _, l := range strings.Split(md, "\n") {
		if !strings.HasPrefix(l, "|") {
			header = nil
			continue
		}
		cells := strings.Count(l, "|") - 1
		if header == nil {
			header = []string{l}
			tables++
			continue
		}
		if want := strings.Count(header[0], "|") - 1; cells != want {
			t.Errorf("%d cells, header has %d:\n%s\n%s", cells, want, header[0], l)
		}
	}
	if tables != 8 {
		t.Errorf("%d tables, want 8 (six scenarios, contention and the targets)", tables)
	}
}

func TestMarkdownLeavesOutScenariosNotRun(t *testing.T) {
	r := &report{cfg: quickConfig(), s3: []s3Row{{peer: peerByID("pglease"), waiters: 1, lat: msDurs(1)}}}
	md := r.markdown()
	for _, h := range []string{"## S1 ", "## S2 ", "## S4 ", "## S5 ", "## S6 "} {
		if strings.Contains(md, h) {
			t.Errorf("report has %q with no rows of it", h)
		}
	}
	wantLines(t, md, "## S3 — hand-off: release → acquired by a blocked waiter", "## Targets", "| 1 | one each | pglease | 1 | 1.0 | 1.0 | 1.0 | 1.0 | – | – | 0 |")
	if strings.Contains(md, "![") {
		t.Error("report links a chart that was not drawn")
	}
	if !strings.Contains(md, "quick (smoke run") {
		t.Error("a quick run's report does not say so")
	}
	// Without the figures of the other targets the targets table has only
	// the overlap count of S3, and no contention table (no 8-waiter rows).
	want := "| (d) S2, S3: no overlapping critical sections | 0 in 1 row of pglease and FastFailover | **met** |\n\n"
	if _, after, _ := strings.Cut(md, "| target | figure | verdict |\n|---|---|---|\n"); after != want {
		t.Errorf("targets without figures: %q", after)
	}
	if strings.Contains(md, "## Contention") {
		t.Error("contention table without its figures")
	}
}

func TestErrCell(t *testing.T) {
	if got, want := errCell(errors.New("a|b\nc")), "error: a/b c"; got != want {
		t.Errorf("errCell = %q, want %q", got, want)
	}
	long := strings.Repeat("x", 130)
	if got, want := errCell(errors.New(long)), "error: "+long[:120]+"…"; got != want {
		t.Errorf("errCell of 130 characters = %q, want %q", got, want)
	}
	if got, want := errCell(errors.New(long[:120])), "error: "+long[:120]; got != want {
		t.Errorf("errCell of 120 characters = %q, want %q", got, want)
	}
}

// A hand-off that never happens is reported as such, in the contention
// table and in target (b), and rows of scenarios that did not run are left
// out of the contention table.
func TestContentionWithoutHandoff(t *testing.T) {
	p := peerByID
	limit := 6 * time.Second
	r := &report{cfg: fullConfig(), s3: []s3Row{
		{peer: p("pglease"), waiters: 8, oneClient: true, within: limit, lat: msDurs(1.5)},
		{peer: p("pglease-ff"), waiters: 8, oneClient: true, within: limit},
		{peer: p("pglock"), waiters: 8, oneClient: true, within: limit, err: errors.New("boom")},
	}}
	md := r.markdown()
	wantLines(t, md,
		"| hand-off to the next of 8 waiters, all in one client: p50 | 1.5 ms (p99 1.5 ms, n=1) | no hand-off within 6s | error (see S3) | – | – |",
		"| (b) S3 8 waiters in one client: FastFailover hand-off p50 ≤ 1.5× pglease's | FastFailover: no hand-off within 6s; pglease p50 1.5 ms (n=1) | **missed** |",
		"| overlapping critical sections (every S2 and S3 row) | 0 | 0 | – | – | – |",
	)
	for _, gone := range []string{"| 16 separate clients", "| 16 goroutines", "leases acquired by one client"} {
		if strings.Contains(md, gone) {
			t.Errorf("contention row %q without its scenario", gone)
		}
	}

	r.s3[0].lat, r.s3[1].lat = nil, msDurs(2)
	wantLines(t, r.markdown(), "| (b) S3 8 waiters in one client: FastFailover hand-off p50 ≤ 1.5× pglease's | pglease: no hand-off within 6s | **not measured** |")
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 10000: "10,000", 1234567: "1,234,567", -1000: "-1,000"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}
