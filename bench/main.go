// Command bench compares pglease with other lock services side by side:
// cirello.io/pglock, raw PostgreSQL advisory locks, a single-statement
// lease-table upsert (the physical limit of table leases), redsync and
// bsm/redislock on Redis, and etcd's concurrency.Mutex. It starts its own
// servers on loopback (a throwaway PostgreSQL cluster, Redis on port 16379,
// etcd on 12379/12380), runs seven scenarios and writes a markdown report
// and a PNG chart of hand-off latencies. The scenarios: S1 uncontended
// try + release on distinct names; S2 16 goroutines contending for one
// name, sharing one client and (PostgreSQL peers) with a client each; S3
// hand-off from a release to a blocked waiter, with a client each and (8
// waiters) all in one client; S4 failover after the holder's process is
// killed; S5 the server work of waiters blocked on a held name; S6 one
// process holding many leases; S7 S3's hand-off while more clients wait
// on other names. The report gathers the contention figures (S2, S3 in
// one client, S6) in one table with their targets.
//
//	go run . [-quick] [-out DIR] [-scenarios S1,S3] [-peers pglease,etcd]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

type config struct {
	quick     bool
	scenarios map[string]bool
	peers     map[string]bool

	s1Dur    time.Duration
	s1Warmup int

	s2Dur time.Duration

	s3Samples int
	s3Cap     time.Duration
	s3Hold    time.Duration

	s4Default bool
	s4Short   int // samples at the ~2 s TTL
	s4Fast    int // samples for session-bound peers

	s5Waiters, s5Multi, s5Procs int
	s5Settle, s5Window          time.Duration
	s5LongWindow                time.Duration   // for the peers in s5Long
	s5Long                      map[string]bool // peers whose waiting cost is a few statements per poll interval
	s5MultiPeers                map[string]bool

	s6N     int
	s6NFor  map[string]int // peers that run with fewer leases
	s6TTL   time.Duration
	s6Small map[string]bool

	s7Others   []int // clients waiting on other names, per row
	s7Settle   time.Duration
	s7Holdings []string // how the holder of the names they wait on took them (holdWaited…)

	fleetNs     []int // FLEET: the fleet sizes
	fleetSettle time.Duration

	capParts map[string]bool // CAP: the parts to run (all when empty)
}

// waitTTL is the TTL a peer uses in the waiting scenarios (S2, S3, S5).
// pglock's blocked waiters sleep a whole lease duration between attempts
// (20 s by default), so it gets a 2 s lease there; every other peer keeps
// its default.
func (c *config) waitTTL(p *peer) time.Duration {
	if p.id == "pglock" {
		return 2 * time.Second
	}
	return 0
}

func fullConfig() *config {
	return &config{
		s1Dur: 2 * time.Second, s1Warmup: 50,
		s2Dur:     5 * time.Second,
		s3Samples: 200, s3Cap: 3 * time.Second, s3Hold: 10 * time.Millisecond,
		s4Default: true, s4Short: 3, s4Fast: 5,
		s5Waiters: 200, s5Multi: 1000, s5Procs: 10,
		s5Settle: time.Second, s5Window: 5 * time.Second,
		s5LongWindow: 10 * time.Second, s5Long: set("pglease", "pglease-ff", "etcd"),
		s5MultiPeers: set("pglease", "pglease-ff", "redislock", "etcd"),
		s6N:          10000, s6TTL: 6 * time.Second,
		// pglock renews each lock with two statements of its own: 10,000 of
		// them every 2 s saturate this 2-core server.
		s6NFor:   map[string]int{"pglock": 2000},
		s6Small:  set("pglease", "pglease-ff", "etcd"),
		s7Others: []int{0, 50, 200, 500}, s7Settle: 30 * time.Second, s7Holdings: s7Holdings,
		// The settle outlasts a pool's idle time (30 s): a client's Open
		// pings through its pool, whose connection then idles until then.
		fleetNs: []int{10, 100, 1000}, fleetSettle: 35 * time.Second,
	}
}

func quickConfig() *config {
	return &config{
		quick: true,
		s1Dur: 150 * time.Millisecond, s1Warmup: 5,
		s2Dur:     250 * time.Millisecond,
		s3Samples: 10, s3Cap: 300 * time.Millisecond, s3Hold: 5 * time.Millisecond,
		s4Default: false, s4Short: 1, s4Fast: 1,
		s5Waiters: 20, s5Multi: 20, s5Procs: 2,
		s5Settle: 200 * time.Millisecond, s5Window: 300 * time.Millisecond,
		s5LongWindow: 300 * time.Millisecond,
		s5MultiPeers: set("pglease"),
		s6N:          100, s6TTL: 1200 * time.Millisecond,
		s6Small:  set("pglease"),
		s7Others: []int{0, 5}, s7Settle: 300 * time.Millisecond, s7Holdings: []string{holdWaited},
		fleetNs: []int{10, 50}, fleetSettle: 500 * time.Millisecond,
	}
}

func set(xs ...string) map[string]bool {
	m := map[string]bool{}
	for _, x := range xs {
		if x = strings.TrimSpace(x); x != "" {
			m[x] = true
		}
	}
	return m
}

func main() {
	var (
		quick     = flag.Bool("quick", false, "smoke run: every scenario, tiny durations")
		out       = flag.String("out", "out", "directory for results.md and handoff.png")
		scenarios = flag.String("scenarios", "S1,S2,S3,S4,S5,S6,S7", "scenarios to run (also CAP and FLEET, pglease only)")
		peerList  = flag.String("peers", "", "peers to run (default all): "+peerIDs())
		others    = flag.String("others", "", "S7: the numbers of clients waiting on other names, one row each (default 0,50,200,500; quick 0,5)")
		s7settle  = flag.Duration("s7settle", 0, "S7: how long the others wait before the first hand-off sample (default 30s; quick 300ms)")
		holders   = flag.String("s7holders", "", "S7: how the holder of the names the others wait on took them, one set of rows each: waited,tried,ff,shared (pglease peers; default waited,tried,ff,shared; quick waited)")
		fleet     = flag.String("fleet", "", "FLEET: the fleet sizes (default 10,100,1000; quick 10,50)")
		capPart   = flag.String("cappart", "", "CAP: the parts to run (default all): "+strings.Join(capParts, ","))
		child     = flag.String("child", "", "internal: child role (hold, wait)")
		cPeer     = flag.String("peer", "", "internal: child's peer")
		cName     = flag.String("name", "", "internal: child's lease name")
		cTTL      = flag.Duration("ttl", 0, "internal: child's TTL")
		cWaiters  = flag.Int("waiters", 0, "internal: child's waiter count")
		cpuProf   = flag.String("cpuprofile", "", "write the measuring process's CPU profile to this file (go tool pprof)")
	)
	flag.Parse()
	if *cpuProf != "" && *child == "" {
		f, err := os.Create(*cpuProf)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: -cpuprofile:", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *child != "" {
		os.Exit(runChild(ctx, *child, *cPeer, *cName, *cTTL, *cWaiters))
	}
	cfg := fullConfig()
	if *quick {
		cfg = quickConfig()
	}
	cfg.scenarios = set(strings.Split(strings.ToUpper(*scenarios), ",")...)
	var err error
	if *others != "" {
		if cfg.s7Others, err = parseInts(*others); err != nil {
			fmt.Fprintln(os.Stderr, "bench: -others:", err)
			os.Exit(2)
		}
	}
	if *fleet != "" {
		if cfg.fleetNs, err = parseInts(*fleet); err != nil {
			fmt.Fprintln(os.Stderr, "bench: -fleet:", err)
			os.Exit(2)
		}
	}
	if *s7settle > 0 {
		cfg.s7Settle = *s7settle
	}
	if *capPart != "" {
		cfg.capParts = set(strings.Split(strings.ToLower(*capPart), ",")...)
		for p := range cfg.capParts {
			if !slices.Contains(capParts, p) {
				fmt.Fprintf(os.Stderr, "bench: -cappart: unknown part %q (known: %s)\n", p, strings.Join(capParts, ","))
				os.Exit(2)
			}
		}
	}
	if *holders != "" {
		if cfg.s7Holdings, err = parseHoldings(*holders); err != nil {
			fmt.Fprintln(os.Stderr, "bench: -s7holders:", err)
			os.Exit(2)
		}
	}
	if *peerList != "" {
		cfg.peers = set(strings.Split(*peerList, ",")...)
		for id := range cfg.peers {
			if peerByID(id) == nil {
				fmt.Fprintf(os.Stderr, "bench: unknown peer %q (known: %s)\n", id, peerIDs())
				os.Exit(2)
			}
		}
	}
	if err := run(ctx, cfg, *out); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func peerIDs() string {
	var ids []string
	for _, p := range peers {
		ids = append(ids, p.id)
	}
	return strings.Join(ids, ",")
}

func runChild(ctx context.Context, role, peerID, name string, ttl time.Duration, waiters int) int {
	e := &env{dsn: os.Getenv("BENCH_DSN"), etcdURL: os.Getenv("BENCH_ETCD")}
	go reportRequests()
	var err error
	switch role {
	case "hold":
		err = childHold(ctx, e, peerID, name, ttl)
	case "wait":
		err = childWait(ctx, e, peerID, name, waiters)
	case "cap":
		err = capChild(ctx, e)
	default:
		err = fmt.Errorf("unknown child role %q", role)
	}
	fmt.Fprintf(os.Stderr, "bench child %s %s: %v\n", role, peerID, err)
	return 1
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

// selected returns the peers to run, in report order, that pass keep.
func (c *config) selected(keep func(*peer) bool) []*peer {
	var out []*peer
	for _, p := range peers {
		if (c.peers == nil || c.peers[p.id]) && (keep == nil || keep(p)) {
			out = append(out, p)
		}
	}
	return out
}

func run(ctx context.Context, cfg *config, outDir string) error {
	start := time.Now()
	peerScenarios := false // CAP and FLEET run pglease only
	for s := range cfg.scenarios {
		peerScenarios = peerScenarios || (s != "CAP" && s != "FLEET")
	}
	needRedis := peerScenarios && len(cfg.selected(func(p *peer) bool { return p.backend == "redis" })) > 0
	needEtcd := peerScenarios && len(cfg.selected(func(p *peer) bool { return p.backend == "etcd" })) > 0
	e, err := startEnv(ctx, logf, needRedis, needEtcd)
	if err != nil {
		return err
	}
	defer e.close()
	rep := &report{cfg: cfg, machine: machineInfo(ctx, e)}

	if cfg.scenarios["S1"] {
		// ref50 tries exactly as ref does; only its waiting differs.
		for _, p := range cfg.selected(func(p *peer) bool { return p.id != "ref50" }) {
			r := runS1(ctx, e, cfg, p)
			logf("S1 %-10s n=%d pair p50=%v p99=%v ops/s=%.0f err=%v", p.id, r.n, r.pair.pct(50), r.pair.pct(99), r.opsPerSec, r.err)
			rep.s1 = append(rep.s1, r)
		}
	}
	if cfg.scenarios["S2"] {
		for _, p := range cfg.selected(nil) {
			for _, shared := range []bool{true, false} {
				if !shared && p.backend != "pg" {
					continue
				}
				r := runS2(ctx, e, cfg, p, shared)
				logf("S2 %-10s%s acq/s=%.1f jain=%.2f min=%d max=%d viol=%d errs=%d %v %v", p.id, r.label, r.acqPerSec, r.jain, r.minC, r.maxC, r.violations, r.errs, r.firstErr, r.err)
				rep.s2 = append(rep.s2, r)
			}
		}
	}
	if cfg.scenarios["S3"] {
		for _, c := range []struct {
			waiters   int
			oneClient bool
		}{{1, false}, {8, false}, {8, true}} {
			for _, p := range cfg.selected(nil) {
				r := runS3(ctx, e, cfg, p, c.waiters, c.oneClient)
				logf("S3 %-10s waiters=%d one-client=%v n=%d p50=%v p99=%v viol=%d err=%v", p.id, c.waiters, c.oneClient, len(r.lat), r.lat.pct(50), r.lat.pct(99), r.violations, r.err)
				rep.s3 = append(rep.s3, r)
			}
		}
	}
	if cfg.scenarios["S7"] {
		for _, p := range cfg.selected(func(p *peer) bool { return s7Peers[p.id] }) {
			for _, holding := range holdingsFor(p.id, cfg.s7Holdings) {
				for _, others := range cfg.s7Others {
					r := runS7(ctx, e, cfg, p, holding, others)
					rep.s7 = append(rep.s7, r)
					logf("S7 %-10s holder=%s others=%d start=%v n=%d p50=%v p99=%v viol=%d conns=%d per-client=%s retried=%d err=%v", p.id, holding, others, r.start.Round(time.Millisecond),
						len(r.lat), r.lat.pct(50), r.lat.pct(99), r.violations, r.conns, rep.s7PerClient(&rep.s7[len(rep.s7)-1]), r.retried, r.err)
				}
			}
		}
	}
	if cfg.scenarios["S4"] {
		rep.s4 = runS4All(ctx, e, cfg)
	}
	if cfg.scenarios["S5"] {
		for _, p := range cfg.selected(func(p *peer) bool { return p.renews }) {
			r := runS5(ctx, e, cfg, p, cfg.s5Waiters, 1)
			logf("S5 %-10s waiters=%d stmts/s=%.1f cpu=%.1f%% conns=%d err=%v", p.id, r.waiters, r.d.stmtsPerSec(), r.d.cpuPercent(), r.d.conns, r.err)
			rep.s5 = append(rep.s5, r)
			if cfg.s5MultiPeers[p.id] {
				r := runS5(ctx, e, cfg, p, cfg.s5Multi, cfg.s5Procs)
				logf("S5 %-10s waiters=%d/%d procs stmts/s=%.1f cpu=%.1f%% conns=%d err=%v", p.id, r.waiters, r.procs, r.d.stmtsPerSec(), r.d.cpuPercent(), r.d.conns, r.err)
				rep.s5 = append(rep.s5, r)
			}
		}
	}
	if cfg.scenarios["S6"] {
		for _, p := range cfg.selected(func(p *peer) bool { return p.renews }) {
			r := runS6(ctx, e, cfg, p)
			logf("S6 %-10s n=%d acquire=%v stmts/interval=%.1f bytes/lease=%.0f cpu=%.1f%% err=%v", p.id, r.n, r.acquireTime.Round(time.Millisecond),
				float64(r.d.stmts)/2, r.perLease, r.d.cpuPercent(), r.err)
			rep.s6 = append(rep.s6, r)
		}
	}
	if cfg.scenarios["FLEET"] {
		rep.fleet, rep.fleetMaxConns = runFleet(ctx, e, cfg)
	}
	capMD := ""
	if cfg.scenarios["CAP"] {
		capMD = runCAP(ctx, e, cfg).markdown()
	}
	rep.elapsed = time.Since(start)
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	if err := writeCapacity(outDir, capMD); err != nil {
		return err
	}
	png := filepath.Join(outDir, "handoff.png")
	if len(rep.s3) > 0 {
		if err := drawChart(png, rep.s3); err != nil {
			return err
		}
		rep.chart = "handoff.png"
	}
	md := filepath.Join(outDir, "results.md")
	if err := os.WriteFile(md, []byte(rep.markdown()+capMD), 0o644); err != nil {
		return err
	}
	logf("wrote %s and %s in %v", md, png, rep.elapsed.Round(time.Second))
	return nil
}

// runS4All runs the failover scenario of every peer concurrently: most of
// it is waiting for TTLs to run out.
func runS4All(ctx context.Context, e *env, cfg *config) []s4Row {
	type job struct {
		p       *peer
		setting string
		ttl     time.Duration
		n       int
	}
	var jobsByPeer [][]job
	for _, p := range cfg.selected(func(p *peer) bool { return p.renews }) {
		var js []job
		session := p.id == "pglease-ff" || p.id == "advisory"
		if p.id == "advisory" {
			js = append(js, job{p, "session", 0, cfg.s4Fast})
		} else {
			if p.defTTL > 0 && (cfg.s4Default || session) {
				n := 1
				if session {
					n = cfg.s4Fast
				}
				js = append(js, job{p, "default", p.defTTL, n})
			}
			n := cfg.s4Short
			if session {
				n = cfg.s4Fast
			}
			js = append(js, job{p, "2s", 2 * time.Second, n})
		}
		jobsByPeer = append(jobsByPeer, js)
	}
	var mu sync.Mutex
	var rows []s4Row
	var wg sync.WaitGroup
	for _, js := range jobsByPeer {
		for _, j := range js {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := runS4(ctx, e, cfg, j.p, j.setting, j.ttl, j.n)
				logf("S4 %-10s %-7s n=%d p50=%v max=%v err=%v", j.p.id, j.setting, len(r.lat), r.lat.pct(50), r.lat.pct(100), r.err)
				mu.Lock()
				rows = append(rows, r)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	order := func(r s4Row) int {
		return slices.IndexFunc(peers, func(p *peer) bool { return p == r.peer })*10 + map[string]int{"default": 0, "2s": 1, "session": 2}[r.setting]
	}
	slices.SortFunc(rows, func(a, b s4Row) int { return order(a) - order(b) })
	return rows
}
