package patroni

// The cluster as Patroni reports it: members, the primary, health,
// switchovers; and the clean-up of a cluster and of stale ones.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/pgcluster"
)

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
	var standby bool
	if err := n.query(ctx, `SELECT pg_is_in_recovery()`, nil, &standby); err != nil {
		return err
	}
	if standby {
		return fmt.Errorf("%s is in recovery", n.Name)
	}
	return nil
}

// WaitHealthy waits until every node runs, one is the leader and accepts
// writes, every replica streams on the leader's timeline without lag, and
// (with Sync) one of them is the synchronous standby. "Without lag" is
// checked on the servers themselves, not only as Patroni reports it (from
// positions it stores every loop_wait): every replica has replayed the
// WAL the leader had written when asked, so that what was committed
// before WaitHealthy returns (a test's tables) is on every node.
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
		} else if err := c.replayed(ctx, leader); err != nil {
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

// replayed checks that every node but the leader has replayed the WAL
// the leader had written when asked.
func (c *Cluster) replayed(ctx context.Context, leader *Node) error {
	var lsn string
	if err := leader.query(ctx, `SELECT pg_current_wal_lsn()::text`, nil, &lsn); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		if n == leader {
			continue
		}
		var ok bool
		var at *string
		if err := n.query(ctx, `SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false), pg_last_wal_replay_lsn()::text`, []any{lsn}, &ok, &at); err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%s has replayed the WAL up to %v, the leader %s had written up to %s", n.Name, ptrOr(at, "nothing"), leader.Name, lsn)
		}
	}
	return nil
}

func ptrOr(p *string, def string) string {
	if p == nil {
		return def
	}
	return *p
}

// query runs one query on a short direct connection to the node's
// PostgreSQL and scans its row into dest.
func (n *Node) query(ctx context.Context, sql string, args []any, dest ...any) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, n.DSN())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.QueryRow(ctx, sql, args...).Scan(dest...)
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
