// Package pgtest provides test helpers for packages that need a PostgreSQL
// server: a shared throwaway cluster per test binary, per-test schemas and
// pools, a TCP fault-injection proxy and a goroutine leak check.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// Set PGLEASE_TEST_DSN to run against an existing server instead of starting
// a private cluster.
package pgtest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgcluster"
)

// EnvDSN names the environment variable that selects an existing server.
const EnvDSN = "PGLEASE_TEST_DSN"

var (
	baseDSN string
	shared  *pgcluster.Cluster
)

// Main runs the tests of a package: it starts a shared cluster (unless
// PGLEASE_TEST_DSN is set), runs m, closes the cluster, checks for leaked
// goroutines when the tests passed, and exits.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if dsn := os.Getenv(EnvDSN); dsn != "" {
		baseDSN = dsn
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		c, err := pgcluster.Start(ctx, pgcluster.Options{})
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		shared, baseDSN = c, c.DSN("")
	}
	if ExportDatabaseURL {
		os.Setenv("DATABASE_URL", baseDSN)
	}
	code := m.Run()
	if shared != nil {
		if err := shared.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest: closing cluster:", err)
			if code == 0 {
				code = 1
			}
		}
	}
	if code == 0 && CheckLeakedGoroutines() {
		code = 1
	}
	return code
}

// ExportDatabaseURL makes Main set DATABASE_URL to the shared server for the
// test process, so that Example functions can read it as users would.
var ExportDatabaseURL bool

// DSN returns the connection URL of the shared server.
func DSN(t testing.TB) string {
	t.Helper()
	if baseDSN == "" {
		t.Fatal("pgtest: no server; call pgtest.Main(m) from TestMain")
	}
	return baseDSN
}

// Cluster returns the shared cluster, or nil when the tests run against
// PGLEASE_TEST_DSN.
func Cluster() *pgcluster.Cluster { return shared }

// RequireCluster returns the shared cluster, skipping the test when there is
// none (fault tests that restart or kill the server need it).
func RequireCluster(t testing.TB) *pgcluster.Cluster {
	t.Helper()
	if shared == nil {
		t.Skip("pgtest: test needs a private cluster; unset " + EnvDSN)
	}
	return shared
}
