// Package patroni starts a throwaway highly available PostgreSQL cluster for
// tests: one etcd member and PostgreSQL nodes managed by Patroni (Debian's
// patroni and etcd-server packages), all on loopback, in a temporary
// directory that is removed afterwards.
//
// Every network path that a partition of one node cuts runs through a fault
// proxy of that node ([pgtest.Proxy]): clients to its PostgreSQL, the other
// nodes' replication and pg_rewind connections to it (its connect_address),
// the other Patroni daemons' REST calls to it, and its own Patroni's
// connection to etcd. [Cluster.Partition] cuts them all at once, without FIN
// or RST, as a cable would.
//
// A cluster left behind by a test binary that was killed is reaped by the
// next [Start] (its owner's pid is recorded, as internal/pgcluster does).
package patroni

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/pgcluster"
	"github.com/pglease/pglease/internal/pgtest"
)

// Options configures Start.
type Options struct {
	// Nodes is the number of PostgreSQL nodes (default 3).
	Nodes int
	// Sync sets Patroni's synchronous_mode: a commit returns once a
	// synchronous standby has it, and Patroni promotes only that standby.
	// Without it replication is asynchronous.
	Sync bool
	// TTL, LoopWait and RetryTimeout are Patroni's settings of the same
	// names (defaults 10 s, 1 s, 3 s: failovers within seconds, for tests).
	TTL, LoopWait, RetryTimeout time.Duration
}

// Cluster is a running Patroni cluster.
type Cluster struct {
	t        testing.TB
	opt      Options
	root     string
	pgBin    string
	etcdPort int
	etcd     *exec.Cmd
	etcdDone chan struct{}
	http     *http.Client
	Nodes    []*Node
}

// Node is one PostgreSQL server and its Patroni daemon.
type Node struct {
	Name    string
	c       *Cluster
	dir     string
	pgPort  int
	apiPort int
	conf    string
	log     string

	client *pgtest.Proxy // clients connect through it
	repl   *pgtest.Proxy // its connect_address: replication and pg_rewind
	api    *pgtest.Proxy // its REST API's connect_address
	dcs    *pgtest.Proxy // its Patroni's connection to etcd

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

const ownerFile = "owner.pid"

// Available reports why a cluster cannot be started here, or nil.
func Available() error {
	var missing []string
	for _, b := range []string{"patroni", "patronictl", "etcd"} {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("patroni: %s not found in PATH; install Debian's patroni and etcd-server packages (apt-get install patroni etcd-server)",
			strings.Join(missing, ", "))
	}
	if _, err := pgcluster.FindBinaries(); err != nil {
		return err
	}
	return nil
}

// Start starts etcd and the nodes, waits until the cluster is healthy (one
// leader, every replica streaming, a synchronous standby with Sync) and
// stops and removes everything when the test ends.
func Start(t testing.TB, opt Options) *Cluster {
	t.Helper()
	if err := Available(); err != nil {
		t.Fatal(err)
	}
	if opt.Nodes == 0 {
		opt.Nodes = 3
	}
	if opt.TTL == 0 {
		opt.TTL, opt.LoopWait, opt.RetryTimeout = 10*time.Second, time.Second, 3*time.Second
	}
	pgBin, _ := pgcluster.FindBinaries()
	reapStale(os.TempDir(), t.Logf)
	root, err := os.MkdirTemp("", "pglease-patroni-")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{t: t, opt: opt, root: root, pgBin: pgBin,
		http: &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}}
	t.Cleanup(c.close)
	if err := os.WriteFile(filepath.Join(root, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(os.Chmod(root, 0o755), pgcluster.ChownToServerUser(root)); err != nil {
		t.Fatal(err)
	}
	if err := c.startEtcd(); err != nil {
		t.Fatal(err)
	}
	for i := range opt.Nodes {
		n, err := c.newNode(fmt.Sprintf("n%d", i+1))
		if err != nil {
			t.Fatal(err)
		}
		c.Nodes = append(c.Nodes, n)
	}
	for _, n := range c.Nodes {
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatalf("%v\n%s", err, c.Logs())
	}
	return c
}

// DSN is a multi-host connection URL over every node's client proxy with
// target_session_attrs=read-write: it follows the primary.
func (c *Cluster) DSN() string {
	hosts := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		hosts[i] = n.client.Addr()
	}
	return "postgres://postgres@" + strings.Join(hosts, ",") +
		"/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=2"
}

// DSN connects to the node's PostgreSQL directly, bypassing its proxies.
func (n *Node) DSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", n.pgPort)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (c *Cluster) startEtcd() error {
	client, err := freePort()
	if err != nil {
		return err
	}
	peer, err := freePort()
	if err != nil {
		return err
	}
	c.etcdPort = client
	cu, pu := fmt.Sprintf("http://127.0.0.1:%d", client), fmt.Sprintf("http://127.0.0.1:%d", peer)
	cmd := exec.Command("etcd", "--name", "e1", "--data-dir", filepath.Join(c.root, "etcd"),
		"--listen-client-urls", cu, "--advertise-client-urls", cu,
		"--listen-peer-urls", pu, "--initial-advertise-peer-urls", pu, "--initial-cluster", "e1="+pu)
	logf, err := os.Create(filepath.Join(c.root, "etcd.log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("patroni: start etcd: %w", err)
	}
	c.etcd, c.etcdDone = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(c.etcdDone) }()
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := c.http.Get(cu + "/health")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if bytes.Contains(b, []byte(`"true"`)) {
				return nil
			}
		}
		select {
		case <-c.etcdDone:
			return fmt.Errorf("patroni: etcd exited at start:\n%s", tail(filepath.Join(c.root, "etcd.log"), 2000))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("patroni: etcd not healthy within a minute:\n%s", tail(filepath.Join(c.root, "etcd.log"), 2000))
		}
	}
}

func (c *Cluster) newNode(name string) (*Node, error) {
	n := &Node{Name: name, c: c, dir: filepath.Join(c.root, name)}
	var err1, err2 error
	n.pgPort, err1 = freePort()
	n.apiPort, err2 = freePort()
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	pg := fmt.Sprintf("127.0.0.1:%d", n.pgPort)
	n.client = pgtest.NewProxy(c.t, pg)
	n.repl = pgtest.NewProxy(c.t, pg)
	n.api = pgtest.NewProxy(c.t, fmt.Sprintf("127.0.0.1:%d", n.apiPort))
	n.dcs = pgtest.NewProxy(c.t, fmt.Sprintf("127.0.0.1:%d", c.etcdPort))
	if err := os.Mkdir(n.dir, 0o700); err != nil {
		return nil, err
	}
	if err := pgcluster.ChownToServerUser(n.dir); err != nil {
		return nil, err
	}
	n.conf, n.log = filepath.Join(n.dir, "patroni.yml"), filepath.Join(n.dir, "patroni.log")
	b, err := json.MarshalIndent(n.config(), "", "  ") // JSON is YAML
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(n.conf, b, 0o644); err != nil {
		return nil, err
	}
	return n, nil
}

// config is the node's Patroni configuration.
func (n *Node) config() map[string]any {
	o := n.c.opt
	secs := func(d time.Duration) int { return int(d / time.Second) }
	return map[string]any{
		"scope":     "pglease",
		"namespace": "/pglease/",
		"name":      n.Name,
		"log":       map[string]any{"level": "INFO"},
		"restapi":   map[string]any{"listen": fmt.Sprintf("127.0.0.1:%d", n.apiPort), "connect_address": n.api.Addr()},
		"etcd3":     map[string]any{"hosts": []string{n.dcs.Addr()}, "use_proxies": true},
		"watchdog":  map[string]any{"mode": "off"},
		"bootstrap": map[string]any{
			"dcs": map[string]any{
				"ttl": secs(o.TTL), "loop_wait": secs(o.LoopWait), "retry_timeout": secs(o.RetryTimeout),
				"maximum_lag_on_failover": 1 << 20,
				"synchronous_mode":        o.Sync,
				"postgresql": map[string]any{
					"use_pg_rewind": true,
					"parameters": map[string]any{
						"wal_log_hints": "on", "max_connections": 300, "fsync": "off",
						"full_page_writes": "on", "wal_keep_size": "256MB",
						"log_line_prefix": "%m [%p] %a ", "lc_messages": "C",
					},
				},
			},
			"initdb": []any{map[string]string{"encoding": "UTF8"}, map[string]string{"locale": "C"}, map[string]string{"auth": "trust"}},
			"pg_hba": []string{"local all all trust", "host replication all 127.0.0.1/32 trust", "host all all 127.0.0.1/32 trust"},
		},
		"postgresql": map[string]any{
			"listen":          fmt.Sprintf("127.0.0.1:%d", n.pgPort),
			"connect_address": n.repl.Addr(),
			"data_dir":        filepath.Join(n.dir, "data"),
			"bin_dir":         n.c.pgBin,
			"pgpass":          filepath.Join(n.dir, "pgpass"),
			"authentication": map[string]any{
				"replication": map[string]string{"username": "postgres"},
				"superuser":   map[string]string{"username": "postgres"},
				"rewind":      map[string]string{"username": "postgres"},
			},
			"parameters": map[string]any{"unix_socket_directories": n.dir},
		},
	}
}

// Start starts the node's Patroni daemon (after Kill: it rejoins the
// cluster, with pg_rewind if its timeline diverged).
func (n *Node) Start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.running() {
		return nil
	}
	logf, err := os.OpenFile(n.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command("patroni", n.conf)
	cmd.Dir = n.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := pgcluster.AsServerUser(cmd); err != nil {
		logf.Close()
		return err
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("patroni: start %s: %w", n.Name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	n.cmd, n.done = cmd, done
	return nil
}

func (n *Node) running() bool {
	if n.done == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// Kill SIGKILLs the node's Patroni daemon, then its postmaster and
// backends: a crash of the machine as the rest of the cluster sees it.
func (n *Node) Kill() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.running() {
		_ = n.cmd.Process.Kill()
		<-n.done
	}
	if pid := pgcluster.PostmasterPID(filepath.Join(n.dir, "data")); pid > 0 && pgcluster.Alive(pid) {
		return pgcluster.KillTree(pid)
	}
	return nil
}

// Partition cuts (on) or heals every network path of the node: clients
// to it, replication and REST calls from the other nodes to it, and its
// Patroni's connection to etcd.
func (n *Node) Partition(on bool) {
	for _, p := range []*pgtest.Proxy{n.client, n.repl, n.api, n.dcs} {
		p.Partition(on)
	}
}

// DelayReplication stops (on) or resumes the WAL stream from the node to
// the others without closing it, as a replica that falls behind: while it
// lasts, what the node commits reaches no replica (and, in synchronous
// mode, commits wait for the synchronous standby).
func (n *Node) DelayReplication(on bool) { n.repl.Blackhole(on) }

// Member is one node as Patroni's REST API reports it.
type Member struct {
	Name     string `json:"name"`
	Role     string `json:"role"` // "leader", "sync_standby", "replica"
	State    string `json:"state"`
	Timeline int    `json:"timeline"`
	Lag      any    `json:"lag"` // bytes, or "unknown"
}

// Members asks the REST API of the first node that answers (directly,
// not through its proxy) for the cluster as Patroni's store sees it.
// Nodes in skip are not asked (a partitioned node's view is stale).
func (c *Cluster) Members(ctx context.Context, skip ...*Node) ([]Member, error) {
	var errs []error
	for _, n := range c.Nodes {
		if slices.Contains(skip, n) {
			continue
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/cluster", n.apiPort), nil)
		resp, err := c.http.Do(req)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var body struct{ Members []Member }
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		return body.Members, nil
	}
	return nil, fmt.Errorf("patroni: no REST API answered: %w", errors.Join(errs...))
}

// Node returns the node named name, or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// WaitPrimary waits until Patroni reports a running leader other than
// the nodes in not, and that node's PostgreSQL accepts writes; it returns
// the node. The nodes in not are not asked either.
func (c *Cluster) WaitPrimary(ctx context.Context, not ...*Node) (*Node, error) {
	var last error
	for {
		ms, err := c.Members(ctx, not...)
		last = err
		for _, m := range ms {
			if m.Role != "leader" || m.State != "running" {
				continue
			}
			n := c.Node(m.Name)
			if n == nil || slices.Contains(not, n) {
				continue
			}
			if err := n.writable(ctx); err != nil {
				last = err
				continue
			}
			return n, nil
		}
		if last == nil {
			last = fmt.Errorf("no running leader among %+v", ms)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("patroni: no new primary: %w (last: %v)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// writable checks that the node's PostgreSQL is a primary.
func (n *Node) writable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, n.DSN())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var standby bool
	if err := conn.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&standby); err != nil {
		return err
	}
	if standby {
		return fmt.Errorf("%s is in recovery", n.Name)
	}
	return nil
}

// WaitHealthy waits until every node runs, one is the leader and accepts
// writes, every replica streams on the leader's timeline without lag, and
// (with Sync) one of them is the synchronous standby.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	var last string
	for {
		ms, err := c.Members(ctx)
		if err != nil {
			last = err.Error()
		} else if leader, why := c.unhealthy(ms); why != "" {
			last = why
		} else if err := leader.writable(ctx); err != nil {
			last = err.Error()
		} else {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("patroni: cluster not healthy: %w (last: %s)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// unhealthy returns the leader of a healthy cluster, or says what is
// missing.
func (c *Cluster) unhealthy(ms []Member) (*Node, string) {
	if len(ms) != len(c.Nodes) {
		return nil, fmt.Sprintf("%d of %d members registered", len(ms), len(c.Nodes))
	}
	var leader *Node
	tl, leaders, sync := 0, 0, 0
	for _, m := range ms {
		if m.Role == "leader" {
			leaders++
			tl = m.Timeline
			leader = c.Node(m.Name)
		}
		if m.Role == "sync_standby" {
			sync++
		}
	}
	if leaders != 1 {
		return nil, fmt.Sprintf("%d leaders: %+v", leaders, ms)
	}
	if c.opt.Sync && sync == 0 {
		return nil, fmt.Sprintf("no synchronous standby yet: %+v", ms)
	}
	for _, m := range ms {
		if m.State != "running" && m.State != "streaming" {
			return nil, fmt.Sprintf("%s is %s", m.Name, m.State)
		}
		if m.Role == "leader" {
			continue
		}
		if lag, ok := m.Lag.(float64); !ok || lag != 0 || m.Timeline != tl {
			return nil, fmt.Sprintf("%s lags (%v) or is on timeline %d, not %d", m.Name, m.Lag, m.Timeline, tl)
		}
	}
	if leader == nil {
		return nil, fmt.Sprintf("the leader is not one of the nodes: %+v", ms)
	}
	return leader, ""
}

// Switchover runs `patronictl switchover` from the leader to candidate
// (any healthy replica if nil) and returns once patronictl reports it done.
func (c *Cluster) Switchover(ctx context.Context, leader, candidate *Node) error {
	args := []string{"-c", leader.conf, "switchover", "--leader", leader.Name, "--force"}
	if candidate != nil {
		args = append(args, "--candidate", candidate.Name)
	}
	out, err := exec.CommandContext(ctx, "patronictl", args...).CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("Successfully switched over")) {
		return fmt.Errorf("patroni: patronictl switchover: %v\n%s", err, out)
	}
	return nil
}

// Logs returns the tail of every daemon's log, for a failure report.
func (c *Cluster) Logs() string {
	var b strings.Builder
	fmt.Fprintf(&b, "--- etcd:\n%s\n", tail(filepath.Join(c.root, "etcd.log"), 1500))
	for _, n := range c.Nodes {
		fmt.Fprintf(&b, "--- %s (patroni):\n%s\n", n.Name, tail(n.log, 3000))
	}
	return b.String()
}

func tail(path string, max int) string {
	b, _ := os.ReadFile(path)
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// close stops the Patroni daemons (which stop their servers), then etcd,
// and removes the directory.
func (c *Cluster) close() {
	for _, n := range c.Nodes {
		n.mu.Lock()
		if n.running() {
			_ = n.cmd.Process.Signal(syscall.SIGTERM)
		}
		n.mu.Unlock()
	}
	for _, n := range c.Nodes {
		n.mu.Lock()
		if n.running() {
			select {
			case <-n.done:
			case <-time.After(30 * time.Second):
				_ = n.cmd.Process.Kill()
				<-n.done
			}
		}
		n.mu.Unlock()
	}
	if c.etcd != nil {
		_ = c.etcd.Process.Kill()
		<-c.etcdDone
	}
	killUnder(c.root) // a postmaster whose Patroni was killed
	if err := os.RemoveAll(c.root); err != nil {
		c.t.Logf("patroni: remove %s: %v", c.root, err)
	}
}

// reapStale stops and removes the clusters under parent whose owner
// process is gone.
func reapStale(parent string, logf func(string, ...any)) {
	dirs, _ := filepath.Glob(filepath.Join(parent, "pglease-patroni-*"))
	for _, root := range dirs {
		b, err := os.ReadFile(filepath.Join(root, ownerFile))
		if err != nil {
			continue
		}
		owner, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || owner <= 0 || syscall.Kill(owner, 0) == nil {
			continue
		}
		killUnder(root)
		if os.RemoveAll(root) == nil {
			logf("patroni: removed the stale cluster %s of dead process %d", root, owner)
		}
	}
}

// killUnder SIGKILLs every process whose command line names a path under
// root (etcd, Patroni, postmasters and their children) and waits for them.
func killUnder(root string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte(root+"/")) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil || pid == os.Getpid() {
			continue
		}
		_ = pgcluster.KillTree(pid)
	}
}
