package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

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
