package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/pglease/pglease/pgleasetest"
)

// Ports of the servers the benchmark starts: loopback only, never the
// defaults (5432, 6379, 2379), so a system installation is left alone.
const (
	redisPort    = 16379
	etcdPort     = 12379
	etcdPeerPort = 12380
)

// env is the set of servers one run talks to.
type env struct {
	pg       *pgleasetest.Cluster
	dsn      string // the "bench" database
	redisURL string
	etcdURL  string
	redis    *exec.Cmd
	etcd     *exec.Cmd
	tmp      string
	logf     func(string, ...any)
}

// pgSettings make the cluster honest for latency: every acquire waits for
// its WAL flush like on a production server (pgleasetest turns fsync off by
// default for tests), and pg_stat_statements counts statements.
var pgSettings = map[string]string{
	"fsync":                               "on",
	"synchronous_commit":                  "on",
	"full_page_writes":                    "on",
	"shared_preload_libraries":            "pg_stat_statements",
	"pg_stat_statements.max":              "5000",
	"pg_stat_statements.track":            "top",
	"max_connections":                     "600",
	"max_locks_per_transaction":           "128",
	"shared_buffers":                      "256MB",
	"idle_in_transaction_session_timeout": "0",
}

func startEnv(ctx context.Context, logf func(string, ...any), needRedis, needEtcd bool) (_ *env, err error) {
	e := &env{logf: logf}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	e.tmp, err = os.MkdirTemp("", "pglease-bench-")
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	e.pg, err = pgleasetest.Start(ctx, pgleasetest.Options{Settings: pgSettings})
	if err != nil {
		return nil, fmt.Errorf("start PostgreSQL: %w", err)
	}
	if err := e.pg.Exec(ctx, "CREATE DATABASE bench"); err != nil {
		return nil, err
	}
	e.dsn = e.pg.DSN("bench")
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		return nil, err
	}
	_, err = conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
	conn.Close(ctx)
	if err != nil {
		return nil, err
	}
	logf("PostgreSQL up on port %d (%v)", e.pg.Port(), time.Since(t0).Round(time.Millisecond))
	if needRedis {
		if err := e.startRedis(ctx); err != nil {
			return nil, err
		}
	}
	if needEtcd {
		if err := e.startEtcd(ctx); err != nil {
			return nil, err
		}
	}
	return e, nil
}

func portFree(port int) bool {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 200*time.Millisecond)
	if err != nil {
		return true
	}
	c.Close()
	return false
}

func (e *env) startRedis(ctx context.Context) error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return errors.New("redis-server not found: apt-get install redis-server (bench/run.sh does it when run as root)")
	}
	if !portFree(redisPort) {
		return fmt.Errorf("port %d is in use; is an earlier benchmark still running?", redisPort)
	}
	dir := filepath.Join(e.tmp, "redis")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(redisPort), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no", "--loglevel", "warning")
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	e.redis = cmd
	e.redisURL = fmt.Sprintf("redis://127.0.0.1:%d/0", redisPort)
	rc := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", redisPort)})
	defer rc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := rc.Ping(ctx).Err(); err == nil {
			break
		} else if time.Now().After(deadline) {
			return fmt.Errorf("redis did not start: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.logf("Redis up on port %d", redisPort)
	return nil
}

func (e *env) startEtcd(ctx context.Context) error {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return errors.New("etcd not found: apt-get install etcd-server (bench/run.sh does it when run as root)")
	}
	if !portFree(etcdPort) || !portFree(etcdPeerPort) {
		return fmt.Errorf("port %d or %d is in use; is an earlier benchmark still running?", etcdPort, etcdPeerPort)
	}
	dir := filepath.Join(e.tmp, "etcd")
	client := fmt.Sprintf("http://127.0.0.1:%d", etcdPort)
	peer := fmt.Sprintf("http://127.0.0.1:%d", etcdPeerPort)
	cmd := exec.Command(bin, "--name", "bench", "--data-dir", dir,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "bench="+peer, "--initial-cluster-state", "new",
		"--logger", "zap", "--log-level", "error")
	logFile, err := os.Create(filepath.Join(e.tmp, "etcd.log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), "ETCD_UNSUPPORTED_ARCH=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	e.etcd = cmd
	e.etcdURL = fmt.Sprintf("127.0.0.1:%d", etcdPort)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(client + "/health")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), `"true"`) {
				break
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd did not become healthy (log %s)", logFile.Name())
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.logf("etcd up on port %d", etcdPort)
	return nil
}

func stopCmd(cmd *exec.Cmd) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

func (e *env) close() {
	stopCmd(e.redis)
	stopCmd(e.etcd)
	if e.pg != nil {
		_ = e.pg.Close()
	}
	if e.tmp != "" {
		_ = os.RemoveAll(e.tmp)
	}
}

// ---- server-side counters ----

// counters is a snapshot of a server's work: statements (or commands, or
// requests) executed and CPU time consumed.
type counters struct {
	at      time.Time
	stmts   int64
	srvTime time.Duration // PostgreSQL: planning + execution time of those statements
	cpu     time.Duration
	conns   int
}

type delta struct {
	dur     time.Duration
	stmts   int64
	srvTime time.Duration
	cpu     time.Duration
	conns   int // at the end of the window
}

func (a counters) sub(b counters) delta {
	return delta{dur: a.at.Sub(b.at), stmts: a.stmts - b.stmts, srvTime: a.srvTime - b.srvTime, cpu: a.cpu - b.cpu, conns: a.conns}
}

func (d delta) stmtsPerSec() float64 { return float64(d.stmts) / d.dur.Seconds() }

// cpuPercent is server CPU as a percentage of one core.
func (d delta) cpuPercent() float64 { return 100 * d.cpu.Seconds() / d.dur.Seconds() }

// snapshot reads the counters of backend ("pg", "redis" or "etcd").
func (e *env) snapshot(ctx context.Context, backend string) (counters, error) {
	switch backend {
	case "pg":
		return e.pgCounters(ctx)
	case "redis":
		return e.redisCounters(ctx)
	case "etcd":
		return e.etcdCounters(ctx)
	}
	return counters{}, fmt.Errorf("unknown backend %q", backend)
}

func (e *env) pgCounters(ctx context.Context) (counters, error) {
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		return counters{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var c counters
	// Statements of the bench database only, not this query's own. The
	// filter names this query, not every statement that mentions pg_stat:
	// pglease's statements of schema versions before 9 called
	// pg_stat_get_bgwriter_stat_reset_time() (the server incarnation) and
	// must be counted.
	var ms float64
	err = conn.QueryRow(ctx, `
SELECT coalesce(sum(calls), 0)::bigint, coalesce(sum(total_exec_time + total_plan_time), 0)::float8,
       (SELECT count(*) FROM pg_stat_activity WHERE datname = 'bench' AND pid <> pg_backend_pid())::int
  FROM pg_stat_statements AS bench_counters
 WHERE bench_counters.dbid = (SELECT oid FROM pg_database WHERE datname = 'bench')
   AND bench_counters.query NOT LIKE '%pg_stat_statements AS bench_counters%'`).Scan(&c.stmts, &ms, &c.conns)
	if err != nil {
		return c, err
	}
	c.srvTime = time.Duration(ms * float64(time.Millisecond))
	c.cpu = pgCPU(e.pg.DataDir())
	c.at = time.Now()
	return c, nil
}

// pgCPU sums user+system CPU of the postmaster and its live children, plus
// that of children it already reaped (backends of closed connections).
func pgCPU(dataDir string) time.Duration {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	pm, _ := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	var total time.Duration
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		st, ok := procStat(pid)
		if !ok {
			continue
		}
		if pid == pm {
			total += st.cpu + st.childCPU
		} else if st.ppid == pm {
			total += st.cpu
		}
	}
	return total
}

type pstat struct {
	ppid          int
	cpu, childCPU time.Duration
}

// procStat reads /proc/PID/stat: parent pid, user+system CPU time, and
// that of reaped children.
func procStat(pid int) (pstat, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return pstat{}, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return pstat{}, false
	}
	f := strings.Fields(s[i+1:])
	// after ")": state(0) ppid(1) … utime(11) stime(12) cutime(13) cstime(14)
	if len(f) < 15 {
		return pstat{}, false
	}
	n := func(k int) time.Duration {
		v, _ := strconv.ParseInt(f[k], 10, 64)
		return time.Duration(v) * time.Second / 100 // USER_HZ
	}
	ppid, _ := strconv.Atoi(f[1])
	return pstat{ppid: ppid, cpu: n(11) + n(12), childCPU: n(13) + n(14)}, true
}

func cmdCPU(cmd *exec.Cmd) time.Duration {
	if cmd == nil || cmd.Process == nil {
		return 0
	}
	st, _ := procStat(cmd.Process.Pid)
	return st.cpu
}

// redisCounters counts requests as the clients sent them (INFO
// commandstats would also count every command a Lua script runs), in this
// process and in child processes, which report their counts on stdout.
func (e *env) redisCounters(ctx context.Context) (counters, error) {
	rc := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", redisPort)})
	defer rc.Close()
	c := counters{stmts: redisRequests.Load() + childRequests()}
	cl, err := rc.Info(ctx, "clients").Result()
	if err != nil {
		return c, err
	}
	for _, line := range strings.Split(cl, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_clients:"); ok {
			c.conns, _ = strconv.Atoi(v)
			c.conns-- // this client
		}
	}
	c.cpu = cmdCPU(e.redis)
	c.at = time.Now()
	return c, nil
}

// redisRequests counts the commands sent by the Redis clients of this
// process.
var redisRequests atomic.Int64

type countHook struct{}

func (countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		redisRequests.Add(1)
		return next(ctx, cmd)
	}
}
func (countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		redisRequests.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// newRedis returns a counted client of the benchmark's Redis.
func newRedis(poolSize int) *redis.Client {
	rc := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", redisPort), PoolSize: poolSize})
	rc.AddHook(countHook{})
	return rc
}

// etcdCounters counts gRPC messages received by the server (unary requests
// plus every message on a stream, such as lease keep-alives).
func (e *env) etcdCounters(ctx context.Context) (counters, error) {
	var c counters
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+e.etcdURL+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return c, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "grpc_server_msg_received_total{"):
			c.stmts += int64(lastFloat(line))
		case strings.HasPrefix(line, "grpc_server_started_total{") && strings.Contains(line, `grpc_type="bidi_stream"`):
			c.conns += int(lastFloat(line)) // streams opened (approximation)
		}
	}
	c.conns = 0
	c.cpu = cmdCPU(e.etcd)
	c.at = time.Now()
	return c, sc.Err()
}

func lastFloat(line string) float64 {
	f := strings.Fields(line)
	v, _ := strconv.ParseFloat(f[len(f)-1], 64)
	return v
}
