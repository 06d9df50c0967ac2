package store

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/pgtest"
)

// TestServerTimePerCycle reports the server's execution time of one plain,
// uncontended acquire + release through the store (on a pgx pool, as the
// client runs them), and of the upsert reference's (see
// BenchmarkCycleAgainstUpsert), from pg_stat_statements: the sum of
// total_exec_time over the statements of a loop, divided by the loop's
// cycles. It needs a server that loads pg_stat_statements (set
// PGLEASE_TEST_DSN to one) and runs only when PGLEASE_SERVER_TIME is set
// (to the number of cycles): the figures are for a report, and other
// tests' statements on the same server would count in them.
func TestServerTimePerCycle(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("PGLEASE_SERVER_TIME"))
	if n <= 0 {
		t.Skip("set PGLEASE_SERVER_TIME to the number of cycles (and PGLEASE_TEST_DSN to a server with pg_stat_statements)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	schema := pgtest.Schema(t)
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 1 // one backend, whose CPU time /proc tells when the server is local
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements SCHEMA public"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, refSchema); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, schema+".leases")
	db := Pgx(pool)
	if err := s.EnsureSchema(ctx, db); err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	// cpu is the backend's time on a CPU so far (0 when the server is
	// not local): the first field of /proc/PID/schedstat, in ns.
	cpu := func() time.Duration {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
		if err != nil {
			return 0
		}
		ns, _ := strconv.ParseInt(strings.Fields(string(b))[0], 10, 64)
		return time.Duration(ns)
	}
	refCycle := func(name string) error {
		var token, deleted int64
		var setting string
		if err := pool.QueryRow(ctx, refAcquire, name, "me", 30_000).Scan(&token); err != nil {
			return err
		}
		return pool.QueryRow(ctx, refRelease, name, token).Scan(&deleted, &setting)
	}
	storeCycle := func(name string) error {
		r, err := s.Acquire(ctx, db, AcquireArgs{Name: name, Owner: "me", TTL: 30 * time.Second,
			Metadata: []byte(`{"host":"h","pid":1}`), Client: "0123456789abcdef", FairAfter: FairAfter})
		if err != nil || !r.Acquired {
			return fmt.Errorf("acquire %s: %v (acquired %v)", name, err, r.Acquired)
		}
		if rel, err := s.Release(ctx, db, name, r.Token); err != nil || !rel.Released {
			return fmt.Errorf("release %s: %v (ours %v)", name, err, rel.Released)
		}
		return nil
	}
	for i := range 500 {
		if err := refCycle(fmt.Sprintf("warm-%d", i)); err != nil {
			t.Fatal(err)
		}
		if err := storeCycle(fmt.Sprintf("warm-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, "SELECT public.pg_stat_statements_reset()"); err != nil {
		t.Fatal(err)
	}
	// The two alternate, so that the machine's noise weighs on both alike.
	var refCPU, ourCPU time.Duration
	for i := range n {
		c0 := cpu()
		if err := refCycle(fmt.Sprintf("n-%d", i)); err != nil {
			t.Fatal(err)
		}
		c1 := cpu()
		if err := storeCycle(fmt.Sprintf("n-%d", i)); err != nil {
			t.Fatal(err)
		}
		refCPU, ourCPU = refCPU+c1-c0, ourCPU+cpu()-c1
	}
	refCPU, ourCPU = refCPU/time.Duration(n), ourCPU/time.Duration(n)
	rows, err := pool.Query(ctx, `SELECT total_exec_time, calls, min_exec_time, left(regexp_replace(query, '\s+', ' ', 'g'), 60)
		FROM public.pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND query NOT LIKE '%pg_stat_statements%'
		ORDER BY total_exec_time DESC`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ref, ours time.Duration
	var refStmts, ourStmts float64
	for rows.Next() {
		var total, least float64
		var c int64
		var text string
		if err := rows.Scan(&total, &c, &least, &text); err != nil {
			t.Fatal(err)
		}
		t.Logf("  %6d calls, mean %.4f ms, min %.4f ms: %s", c, total/float64(c), least, text)
		d := time.Duration(total * float64(time.Millisecond) / float64(n))
		if strings.Contains(text, " ref") {
			ref, refStmts = ref+d, refStmts+float64(c)/float64(n)
		} else {
			ours, ourStmts = ours+d, ourStmts+float64(c)/float64(n)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("server time per plain acquire + release, %d cycles: store %v in %.1f statements, reference %v in %.1f statements (%.2f×)",
		n, ours, ourStmts, ref, refStmts, float64(ours)/float64(ref))
	t.Logf("backend CPU per plain acquire + release: store %v, reference %v (%.2f×)", ourCPU, refCPU, float64(ourCPU)/float64(refCPU))
}
