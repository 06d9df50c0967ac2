package main

// CAP, the capacity model: how the server's load grows with the leases one
// client holds, with the number of clients and with blocked waiters, for
// pglease only (plain leases and, where it changes the cost, fast
// failover). It is not in the default scenario list (the full sweep takes
// several minutes); run it with
//
//	go run . -scenarios CAP [-quick] [-out DIR] [-cappart leases,clients,waiters,pgbouncer]
//
// (-cappart runs only the parts named). The pgbouncer part runs waiting
// clients through PgBouncer in transaction pooling mode (pgbouncer.go
// starts it; the rows are skipped when it is not installed) and the same
// waiters directly, for comparison: capacity_pgb.go.
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
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5"
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

	// waiters behind PgBouncer (and the same directly, for comparison)
	pgbs      []capPgbCase
	pgbSettle time.Duration
	pgbWindow time.Duration
	pgbRounds int // hand-offs from the holder to the waiters
}

// capParts are the parts of CAP that -cappart selects.
var capParts = []string{"leases", "clients", "waiters", "pgbouncer"}

// only keeps the parts of cc in parts (all when parts is empty).
func (cc capConfig) only(parts map[string]bool) capConfig {
	if len(parts) == 0 {
		return cc
	}
	if !parts["leases"] {
		cc.leaseNs, cc.leaseFFNs = nil, nil
	}
	if !parts["clients"] {
		cc.clientNs = nil
	}
	if !parts["waiters"] {
		cc.waits = nil
	}
	if !parts["pgbouncer"] {
		cc.pgbs = nil
	}
	return cc
}

type capWaitCase struct {
	waiters, names, procs int
	ff                    bool
}

// pgleasePoll is Config.PollInterval's default: a blocked Acquire looks
// again at least this often.
const pgleasePoll = 5 * time.Second

func capConfigFor(cfg *config) capConfig {
	return capConfigSized(cfg.quick).only(cfg.capParts)
}

func capConfigSized(quick bool) capConfig {
	if quick {
		return capConfig{
			idle:    500 * time.Millisecond,
			leaseNs: []int{100, 1000}, leaseFFNs: []int{100}, leaseTTL: 1200 * time.Millisecond,
			acquirers: 8, leaseWindow: 800 * time.Millisecond,
			clientNs: []int{2, 8}, clientProcs: 2, clientLeases: 2, clientTTL: 1200 * time.Millisecond,
			clientIntervals: 2, churn: 300 * time.Millisecond,
			waits:      []capWaitCase{{10, 1, 1, false}, {20, 1, 2, false}, {40, 4, 2, false}, {20, 1, 2, true}},
			waitSettle: 300 * time.Millisecond, waitWindow: 600 * time.Millisecond,
			chain: 400 * time.Millisecond, chainHold: 10 * time.Millisecond,
			pgbs:      []capPgbCase{{5, 1, true}, {5, 1, false}},
			pgbSettle: 3 * time.Second, pgbWindow: 3 * time.Second, pgbRounds: 2,
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
		// Every waiter has looked at least once more after its start-up
		// before the window.
		pgbs:      []capPgbCase{{10, 2, true}, {100, 4, true}, {100, 4, false}},
		pgbSettle: pgleasePoll + 2*time.Second, pgbWindow: 2 * pgleasePoll, pgbRounds: 10,
	}
}

// maxConnsNeeded is the max_connections the sweep needs: two per client
// (the dedicated connection and one pooled), a session watcher per waiting
// fast-failover (client, name), and room for the measuring process.
func (cc capConfig) maxConnsNeeded() int {
	if len(cc.clientNs) == 0 && len(cc.waits) == 0 && len(cc.pgbs) == 0 {
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
	for _, w := range cc.pgbs {
		// Through PgBouncer, its pool; directly, a dedicated connection
		// and the pool's per client, and a bell watched on the side.
		if w.bouncer {
			n = max(n, capPgbPool)
		} else {
			n = max(n, 3*w.waiters)
		}
	}
	return n + cc.acquirers + 100
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
	pgbs     []capPgbRow
	// pgbSkipped says why the PgBouncer rows were skipped.
	pgbSkipped error
	pgbVer     string // " 1.18.0": PgBouncer's version, with a leading space
	err        error
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
	for _, w := range cc.pgbs {
		if w.bouncer && pgBouncerBin() == "" {
			logf("CAP waiters behind PgBouncer skipped: %v", errNoPgBouncer)
			r.pgbSkipped = errNoPgBouncer
			continue
		}
		if w.bouncer && r.pgbVer == "" {
			r.pgbVer = pgBouncerVersion()
		}
		x := capPgbWaiters(ctx, e, cc, w)
		logf("CAP pgbouncer waiters=%d via=%s stmts/s=%.2f conns=%d pgb clients=%d servers=%d cpu=%.1f%% wake-ups=%v err=%v",
			w.waiters, w.via(), x.d.stmtsPerSec(), x.conns(), x.pgb.clients, x.pgb.servers, pct(x.d.delta, r.bg()), x.wake, x.err)
		r.pgbs = append(r.pgbs, x)
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
	logf("max_connections raised from %d to %d (restarted)", setting, need)
	return func() {
		bctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if e.pg.Exec(bctx, "ALTER SYSTEM RESET max_connections") == nil {
			_ = e.pg.Restart(bctx, "fast")
		}
	}, need, true, nil
}
