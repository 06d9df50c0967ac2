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
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/freeport"
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

func (c *Cluster) startEtcd() error {
	client, err := freeport.Pick()
	if err != nil {
		return err
	}
	peer, err := freeport.Pick()
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
	n.pgPort, err1 = freeport.Pick()
	n.apiPort, err2 = freeport.Pick()
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
