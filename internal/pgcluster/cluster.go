// Package pgcluster starts and manages throwaway local PostgreSQL clusters
// for tests and demos.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pglease/pglease/internal/freeport"
)

// Options configures Start.
type Options struct {
	// Dir is the parent directory of the cluster's temporary directory
	// (default os.TempDir()). When running as root it must be traversable
	// by the "postgres" OS user.
	Dir string
	// Port is the TCP port to listen on; 0 picks a free random port.
	Port int
	// Settings are extra postgresql.conf settings; they override defaults.
	Settings map[string]string
	// Logf, if set, receives diagnostic messages.
	Logf func(format string, args ...any)
}

// Cluster is a running (or stopped) throwaway PostgreSQL cluster. Its
// methods are safe for concurrent use.
type Cluster struct {
	bin      string
	root     string // temporary directory holding everything
	dataDir  string
	logFile  string
	port     int
	settings map[string]string
	user     serverUser
	logf     func(format string, args ...any)

	mu     sync.Mutex // serialises lifecycle operations
	closed bool
}

// defaultSettings are tuned for speed and many test connections.
var defaultSettings = map[string]string{
	"listen_addresses":   "127.0.0.1",
	"fsync":              "off",
	"full_page_writes":   "off",
	"max_connections":    "300",
	"shared_buffers":     "128MB",
	"log_destination":    "stderr",
	"logging_collector":  "off",
	"log_line_prefix":    "%m [%p] %a ",
	"lc_messages":        "C",
	"max_wal_size":       "1GB",
	"checkpoint_timeout": "30min",
}

const ownerFile = "owner.pid"

// reapStale stops and removes clusters under parent left behind by
// processes that died without closing them. A directory whose owner is
// alive, or that records no owner, is left alone.
func reapStale(parent string, usr serverUser, logf func(string, ...any)) {
	dirs, _ := filepath.Glob(filepath.Join(parent, "pglease-pg-*"))
	for _, root := range dirs {
		b, err := os.ReadFile(filepath.Join(root, ownerFile))
		if err != nil {
			continue
		}
		owner, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || owner <= 0 || exists(owner) {
			continue
		}
		c := &Cluster{root: root, dataDir: filepath.Join(root, "data"), user: usr, logf: func(string, ...any) {}}
		if err := c.kill(); err == nil {
			_ = os.RemoveAll(root)
			if logf != nil {
				logf("pgcluster: removed the stale cluster %s of dead process %d", root, owner)
			}
		}
	}
}

// Start creates a new cluster in a fresh temporary directory and starts it.
// The caller must Close it to stop the server and remove the directory.
func Start(ctx context.Context, opt Options) (_ *Cluster, err error) {
	bin, err := FindBinaries()
	if err != nil {
		return nil, err
	}
	usr, err := lookupServerUser()
	if err != nil {
		return nil, err
	}
	parent := opt.Dir
	if parent == "" {
		parent = os.TempDir()
	}
	reapStale(parent, usr, opt.Logf)
	root, err := os.MkdirTemp(parent, "pglease-pg-")
	if err != nil {
		return nil, fmt.Errorf("pglease: create cluster dir: %w", err)
	}
	// Whoever finds this directory after our process died (a test binary
	// killed by its timeout) may stop the server and remove it.
	if err := os.WriteFile(filepath.Join(root, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		_ = os.RemoveAll(root)
		return nil, fmt.Errorf("pglease: create cluster dir: %w", err)
	}
	c := &Cluster{
		bin:      bin,
		root:     root,
		dataDir:  filepath.Join(root, "data"),
		logFile:  filepath.Join(root, "postgres.log"),
		settings: opt.Settings,
		user:     usr,
		logf:     opt.Logf,
	}
	if c.logf == nil {
		c.logf = func(string, ...any) {}
	}
	defer func() {
		if err != nil {
			_ = c.Close()
		}
	}()
	if err := os.Chmod(root, 0o755); err != nil {
		return nil, err
	}
	if err := usr.chown(root); err != nil {
		return nil, fmt.Errorf("pglease: chown cluster dir: %w", err)
	}
	if err := c.initdb(ctx); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		c.port = opt.Port
		if c.port == 0 {
			if c.port, err = freeport.Pick(); err != nil {
				return nil, err
			}
		}
		if err = c.writeConf(); err != nil {
			return nil, err
		}
		logOff := fileSize(c.logFile)
		if err = c.start(ctx); err == nil {
			return c, nil
		}
		if opt.Port != 0 || attempt >= 5 || ctx.Err() != nil || !portInUse(c.logFile, logOff) {
			return nil, err
		}
		c.logf("pgcluster: port %d in use, retrying", c.port)
	}
}

func (c *Cluster) initdb(ctx context.Context) error {
	start := time.Now()
	_, err := c.run(ctx, "initdb", "-D", c.dataDir, "-A", "trust", "-U", "postgres",
		"--no-sync", "-E", "UTF8", "--locale=C")
	if err != nil {
		return err
	}
	c.logf("pgcluster: initdb took %v", time.Since(start).Round(time.Millisecond))
	conf := filepath.Join(c.dataDir, "postgresql.conf")
	f, err := os.OpenFile(conf, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString("\ninclude 'pglease.conf'\n")
	return errors.Join(err, f.Close())
}

// writeConf writes pglease.conf, included from postgresql.conf.
func (c *Cluster) writeConf() error {
	all := map[string]string{
		"port":                    fmt.Sprint(c.port),
		"unix_socket_directories": c.root,
	}
	for k, v := range defaultSettings {
		all[k] = v
	}
	for k, v := range c.settings {
		all[k] = v
	}
	keys := make([]string, 0, len(all))
	for k := range all {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# written by pglease/internal/pgcluster\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = '%s'\n", k, strings.ReplaceAll(all[k], "'", "''"))
	}
	path := filepath.Join(c.dataDir, "pglease.conf")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return c.user.chown(path)
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// portInUse reports whether the server log, from offset off, shows a
// failure to bind the listen port.
func portInUse(logFile string, off int64) bool {
	b, err := os.ReadFile(logFile)
	if err != nil || int64(len(b)) < off {
		return false
	}
	s := string(b[off:])
	return strings.Contains(s, "Address already in use") || strings.Contains(s, "could not create any TCP/IP sockets")
}
