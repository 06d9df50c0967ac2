// Package pgleasetest starts a throwaway PostgreSQL cluster, for tests,
// examples and demos: on a machine with the PostgreSQL server binaries
// installed (initdb, pg_ctl, postgres), [Start] creates a cluster in a fresh
// temporary directory, listening on 127.0.0.1, and [Cluster.Close] stops it
// and removes the directory. A cluster whose process died without closing
// it is removed by the next Start in the same parent directory.
//
// The cluster trades durability for speed (fsync is off): it is not for
// data that must survive. Under root it runs as the "postgres" OS user, as
// PostgreSQL refuses to run as root.
package pgleasetest

import (
	"context"

	"github.com/pglease/pglease/internal/pgcluster"
)

// ErrNoBinaries is returned (wrapped) by [FindBinaries] and [Start] when
// the PostgreSQL server binaries cannot be found; its message says what to
// install.
var ErrNoBinaries = pgcluster.ErrNoBinaries

// FindBinaries returns the directory holding the PostgreSQL server
// binaries (initdb, pg_ctl, postgres). It consults, in order,
// $PGLEASE_PG_BIN, `pg_config --bindir`, the highest version under
// /usr/lib/postgresql/*/bin, and $PATH.
func FindBinaries() (dir string, err error) { return pgcluster.FindBinaries() }

// Options configures [Start]. The zero value is valid.
type Options struct {
	// Dir is the parent directory of the cluster's temporary directory
	// (default os.TempDir()). Under root it must be traversable by the
	// "postgres" OS user.
	Dir string
	// Settings are postgresql.conf settings; they override the defaults
	// (tuned for speed and many connections).
	Settings map[string]string
	// Logf, if set, receives diagnostic messages.
	Logf func(format string, args ...any)
}

// Cluster is a running throwaway PostgreSQL cluster. Its methods are safe
// for concurrent use.
type Cluster struct{ c *pgcluster.Cluster }

// Start creates a cluster in a fresh temporary directory and starts it on
// a free port of 127.0.0.1; the user "postgres" connects without a
// password. The caller must Close it.
func Start(ctx context.Context, opt Options) (*Cluster, error) {
	c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: opt.Dir, Settings: opt.Settings, Logf: opt.Logf})
	if err != nil {
		return nil, err
	}
	return &Cluster{c: c}, nil
}

// DSN returns a connection URL for database db ("" means "postgres").
func (c *Cluster) DSN(db string) string { return c.c.DSN(db) }

// Port returns the TCP port the server listens on, on 127.0.0.1.
func (c *Cluster) Port() int { return c.c.Port() }

// DataDir returns the cluster's data directory, inside its temporary
// directory.
func (c *Cluster) DataDir() string { return c.c.DataDir() }

// Exec connects to the "postgres" database and runs sql, which may hold
// several statements.
func (c *Cluster) Exec(ctx context.Context, sql string) error { return c.c.Exec(ctx, sql) }

// Restart restarts the server with pg_ctl's shutdown mode ("smart", "fast"
// or "immediate") and waits until it accepts connections again, for
// settings that take effect only at start (ALTER SYSTEM).
func (c *Cluster) Restart(ctx context.Context, mode string) error { return c.c.Restart(ctx, mode) }

// Close stops the server and removes the cluster's temporary directory.
// It is idempotent.
func (c *Cluster) Close() error { return c.c.Close() }
