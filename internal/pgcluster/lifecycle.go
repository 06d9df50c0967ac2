package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// DSN returns a connection URL for database db ("" means "postgres").
func (c *Cluster) DSN(db string) string {
	if db == "" {
		db = "postgres"
	}
	return fmt.Sprintf("postgres://postgres@%s:%d/%s?sslmode=disable", c.Host(), c.port, url.PathEscape(db))
}

// Port returns the TCP port the server listens on.
func (c *Cluster) Port() int { return c.port }

// Host returns the address the server listens on.
func (c *Cluster) Host() string { return "127.0.0.1" }

// DataDir returns the cluster's data directory.
func (c *Cluster) DataDir() string { return c.dataDir }

// LogFile returns the path of the server log.
func (c *Cluster) LogFile() string { return c.logFile }

// Exec connects to the "postgres" database and runs sql, which may hold
// several statements.
func (c *Cluster) Exec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, c.DSN(""))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// Start starts the server again after Stop or Kill. It is a no-op when the
// server is already running.
func (c *Cluster) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("pglease: cluster is closed")
	}
	if c.running() {
		return nil
	}
	var err error
	for attempt := 1; attempt <= 5; attempt++ {
		// Retry: after Kill, leftover shared memory may briefly block startup.
		if err = c.start(ctx); err == nil || ctx.Err() != nil {
			return err
		}
		c.logf("pgcluster: start attempt %d failed: %v", attempt, err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		}
	}
	return err
}

// Restart restarts the server with pg_ctl's shutdown mode ("smart", "fast"
// or "immediate") and waits until it accepts connections again.
func (c *Cluster) Restart(ctx context.Context, mode string) error {
	switch mode {
	case "smart", "fast", "immediate":
	default:
		return fmt.Errorf("pglease: invalid restart mode %q", mode)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("pglease: cluster is closed")
	}
	_, err := c.run(ctx, "pg_ctl", "restart", "-D", c.dataDir, "-l", c.logFile, "-m", mode, "-w", "-t", "60", "-s")
	if err != nil {
		return c.withLog(err)
	}
	return nil
}

// Stop shuts the server down: a fast shutdown, falling back to immediate,
// then to SIGKILL. It is a no-op when the server is not running.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stop(ctx)
}

// Shutdown stops the server with pg_ctl's shutdown mode ("smart", "fast"
// or "immediate": every process quits at once, without a checkpoint, as in
// a crash) and no fallback. Start starts it again.
func (c *Cluster) Shutdown(ctx context.Context, mode string) error {
	switch mode {
	case "smart", "fast", "immediate":
	default:
		return fmt.Errorf("pglease: invalid shutdown mode %q", mode)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("pglease: cluster is closed")
	}
	if _, err := c.run(ctx, "pg_ctl", "stop", "-D", c.dataDir, "-m", mode, "-w", "-t", "60", "-s"); err != nil {
		return c.withLog(err)
	}
	return nil
}

// Kill simulates a crash: it SIGKILLs the postmaster and its child
// processes and waits until they are gone.
func (c *Cluster) Kill() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kill()
}

// Close stops the server and removes the cluster's temporary directory.
// It is idempotent.
func (c *Cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := c.stop(ctx)
	return errors.Join(err, os.RemoveAll(c.root))
}

// start runs pg_ctl start; on failure it makes sure no postmaster is left.
func (c *Cluster) start(ctx context.Context) error {
	_, err := c.run(ctx, "pg_ctl", "start", "-D", c.dataDir, "-l", c.logFile, "-w", "-t", "60", "-s")
	if err != nil {
		_ = c.kill()
		return c.withLog(err)
	}
	c.logf("pgcluster: server started on %s:%d (dir %s)", c.Host(), c.port, c.root)
	return nil
}

func (c *Cluster) stop(ctx context.Context) error {
	if !c.running() {
		return nil
	}
	for _, mode := range []string{"fast", "immediate"} {
		_, err := c.run(ctx, "pg_ctl", "stop", "-D", c.dataDir, "-m", mode, "-w", "-t", "30", "-s")
		if err == nil {
			return nil
		}
		c.logf("pgcluster: pg_ctl stop -m %s: %v", mode, err)
	}
	return c.kill()
}

func (c *Cluster) kill() error {
	pid := c.pid()
	if pid <= 0 || !alive(pid) {
		return nil
	}
	if err := c.killPids(killTree(pid)); err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Second)
	c.logf("pgcluster: killed postmaster %d", pid)
	// A dead postmaster may linger as a zombie until its (adoptive) parent
	// reaps it; PostgreSQL would then refuse to start, taking the stale
	// postmaster.pid for a live server. Give the reaper a moment, then
	// remove the lock file ourselves.
	for exists(pid) {
		if time.Now().After(deadline) {
			c.logf("pgcluster: postmaster %d not reaped; removing postmaster.pid", pid)
			return os.Remove(filepath.Join(c.dataDir, "postmaster.pid"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// killPids waits until the SIGKILLed pids are gone.
func (c *Cluster) killPids(pids []int) error {
	deadline := time.Now().Add(5 * time.Second)
	for _, p := range pids {
		for alive(p) {
			if time.Now().After(deadline) {
				return fmt.Errorf("pglease: process %d did not exit after SIGKILL", p)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}

// pid returns the postmaster pid from postmaster.pid, or 0.
func (c *Cluster) pid() int { return PostmasterPID(c.dataDir) }

// PostmasterPID returns the pid recorded in dataDir's postmaster.pid, or
// 0 if there is none.
func PostmasterPID(dataDir string) int {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

func (c *Cluster) running() bool {
	pid := c.pid()
	return pid > 0 && alive(pid)
}

// run executes a PostgreSQL binary as the server user.
func (c *Cluster) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	cmd.Dir = c.root
	cmd.Env = cleanEnv()
	c.user.apply(cmd)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	c.logf("pgcluster: %s %s", name, strings.Join(args, " "))
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("pglease: %s %s: %w: %s", name, args[0], err, strings.TrimSpace(out.String()))
	}
	return out.Bytes(), nil
}

// withLog appends the tail of the server log to err.
func (c *Cluster) withLog(err error) error {
	b, rerr := os.ReadFile(c.logFile)
	if rerr != nil || len(b) == 0 {
		return err
	}
	const max = 2000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return fmt.Errorf("%w\nserver log tail (%s):\n%s", err, c.logFile, strings.TrimSpace(string(b)))
}

// cleanEnv is the environment minus libpq/PG variables that could redirect
// the tools, with a C locale for stable messages.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}
