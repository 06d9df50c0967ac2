package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pglease/pglease/internal/freeport"
)

// StandbyOptions configures AddStandby.
type StandbyOptions struct {
	// Sync makes the standby synchronous: the primary's
	// synchronous_standby_names names it, so a commit returns only once the
	// standby has flushed its WAL (synchronous_commit = on).
	Sync bool
	// Name is the standby's application_name in pg_stat_replication
	// (default "standby1").
	Name string
	// PrimaryAddr is the host:port the standby streams from, e.g. a fault
	// proxy in front of the primary. Default: the primary itself.
	PrimaryAddr string
}

// AddStandby creates a streaming-replication standby of c (pg_basebackup
// of the running primary, standby.signal, primary_conninfo), starts it on a
// port of its own and waits until it streams (and, with Sync, until the
// primary reports it as synchronous). The standby is a Cluster of its own:
// Close it too. Promote turns it into a primary.
func (c *Cluster) AddStandby(ctx context.Context, opt StandbyOptions) (_ *Cluster, err error) {
	if opt.Name == "" {
		opt.Name = "standby1"
	}
	if opt.PrimaryAddr == "" {
		opt.PrimaryAddr = fmt.Sprintf("%s:%d", c.Host(), c.port)
	}
	host, port, ok := strings.Cut(opt.PrimaryAddr, ":")
	if !ok {
		return nil, fmt.Errorf("pglease: PrimaryAddr %q is not host:port", opt.PrimaryAddr)
	}
	root, err := os.MkdirTemp(filepath.Dir(c.root), "pglease-pg-standby-")
	if err != nil {
		return nil, fmt.Errorf("pglease: create standby dir: %w", err)
	}
	s := &Cluster{
		bin:      c.bin,
		root:     root,
		dataDir:  filepath.Join(root, "data"),
		logFile:  filepath.Join(root, "postgres.log"),
		settings: maps.Clone(c.settings),
		user:     c.user,
		logf:     c.logf,
	}
	if s.settings == nil {
		s.settings = map[string]string{}
	}
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()
	if err := os.Chmod(root, 0o755); err != nil {
		return nil, err
	}
	if err := s.user.chown(root); err != nil {
		return nil, fmt.Errorf("pglease: chown standby dir: %w", err)
	}
	conninfo := fmt.Sprintf("host=%s port=%s user=postgres application_name=%s", host, port, opt.Name)
	if _, err := s.run(ctx, "pg_basebackup", "-D", s.dataDir, "-d", conninfo, "-X", "stream",
		"-c", "fast", "--no-sync"); err != nil {
		return nil, err
	}
	// The copy carries the primary's ALTER SYSTEM settings; a standby must
	// not name itself as its own synchronous standby.
	auto := filepath.Join(s.dataDir, "postgresql.auto.conf")
	if err := os.WriteFile(auto, []byte("# reset by pgcluster.AddStandby\n"), 0o600); err != nil {
		return nil, err
	}
	sig := filepath.Join(s.dataDir, "standby.signal")
	if err := os.WriteFile(sig, nil, 0o600); err != nil {
		return nil, err
	}
	for _, p := range []string{auto, sig} {
		if err := s.user.chown(p); err != nil {
			return nil, err
		}
	}
	s.settings["primary_conninfo"] = conninfo
	s.settings["hot_standby"] = "on"
	if s.port, err = freeport.Pick(); err != nil {
		return nil, err
	}
	if err := s.writeConf(); err != nil {
		return nil, err
	}
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	if opt.Sync {
		// Two calls: ALTER SYSTEM cannot run in the implicit transaction
		// of a multi-statement query.
		if err := c.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = '"+strings.ReplaceAll(opt.Name, "'", "''")+"'"); err != nil {
			return nil, err
		}
		if err := c.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
			return nil, err
		}
	}
	want := "async"
	if opt.Sync {
		want = "sync"
	}
	if err := c.waitReplication(ctx, opt.Name, want); err != nil {
		return nil, s.withLog(err)
	}
	c.logf("pgcluster: standby %s streaming (%s) on port %d", opt.Name, want, s.port)
	return s, nil
}

// waitReplication waits until pg_stat_replication on c shows standby name
// streaming in the given sync_state.
func (c *Cluster) waitReplication(ctx context.Context, name, state string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var last error
	for {
		conn, err := pgx.Connect(ctx, c.DSN(""))
		if err == nil {
			var got string
			err = conn.QueryRow(ctx, `SELECT sync_state FROM pg_stat_replication
				WHERE application_name = $1 AND state = 'streaming'`, name).Scan(&got)
			conn.Close(context.WithoutCancel(ctx))
			if err == nil && got == state {
				return nil
			}
			if err == nil {
				err = fmt.Errorf("sync_state %s", got)
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("pglease: standby %s not streaming (%s) in time: %w", name, state, errors.Join(last, ctx.Err()))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Promote turns a standby into a primary (pg_ctl promote) and waits until
// it accepts writes.
func (c *Cluster) Promote(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("pglease: cluster is closed")
	}
	if _, err := c.run(ctx, "pg_ctl", "promote", "-D", c.dataDir, "-w", "-t", "60", "-s"); err != nil {
		return c.withLog(err)
	}
	return nil
}
