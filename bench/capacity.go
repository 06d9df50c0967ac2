package main

// CAP, the capacity model: how the server's load grows with the leases one
// client holds, with the number of clients and with blocked waiters, for
// pglease only (plain leases and, where it changes the cost, fast
// failover). It is not in the default scenario list (the full sweep takes
// several minutes); run it with
//
//	go run . -scenarios CAP [-quick] [-out DIR]
//
// It appends its section to results.md and writes the same section to
// capacity.md, ready to paste into docs/BENCHMARKS.md: the measured tables,
// the per-unit costs derived from them, the formulas and what one server
// of this machine handles.
//
// Clients and waiters run in child processes (this binary re-executed with
// -child cap and its part in $BENCH_CAP), so that thousands of clients do
// not share one Go runtime with the measuring process.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease"
)

// ---- configuration ----

type capConfig struct {
	idle time.Duration // idle-server window (its CPU is subtracted)

	// one client holding many leases
	leaseNs     []int // plain
	leaseFFNs   []int // with WithFastFailover
	leaseTTL    time.Duration
	leaseTTLFor map[int]time.Duration // lease counts that use another TTL
	acquirers   int                   // goroutines acquiring
	leaseWindow time.Duration         // at least two renewal intervals

	// many clients
	clientNs        []int
	clientProcs     int
	clientLeases    int // leases held by each client
	clientTTL       time.Duration
	clientIntervals int
	churn           time.Duration // try+release window with every client listening

	// blocked waiters
	waits      []capWaitCase
	waitSettle time.Duration
	waitWindow time.Duration
	chain      time.Duration // hand-off chain
	chainHold  time.Duration // each holder of the chain holds this long
}

type capWaitCase struct {
	waiters, names, procs int
	ff                    bool
}

// pgleasePoll is Config.PollInterval's default: a blocked Acquire looks
// again at least this often.
const pgleasePoll = 5 * time.Second

func capConfigFor(cfg *config) capConfig {
	if cfg.quick {
		return capConfig{
			idle:    500 * time.Millisecond,
			leaseNs: []int{100, 1000}, leaseFFNs: []int{100}, leaseTTL: 1200 * time.Millisecond,
			acquirers: 8, leaseWindow: 800 * time.Millisecond,
			clientNs: []int{2, 8}, clientProcs: 2, clientLeases: 2, clientTTL: 1200 * time.Millisecond,
			clientIntervals: 2, churn: 300 * time.Millisecond,
			waits:      []capWaitCase{{10, 1, 1, false}, {20, 1, 2, false}, {40, 4, 2, false}, {20, 1, 2, true}},
			waitSettle: 300 * time.Millisecond, waitWindow: 600 * time.Millisecond,
			chain: 400 * time.Millisecond, chainHold: 10 * time.Millisecond,
		}
	}
	return capConfig{
		idle:    10 * time.Second,
		leaseNs: []int{1000, 10000, 100000}, leaseFFNs: []int{1000, 10000}, leaseTTL: 6 * time.Second,
		// A renewal must end within TTL − margin − interval (2.8 s at 6 s):
		// while 16 goroutines acquire, one of 30,000 rows took 5 s on this
		// machine, so 100,000 leases get the default TTL.
		leaseTTLFor: map[int]time.Duration{100000: 30 * time.Second},
		acquirers:   16, leaseWindow: 20 * time.Second,
		// The default TTL: with 6 s, leases acquired early in the start-up of
		// 1,000 clients (a connection storm of 37 s) were lost before their
		// client's dedicated connection was up.
		clientNs: []int{10, 100, 1000}, clientProcs: 5, clientLeases: 5, clientTTL: 30 * time.Second,
		clientIntervals: 2, churn: 3 * time.Second,
		waits: []capWaitCase{
			{1000, 1, 2, false}, {100, 1, 10, false}, {1000, 1, 10, false}, {10000, 1, 10, false},
			{10000, 100, 10, false}, {10000, 1, 10, true},
		},
		waitSettle: 3 * time.Second, waitWindow: 2 * pgleasePoll,
		chain: 3 * time.Second, chainHold: 20 * time.Millisecond,
	}
}

// maxConnsNeeded is the max_connections the sweep needs: two per client
// (the dedicated connection and one pooled), a session watcher per waiting
// fast-failover (client, name), and room for the measuring process.
func (cc capConfig) maxConnsNeeded() int {
	if len(cc.clientNs) == 0 && len(cc.waits) == 0 {
		return 0
	}
	n := 0
	for _, c := range cc.clientNs {
		n = max(n, 2*c)
	}
	for _, w := range cc.waits {
		k := 2 * w.procs
		if w.ff {
			k += w.procs * min(w.names, w.waiters/max(w.procs, 1))
		}
		n = max(n, k)
	}
	return n + cc.acquirers + 100
}

// ---- server counters ----

// capSnap is the server's counters plus the rows its statements returned
// and the private memory of its processes.
type capSnap struct {
	c    counters
	rows int64
	priv int64 // bytes
}

// capDelta is the server's work over a window.
type capDelta struct {
	delta
	rows int64
	priv int64 // private memory at the end of the window, bytes
}

func (a capSnap) sub(b capSnap) capDelta {
	return capDelta{delta: a.c.sub(b.c), rows: a.rows - b.rows, priv: a.priv}
}

func capSnapshot(ctx context.Context, e *env) (capSnap, error) {
	// The statement counters of env.pgCounters, with the rows the
	// statements returned read in the same query.
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		return capSnap{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var s capSnap
	var ms float64
	err = conn.QueryRow(ctx, `
SELECT coalesce(sum(calls), 0)::bigint, coalesce(sum(total_exec_time + total_plan_time), 0)::float8, coalesce(sum(rows), 0)::bigint,
       (SELECT count(*) FROM pg_stat_activity WHERE datname = 'bench' AND pid <> pg_backend_pid())::int
  FROM pg_stat_statements s
 WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = 'bench')
   AND s.query NOT LIKE '%pg_stat_statements%'`).Scan(&s.c.stmts, &ms, &s.rows, &s.c.conns)
	if err != nil {
		return s, err
	}
	s.c.srvTime = time.Duration(ms * float64(time.Millisecond))
	s.c.cpu = pgCPU(e.pg.DataDir())
	s.c.at = time.Now()
	s.priv = pgPrivateMem(e.pg.DataDir())
	return s, nil
}

// pgPrivateMem sums the private memory (Private_Clean + Private_Dirty of
// /proc/PID/smaps_rollup) of the postmaster and its children: what the
// server's processes use beyond the shared memory (shared_buffers, lock
// table). 0 when unreadable.
func pgPrivateMem(dataDir string) int64 {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	pm, _ := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	var total int64
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		if pid != pm {
			if st, ok := procStat(pid); !ok || st.ppid != pm {
				continue
			}
		}
		total += privateKB(pid) * 1024
	}
	return total
}

func privateKB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	var kb int64
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Private_Clean:"); ok {
			kb += kbField(v)
		} else if v, ok := strings.CutPrefix(l, "Private_Dirty:"); ok {
			kb += kbField(v)
		}
	}
	return kb
}

func kbField(v string) int64 {
	n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
	return n
}

// netCPU is the window's server CPU minus what the idle server spends in
// the same time (bgRate: CPU seconds per second), never below zero.
func netCPU(d delta, bgRate float64) float64 {
	return max(0, d.cpu.Seconds()-bgRate*d.dur.Seconds())
}

// minCPU is the least net server CPU a window must show for a CPU figure
// to be given: the counters tick in 10 ms (USER_HZ), and background work
// (an autovacuum worker, the checkpointer) costs tens of milliseconds at
// random moments. A run saw 110 ms in the window of 20 renewals of 10
// clients, which would have read as 5.5 ms per statement.
const minCPU = 200 * time.Millisecond

// resolved reports whether d's net server CPU is large enough to divide.
func resolved(d delta, bgRate float64) bool { return netCPU(d, bgRate) >= minCPU.Seconds() }

// waitConns waits until the bench database has at most n connections (the
// backends of killed children take a moment to exit).
func waitConns(ctx context.Context, e *env, n int, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		s, err := e.snapshot(ctx, "pg")
		if err == nil && s.conns <= n {
			return
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

// ---- results ----

type capLeaseRow struct {
	ff         bool
	n          int
	ttl        time.Duration
	interval   time.Duration
	acquire    time.Duration
	perLease   float64 // client heap + stacks per lease, bytes
	tableBytes int64   // table + indexes after the acquisitions
	d          capDelta
	renew      renewStats // over the whole row: the burst and the window
	lost       int        // leases lost by the end of the window
	err        error
}

// renewStats is pg_stat_statements' entry for the renewal statement.
type renewStats struct {
	calls     int64
	mean, max time.Duration
}

// renewCPU is the server CPU of one renewal statement, in seconds,
// counting the loop's one statement per interval (pg_stat_statements
// counts a statement when it ends, which makes the count of a short
// window jumpy when each statement takes a second).
func (r capLeaseRow) renewCPU(bg float64) float64 {
	return netCPU(r.d.delta, bg) / (r.d.dur.Seconds() / r.interval.Seconds())
}

// execPerRow is the server's execution time per renewed row in the
// window, seconds.
func (r capLeaseRow) execPerRow() float64 {
	if r.d.rows == 0 {
		return 0
	}
	return r.d.srvTime.Seconds() / float64(r.d.rows)
}

// capRenewStats reads the entry of pg_stat_statements with the most rows
// per call in the bench database: the renewal statement, which returns a
// row per renewed lease where every other statement returns one or a few.
func capRenewStats(ctx context.Context, e *env) (renewStats, error) {
	var r renewStats
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		return r, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var mean, mx float64
	err = conn.QueryRow(ctx, `
SELECT calls, mean_exec_time, max_exec_time FROM pg_stat_statements s
 WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = 'bench') AND calls > 0
   AND s.query NOT LIKE '%pg_stat_statements%'
 ORDER BY rows::float8 / calls DESC LIMIT 1`).Scan(&r.calls, &mean, &mx)
	r.mean, r.max = time.Duration(mean*float64(time.Millisecond)), time.Duration(mx*float64(time.Millisecond))
	return r, err
}

// capCheckpoint flushes what earlier rows left dirty, so that the
// checkpointer's delayed work does not land in the next row's windows.
func capCheckpoint(ctx context.Context, e *env) error {
	if err := e.pg.Exec(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// capResetStats empties pg_stat_statements (counter deltas must not span
// it).
func capResetStats(ctx context.Context, e *env) error {
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, "SELECT pg_stat_statements_reset()")
	return err
}

type capClientRow struct {
	clients, procs, leases int
	ttl                    time.Duration
	start                  time.Duration
	base                   capSnap // before the children started
	d                      capDelta
	cycles                 int
	try, release           time.Duration // p50 of the cycles
	churn                  capDelta
	lost                   int // leases lost by the end of the renewal window
	err                    error
}

func (r capClientRow) conns() int     { return r.d.conns - r.base.c.conns }
func (r capClientRow) privMem() int64 { return r.d.priv - r.base.priv }

// stmtCPU is the server CPU per statement in the renewal window, seconds.
func (r capClientRow) stmtCPU(bg float64) float64 {
	if r.d.stmts == 0 {
		return 0
	}
	return netCPU(r.d.delta, bg) / float64(r.d.stmts)
}

func (r capClientRow) cycleCPU(bg float64) float64 {
	if r.cycles == 0 {
		return 0
	}
	return netCPU(r.churn.delta, bg) / float64(r.cycles)
}

type capWaitRow struct {
	capWaitCase
	holderTTL time.Duration
	base      capSnap
	d         capDelta // waiting
	chain     capDelta // hand-offs
	lat       durs     // sorted
	overlaps  int
	err       error
}

// pairs is the number of (client, name) pairs with a blocked waiter: a
// client queues its own goroutines on one name locally, so only one of
// them queries the server.
func (w capWaitCase) pairs() int {
	if w.procs == 0 {
		return 0
	}
	return w.procs * min(w.names, w.waiters/w.procs)
}

// expectedRate is the waiting statements/s the model predicts: one
// attempt per pair per poll interval plus the holder's renewals.
func (r capWaitRow) expectedRate() float64 {
	return float64(r.pairs())/pgleasePoll.Seconds() + 3/r.holderTTL.Seconds()
}

// handoffStmts is the statements of one hand-off: the chain's statements
// minus the waiting rate over the same time.
func (r capWaitRow) handoffStmts() float64 {
	if len(r.lat) == 0 {
		return 0
	}
	extra := float64(r.chain.stmts) - r.d.stmtsPerSec()*r.chain.dur.Seconds()
	return max(0, extra) / float64(len(r.lat))
}

func (r capWaitRow) handoffCPU() float64 {
	if len(r.lat) == 0 || r.d.dur == 0 {
		return 0
	}
	waitRate := r.d.cpu.Seconds() / r.d.dur.Seconds()
	return netCPU(r.chain.delta, waitRate) / float64(len(r.lat))
}

type capResult struct {
	cc       capConfig
	quick    bool
	when     time.Time
	elapsed  time.Duration
	machine  []string
	cpus     int // of the machine the server runs on
	maxConns int
	raised   bool // maxConns was raised for CAP
	idle     capDelta
	leases   []capLeaseRow
	clients  []capClientRow
	waits    []capWaitRow
	err      error
}

// bg is the idle server's CPU, in CPU seconds per second.
func (r *capResult) bg() float64 {
	if r.idle.dur == 0 {
		return 0
	}
	return r.idle.cpu.Seconds() / r.idle.dur.Seconds()
}

// ---- the scenario ----

func runCAP(ctx context.Context, e *env, cfg *config) *capResult {
	start := time.Now()
	cc := capConfigFor(cfg)
	r := &capResult{cc: cc, quick: cfg.quick, when: start, cpus: runtime.NumCPU()}
	restore, maxConns, raised, err := capEnsureConns(ctx, e, cc.maxConnsNeeded())
	r.maxConns, r.raised = maxConns, raised
	if err != nil {
		r.err = err
		return r
	}
	defer restore()
	r.machine = machineInfo(ctx, e)

	a, err := capSnapshot(ctx, e)
	if err == nil {
		sleepCtx(ctx, cc.idle)
		var b capSnap
		if b, err = capSnapshot(ctx, e); err == nil {
			r.idle = b.sub(a)
		}
	}
	if err != nil {
		r.err = err
		return r
	}
	logf("CAP idle server: cpu=%.2f%% of a core, %d connections", 100*r.bg(), r.idle.conns)

	for _, ff := range []bool{false, true} {
		ns := cc.leaseNs
		if ff {
			ns = cc.leaseFFNs
		}
		for _, n := range ns {
			x := capLeases(ctx, e, cc, n, ff)
			logf("CAP leases ff=%v n=%d ttl=%v acquire=%v lost=%d stmts/s=%.2f rows/stmt=%.0f renew cpu=%v slowest=%v bytes/lease=%.0f err=%v", ff, n, x.ttl, x.acquire.Round(time.Millisecond),
				x.lost, x.d.stmtsPerSec(), float64(x.d.rows)/max(1, float64(x.d.stmts)), time.Duration(x.renewCPU(r.bg())*1e9).Round(time.Microsecond), x.renew.max.Round(time.Millisecond), x.perLease, x.err)
			r.leases = append(r.leases, x)
		}
	}
	for _, n := range cc.clientNs {
		x := capClients(ctx, e, cc, n)
		logf("CAP clients=%d procs=%d start=%v conns=%d lost=%d stmts/s=%.1f cpu=%.1f%% cycles=%d try=%v release=%v err=%v", n, x.procs, x.start.Round(time.Millisecond),
			x.conns(), x.lost, x.d.stmtsPerSec(), x.d.cpuPercent(), x.cycles, x.try, x.release, x.err)
		r.clients = append(r.clients, x)
	}
	for _, w := range cc.waits {
		x := capWaiters(ctx, e, cc, w)
		logf("CAP waiters=%d names=%d procs=%d ff=%v stmts/s=%.2f conns=%d handoffs=%d p50=%v stmts/handoff=%.1f overlaps=%d err=%v", w.waiters, w.names, w.procs, w.ff,
			x.d.stmtsPerSec(), x.d.conns, len(x.lat), x.lat.pct(50), x.handoffStmts(), x.overlaps, x.err)
		r.waits = append(r.waits, x)
	}
	r.elapsed = time.Since(start)
	return r
}

// capEnsureConns raises max_connections (ALTER SYSTEM and a restart) when
// the sweep needs more than the cluster allows; restore puts it back.
func capEnsureConns(ctx context.Context, e *env, need int) (restore func(), setting int, raised bool, err error) {
	restore = func() {}
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		return restore, 0, false, err
	}
	err = conn.QueryRow(ctx, "SELECT current_setting('max_connections')::int").Scan(&setting)
	conn.Close(context.WithoutCancel(ctx))
	if err != nil || setting >= need {
		return restore, setting, false, err
	}
	if err := e.pg.Exec(ctx, fmt.Sprintf("ALTER SYSTEM SET max_connections = %d", need)); err != nil {
		return restore, setting, false, err
	}
	if err := e.pg.Restart(ctx, "fast"); err != nil {
		return restore, setting, false, fmt.Errorf("restart with max_connections %d: %w", need, err)
	}
	logf("CAP max_connections raised from %d to %d (restarted)", setting, need)
	return func() {
		bctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if e.pg.Exec(bctx, "ALTER SYSTEM RESET max_connections") == nil {
			_ = e.pg.Restart(bctx, "fast")
		}
	}, need, true, nil
}

// ---- one client holding many leases ----

func capLeases(ctx context.Context, e *env, cc capConfig, n int, ff bool) (r capLeaseRow) {
	r.ff, r.n, r.ttl = ff, n, cc.leaseTTL
	if t, ok := cc.leaseTTLFor[n]; ok {
		r.ttl = t
	}
	r.interval = r.ttl / 3
	// A table per row, so that its size is this row's leases only.
	table := fmt.Sprintf("pglease_leases_capl_%d", n)
	if ff {
		table += "_ff"
	}
	c, err := pglease.Open(ctx, e.dsn, pglease.Config{Table: table, TTL: r.ttl, MaxConns: int32(cc.acquirers)})
	if err != nil {
		r.err = err
		return r
	}
	defer func() {
		t0 := time.Now()
		_ = c.Close()
		logf("CAP leases n=%d: Close released them in %v", n, time.Since(t0).Round(time.Millisecond))
	}()
	if err := c.Migrate(ctx); err != nil {
		r.err = err
		return r
	}
	var opts []pglease.Option
	if ff {
		opts = append(opts, pglease.WithFastFailover())
	}
	if err := capCheckpoint(ctx, e); err != nil {
		r.err = err
		return r
	}
	if err := capResetStats(ctx, e); err != nil {
		r.err = err
		return r
	}
	prefix := "capl-" + randHex(4) + "-"
	held := make([]*pglease.Lease, n) // allocated before the first heap reading
	t0 := time.Now()
	// The first lease alone starts what a client starts once (the renewal
	// loop, its dedicated connection), before the heap is read.
	l, err := c.TryAcquire(ctx, prefix+"0", opts...)
	if err != nil {
		r.err = err
		return r
	}
	held[0] = l
	if err := l.Renew(ctx); err != nil {
		r.err = err
		return r
	}
	m0 := heapStack()
	var next atomic.Int64
	next.Store(1)
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	for range cc.acquirers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || firstErr.Load() != nil {
					return
				}
				l, err := c.TryAcquire(ctx, prefix+strconv.Itoa(i), opts...)
				if err != nil {
					err = fmt.Errorf("lease %d: %w", i, err)
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				held[i] = l
			}
		}()
	}
	wg.Wait()
	r.acquire = time.Since(t0)
	if p := firstErr.Load(); p != nil {
		r.err = *p
		return r
	}
	r.perLease = (float64(heapStack()) - float64(m0)) / float64(n-1)
	if conn, err := pgx.Connect(ctx, e.dsn); err == nil {
		_ = conn.QueryRow(ctx, "SELECT pg_total_relation_size($1)", table).Scan(&r.tableBytes)
		conn.Close(ctx)
	}
	// The renewals of the burst line up after one round; measure after two.
	sleepCtx(ctx, 2*r.interval)
	a, err := capSnapshot(ctx, e)
	if err != nil {
		r.err = err
		return r
	}
	sleepCtx(ctx, max(3, cc.leaseWindow/r.interval)*r.interval)
	b, err := capSnapshot(ctx, e)
	if err != nil {
		r.err = err
		return r
	}
	r.d = b.sub(a)
	for _, l := range held {
		if l.Err() != nil {
			r.lost++
		}
	}
	r.renew, r.err = capRenewStats(ctx, e)
	return r
}

// ---- child processes ----

// capSpec is one child's part, passed in $BENCH_CAP.
type capSpec struct {
	Role    string        `json:"role"` // "clients" or "waiters"
	Table   string        `json:"table"`
	Prefix  string        `json:"prefix"`
	Clients int           `json:"clients,omitempty"`
	Leases  int           `json:"leases,omitempty"`
	TTL     time.Duration `json:"ttl,omitempty"`
	Waiters int           `json:"waiters,omitempty"`
	Names   int           `json:"names,omitempty"`
	FF      bool          `json:"ff,omitempty"`
	Hold    time.Duration `json:"hold,omitempty"`
}

// capEvent is a waiter's acquisition (got) or the moment just before its
// release, as a child reported it (Unix nanoseconds: the processes share
// one host's clock).
type capEvent struct {
	got  bool
	name string
	at   int64
}

type capProc struct {
	cmd    *exec.Cmd
	ready  chan error
	mu     sync.Mutex
	events []capEvent
	held   int // leases its clients hold, from its last "HELD n m" line
	lost   int // leases its clients lost
}

// leaseCounts sums what the children last reported: leases held and lost.
func leaseCounts(procs []*capProc) (held, lost int) {
	for _, p := range procs {
		p.mu.Lock()
		held += p.held
		lost += p.lost
		p.mu.Unlock()
	}
	return held, lost
}

// startCapProcs starts one child per spec and waits until all are ready.
func startCapProcs(ctx context.Context, e *env, specs []capSpec) ([]*capProc, error) {
	var procs []*capProc
	var firstErr error
	for _, s := range specs {
		p, err := startCapProc(e, s)
		if err != nil {
			firstErr = err
			break
		}
		procs = append(procs, p)
	}
	limit := time.After(5 * time.Minute)
	for _, p := range procs {
		if firstErr != nil {
			break
		}
		select {
		case err := <-p.ready:
			firstErr = err
		case <-ctx.Done():
			firstErr = ctx.Err()
		case <-limit:
			firstErr = errors.New("children not ready after 5 minutes")
		}
	}
	if firstErr != nil {
		stopCapProcs(procs)
		return nil, firstErr
	}
	return procs, nil
}

func startCapProc(e *env, s capSpec) (*capProc, error) {
	spec, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	cmd := childCmd(e, "-child", "cap")
	cmd.Env = append(cmd.Env, "BENCH_CAP="+string(spec))
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &capProc{cmd: cmd, ready: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		isReady := false
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 1 && f[0] == "READY" && !isReady:
				isReady = true
				p.ready <- nil
			case len(f) == 3 && (f[0] == "GOT" || f[0] == "REL"):
				at, _ := strconv.ParseInt(f[2], 10, 64)
				p.mu.Lock()
				p.events = append(p.events, capEvent{got: f[0] == "GOT", name: f[1], at: at})
				p.mu.Unlock()
			case len(f) == 3 && f[0] == "HELD":
				held, _ := strconv.Atoi(f[1])
				lost, _ := strconv.Atoi(f[2])
				p.mu.Lock()
				p.held, p.lost = held, lost
				p.mu.Unlock()
			}
		}
		if !isReady {
			p.ready <- errors.New("child exited before it was ready")
		}
	}()
	return p, nil
}

func stopCapProcs(procs []*capProc) {
	for _, p := range procs {
		_ = p.cmd.Process.Kill()
	}
	for _, p := range procs {
		_ = p.cmd.Wait()
	}
}

// capChild is the child side: it runs its part of $BENCH_CAP until
// killed.
func capChild(ctx context.Context, e *env) error {
	var s capSpec
	if err := json.Unmarshal([]byte(os.Getenv("BENCH_CAP")), &s); err != nil {
		return fmt.Errorf("BENCH_CAP: %w", err)
	}
	switch s.Role {
	case "clients":
		return capChildClients(ctx, e, s)
	case "waiters":
		return capChildWaiters(ctx, e, s)
	}
	return fmt.Errorf("unknown CAP role %q", s.Role)
}

// capChildClients opens s.Clients clients (MaxConns 1) that hold s.Leases
// leases each, and reports every 200 ms how many leases are still held
// and how many were lost.
func capChildClients(ctx context.Context, e *env, s capSpec) error {
	clients := make([]*pglease.Client, s.Clients)
	leases := make([]*pglease.Lease, s.Clients*s.Leases)
	var firstErr atomic.Pointer[error]
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			fail := func(err error) { firstErr.CompareAndSwap(nil, &err) }
			c, err := pglease.Open(ctx, e.dsn, pglease.Config{Table: s.Table, TTL: s.TTL, MaxConns: 1})
			if err != nil {
				fail(err)
				return
			}
			clients[i] = c
			for j := range s.Leases {
				l, err := c.TryAcquire(ctx, fmt.Sprintf("%s%d-%d", s.Prefix, i, j))
				if err != nil {
					fail(err)
					return
				}
				leases[i*s.Leases+j] = l
			}
		}()
	}
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		return *p
	}
	fmt.Println("READY")
	for {
		held, lost := 0, 0
		for _, l := range leases {
			if l.Err() == nil {
				held++
			} else {
				lost++
			}
		}
		fmt.Printf("HELD %d %d\n", held, lost)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// capChildWaiters starts s.Waiters goroutines on one client, goroutine i
// blocked on name i mod s.Names. Whoever acquires reports it, holds s.Hold,
// reports, releases and waits again.
func capChildWaiters(ctx context.Context, e *env, s capSpec) error {
	c, err := pglease.Open(ctx, e.dsn, pglease.Config{Table: s.Table})
	if err != nil {
		return err
	}
	var opts []pglease.Option
	if s.FF {
		opts = append(opts, pglease.WithFastFailover())
	}
	var out sync.Mutex
	say := func(what, name string) {
		out.Lock()
		fmt.Printf("%s %s %d\n", what, name, time.Now().UnixNano())
		out.Unlock()
	}
	for i := range s.Waiters {
		name := s.Prefix + strconv.Itoa(i%s.Names)
		go func() {
			for ctx.Err() == nil {
				l, err := c.Acquire(ctx, name, opts...)
				if err != nil {
					if ctx.Err() == nil {
						fmt.Fprintf(os.Stderr, "bench child cap: waiter on %s: %v\n", name, err)
						sleepCtx(ctx, 100*time.Millisecond)
					}
					continue
				}
				say("GOT", name)
				sleepCtx(ctx, s.Hold)
				say("REL", name)
				rctx, cancel := releaseCtx()
				_ = l.Release(rctx)
				cancel()
			}
		}()
	}
	fmt.Println("READY")
	<-ctx.Done()
	return ctx.Err()
}

// ---- many clients ----

func capClients(ctx context.Context, e *env, cc capConfig, n int) (r capClientRow) {
	r.clients, r.leases, r.ttl = n, cc.clientLeases, cc.clientTTL
	r.procs = min(cc.clientProcs, n)
	const table = "pglease_leases_capc"
	// The measuring process's own client: it creates the table and later
	// runs the try+release cycles that every other client hears about.
	own, err := pglease.Open(ctx, e.dsn, pglease.Config{Table: table, TTL: cc.clientTTL, MaxConns: 2})
	if err != nil {
		r.err = err
		return r
	}
	defer own.Close()
	if err := own.Migrate(ctx); err != nil {
		r.err = err
		return r
	}
	if err := capCheckpoint(ctx, e); err != nil {
		r.err = err
		return r
	}
	if r.base, err = capSnapshot(ctx, e); err != nil {
		r.err = err
		return r
	}
	prefix := "capc-" + randHex(4) + "-"
	var specs []capSpec
	for i := range r.procs {
		k := n / r.procs
		if i < n%r.procs {
			k++
		}
		specs = append(specs, capSpec{Role: "clients", Table: table, Prefix: fmt.Sprintf("%s%d-", prefix, i), Clients: k, Leases: cc.clientLeases, TTL: cc.clientTTL})
	}
	t0 := time.Now()
	procs, err := startCapProcs(ctx, e, specs)
	if err != nil {
		r.err = err
		return r
	}
	r.start = time.Since(t0)
	defer func() {
		stopCapProcs(procs)
		// The measuring process's own client may have connected its
		// dedicated connection meanwhile.
		waitConns(ctx, e, r.base.c.conns+1, 30*time.Second)
	}()
	interval := cc.clientTTL / 3
	// Every client renews once (and connects its dedicated connection).
	sleepCtx(ctx, interval+min(interval/2, 2*time.Second))
	a, err := capSnapshot(ctx, e)
	if err != nil {
		r.err = err
		return r
	}
	sleepCtx(ctx, time.Duration(cc.clientIntervals)*interval)
	b, err := capSnapshot(ctx, e)
	if err != nil {
		r.err = err
		return r
	}
	r.d = b.sub(a)
	_, r.lost = leaseCounts(procs)

	// Try+release cycles on distinct names from one goroutine: every
	// release notifies every client listening on the table.
	if a, err = capSnapshot(ctx, e); err != nil {
		r.err = err
		return r
	}
	end := time.Now().Add(cc.churn)
	var tries, rels durs
	for i := 0; time.Now().Before(end); i++ {
		t0 := time.Now()
		l, err := own.TryAcquire(ctx, fmt.Sprintf("%schurn-%d", prefix, i))
		t1 := time.Now()
		if err == nil {
			rctx, cancel := releaseCtx()
			err = l.Release(rctx)
			cancel()
		}
		if err != nil {
			r.err = fmt.Errorf("try+release: %w", err)
			return r
		}
		tries, rels = append(tries, t1.Sub(t0)), append(rels, time.Since(t1))
		r.cycles++
	}
	r.try, r.release = tries.sorted().pct(50), rels.sorted().pct(50)
	if b, err = capSnapshot(ctx, e); err != nil {
		r.err = err
		return r
	}
	r.churn = b.sub(a)
	return r
}

// ---- waiters ----

func capWaiters(ctx context.Context, e *env, cc capConfig, w capWaitCase) (r capWaitRow) {
	r.capWaitCase = w
	const table = "pglease_leases_capw"
	holder, err := pglease.Open(ctx, e.dsn, pglease.Config{Table: table})
	if err != nil {
		r.err = err
		return r
	}
	defer holder.Close()
	sched, _ := pglease.Config{}.Schedule()
	r.holderTTL = sched.TTL
	var opts []pglease.Option
	if w.ff {
		opts = append(opts, pglease.WithFastFailover())
	}
	if err := capCheckpoint(ctx, e); err != nil {
		r.err = err
		return r
	}
	prefix := "capw-" + randHex(4) + "-"
	var first *pglease.Lease
	for i := range w.names {
		l, err := holder.TryAcquire(ctx, prefix+strconv.Itoa(i), opts...)
		if err != nil {
			r.err = fmt.Errorf("holder: %w", err)
			return r
		}
		if i == 0 {
			first = l
		}
	}
	// A manual renewal opens the holder's dedicated connection now (LISTEN
	// and its settings are three statements), not in the window.
	if err := first.Renew(ctx); err != nil {
		r.err = fmt.Errorf("holder renew: %w", err)
		return r
	}
	if r.base, err = capSnapshot(ctx, e); err != nil {
		r.err = err
		return r
	}
	var specs []capSpec
	for i := range w.procs {
		k := w.waiters / w.procs
		if i < w.waiters%w.procs {
			k++
		}
		specs = append(specs, capSpec{Role: "waiters", Table: table, Prefix: prefix, Waiters: k, Names: w.names, FF: w.ff, Hold: cc.chainHold})
	}
	procs, err := startCapProcs(ctx, e, specs)
	if err != nil {
		r.err = err
		return r
	}
	defer func() {
		stopCapProcs(procs)
		// The measuring process's own client may have connected its
		// dedicated connection meanwhile.
		waitConns(ctx, e, r.base.c.conns+1, 30*time.Second)
	}()
	sleepCtx(ctx, cc.waitSettle)
	a, err := capSnapshot(ctx, e)
	if err != nil {
		r.err = err
		return r
	}
	sleepCtx(ctx, cc.waitWindow)
	b, err := capSnapshot(ctx, e)
	if err != nil {
		r.err = err
		return r
	}
	r.d = b.sub(a)
	for _, p := range procs {
		p.mu.Lock()
		n := len(p.events)
		p.mu.Unlock()
		if n > 0 {
			r.err = errors.New("a waiter acquired a held lease")
			return r
		}
	}

	// The hand-off chain on the first name.
	if a, err = capSnapshot(ctx, e); err != nil {
		r.err = err
		return r
	}
	t0 := time.Now().UnixNano()
	rctx, cancel := releaseCtx()
	err = first.Release(rctx)
	cancel()
	if err != nil {
		r.err = fmt.Errorf("holder release: %w", err)
		return r
	}
	sleepCtx(ctx, cc.chain)
	if b, err = capSnapshot(ctx, e); err != nil {
		r.err = err
		return r
	}
	r.chain = b.sub(a)
	var events []capEvent
	for _, p := range procs {
		p.mu.Lock()
		events = append(events, p.events...)
		p.mu.Unlock()
	}
	r.lat, r.overlaps = handoffs(events, prefix+"0", t0, b.c.at.UnixNano())
	if len(r.lat) == 0 {
		r.err = errors.New("no hand-off in the chain")
	}
	return r
}

// handoffs reads the chain of one name from its events: the first holder
// released at t0; every acquisition up to end is a hand-off whose latency
// runs from the previous release. An acquisition while the name was still
// held (no release since the previous acquisition) is an overlap.
func handoffs(events []capEvent, name string, t0, end int64) (lat durs, overlaps int) {
	var evs []capEvent
	for _, ev := range events {
		if ev.name == name && ev.at >= t0 && ev.at <= end {
			evs = append(evs, ev)
		}
	}
	// A release is stamped before its acquisition's successor can exist;
	// on equal stamps the release comes first.
	slices.SortStableFunc(evs, func(a, b capEvent) int {
		if a.at != b.at {
			if a.at < b.at {
				return -1
			}
			return 1
		}
		if a.got == b.got {
			return 0
		}
		if !a.got {
			return -1
		}
		return 1
	})
	lastRel, held := t0, false
	for _, ev := range evs {
		if !ev.got {
			lastRel, held = ev.at, false
			continue
		}
		if held {
			overlaps++
		} else {
			lat = append(lat, time.Duration(ev.at-lastRel))
		}
		held = true
	}
	return lat.sorted(), overlaps
}

// ---- the model ----

// capModel is the per-unit costs derived from one run. CPU and time
// figures are in seconds; ok flags say whether the run measured them.
type capModel struct {
	bg float64 // idle server CPU, seconds per second

	renewFixed, renewRow float64 // server CPU per renewal statement, per renewed row
	renewFixedOK, rowOK  bool
	rowsInFixed          int // leases per client in the statements renewFixed comes from
	fixedClients         int // clients in that row

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
		m.rowsInFixed, m.fixedClients = big.leases, big.clients
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
	w("C clients (`Open` with MaxConns 1, TTL %v: a renewal statement every %v per client) in %d child processes, each client holding %d leases. *Start-up* is from starting the processes until every client holds its leases (16 clients at a time per process). Connections are the bench database's, less the measuring process's own; server memory is the private memory (Private_Clean + Private_Dirty) of all PostgreSQL processes, less the same before the clients started. The window is %d renewal intervals, after every client renewed once. Then one goroutine of the measuring process runs `TryAcquire` + `Release` on distinct names for %v: every release notifies every client listening on the table (all C of them).\n\n",
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

func usOr(v float64, ok bool) string {
	if !ok {
		return "–"
	}
	return us(v)
}

func (r *capResult) mdModel(w func(string, ...any), m capModel) {
	def, _ := pglease.Config{}.Schedule()
	T := def.TTL.Seconds()
	w("### Model\n\n")
	w("Per-unit costs from the tables above. Server CPU is that of all PostgreSQL processes, so it includes the WAL writer, checkpointer and autovacuum work the statements cause. T is the TTL (default %v), C the number of clients (each with a dedicated connection listening for notifications once it has held or waited for a lease), L̄ the leases per client, R the releases per second.\n\n", def.TTL)
	w("- **Renewal**: each client that holds leases sends one statement per renewal interval (T/3 by default) for all of them: **C × 3/T statements/s**")
	if m.stmtsPerClient > 0 {
		w(" (measured %s per client at T = %v, where 3/T = %s)", num(m.stmtsPerClient), m.clientTTL, num(3/m.clientTTL.Seconds()))
	}
	w(", costing **C × 3/T × (a + b × L̄)** of server CPU")
	if m.renewFixedOK || m.rowOK {
		w(", a ≈ %s µs per statement, b ≈ %s µs per renewed row", usOr(m.renewFixed, m.renewFixedOK), usOr(m.renewRow, m.rowOK))
		if m.rowsInFixed > 0 {
			w(" (a: CPU per statement with %d clients of %d leases, less %d × b, so it includes what %d idle connections cost; b: the slope of CPU per renewal between the smallest and the largest plain lease count)", m.fixedClients, m.rowsInFixed, m.rowsInFixed, 2*m.fixedClients)
		}
	}
	w(".\n")
	w("- **Renewal time**: one statement renews all of a client's leases and must end before the local deadline of the previous renewal, T − T/5 − T/3 with the default margin and interval, and within `StatementTimeout` (10 s): **L̄ × e ≤ min(10 s, 0.47 T)**")
	if m.execOK {
		w(", e ≈ %s µs of execution per row in the steady window of %d leases, with no acquisitions running (the slowest renewal of that row took %s ms, during the acquisition burst)", us(m.execRow), m.slowRenewAt, ms(m.slowRenew))
	}
	w(". The statement runs on one backend, so a busy server stretches it: leave a wide margin.\n")
	w("- **Acquire + release**: two statements, and the release notifies every client listening on the table, waiting or not; each listening session costs the server a wake-up: **R × (c + f × C)** of server CPU for R acquire + release cycles per second")
	if m.cycleOK {
		w(", c ≈ %s µs per try+release cycle (with %d listening clients)", us(m.cycle), m.cycleListeners)
	}
	if m.fanoutOK {
		w(", f ≈ %s µs per listening client", us(m.fanout))
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
	w("- **Connections**: per client one dedicated connection plus the pool's connections in use, at most MaxConns (default 4): **C × (1 + pool) ≤ max_connections**")
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
	w(". A fast-failover waiter adds one connection per (client, name) whose holder it watches (at most 16 per wait).\n")
	if m.leaseOK {
		w("- **Memory**: about %.0f bytes of client memory (Go heap) per held lease, %.0f bytes per lease in the server's table and index.\n", m.bytesPerLease, m.serverBytesPerLease)
	}
	w("\nIn all: **server CPU ≈ C × 3/T × (a + b L̄) + R × (c + f C) + hand-offs/s × (h0 + h1 k) + waiting pairs ÷ 5 s × p**, plus the idle server; one server is enough while that stays well below its cores and C × (1 + pool) below max_connections.\n\n")

	budget := r.budget()
	w("### What one server of this machine handles\n\n")
	w("At 50%% of its %d cores (%s CPU-second per second), from the costs above; two significant digits at most, from one run, extrapolated beyond what was measured. Acquisitions and renewals also wait for a WAL flush (fsync on), which CPU does not show.\n\n", r.cpus, num(budget))
	w("| workload | formula | about |\n|---|---|---:|\n")
	if m.renewFixedOK && m.rowOK {
		per := 3 / T * (m.renewFixed + 5*m.renewRow)
		w("| clients renewing 5 leases each, default TTL | budget ÷ (3/T × (a + 5b)) | %s clients |\n", about(budget/per))
		w("| … the connections they need, 2 per client | 2 × clients | %s |\n", about(2*budget/per))
		w("| leases renewed in all, default TTL | budget × T/3 ÷ b | %s leases |\n", about(budget*T/3/m.renewRow))
	}
	if m.execOK {
		for _, ttl := range []time.Duration{def.TTL, 6 * time.Second} {
			w("| leases one client can renew, TTL %v (steady state) | min(10 s, 0.47 T) ÷ e | %s leases |\n", ttl, about(renewBudget(ttl).Seconds()/m.execRow))
		}
	}
	if m.cycleOK && m.fanoutOK {
		for _, c := range []float64{10, 100, 1000, 10000} {
			w("| releases/s with %s listening clients | budget ÷ (c + f × C) | %s/s |\n", about(c), about(budget/(m.cycle+c*m.fanout)))
		}
	} else if m.cycleOK {
		w("| releases/s with %d listening clients | budget ÷ c | %s/s |\n", m.cycleListeners, about(budget/m.cycle))
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
	w("Not measured here: a server on its own machine (clients and server share these cores, so client CPU competes with the server's), network round trips (loopback only), replication and synchronous standbys, PgBouncer, fast failover beyond %d leases, bloat and vacuum of a table renewed at this rate over hours, and several tables (each has its own notification channel, so a release wakes only the clients of its table). Other work on the machine (another benchmark, builds) may have run at the same time.\n\n",
		slices.Max(append([]int{0}, r.cc.leaseFFNs...)))
}

// mdStop renders where one server stops being enough as the number of
// clients on one table grows.
func (r *capResult) mdStop(w func(string, ...any), m capModel, budget float64, ttl time.Duration) {
	if !m.renewFixedOK || !m.rowOK || !m.cycleOK || !m.fanoutOK {
		return
	}
	const leases = 5
	w("### Where one server stops being enough\n\n")
	w("Clients on one table, %d leases each, default TTL (%v), MaxConns 1 (2 connections per client), from the model above: the renewal CPU they cost, and how many acquire + release cycles per second the rest of the 50%% budget (%s CPU-second per second) allows, each release waking all C listening clients.\n\n", leases, ttl, num(budget))
	w("| clients | connections | server memory (private) | renewal CPU, %% of a core | acquire + release cycles/s left in the budget |\n|---:|---:|---:|---:|---:|\n")
	for _, c := range []float64{100, 1000, 2000, 10000} {
		renew := c * 3 / ttl.Seconds() * (m.renewFixed + leases*m.renewRow)
		conns, mem := 2*c, "–"
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
