package pgcluster

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func startCluster(t *testing.T, opt Options) *Cluster {
	t.Helper()
	if _, err := FindBinaries(); err != nil {
		t.Skip(err)
	}
	opt.Logf = t.Logf
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

func query(ctx context.Context, dsn, sql string) (string, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var s string
	err = conn.QueryRow(ctx, sql).Scan(&s)
	return s, err
}

func TestFindBinaries(t *testing.T) {
	t.Setenv("PGLEASE_PG_BIN", t.TempDir())
	if _, err := FindBinaries(); err == nil {
		t.Fatal("expected error for PGLEASE_PG_BIN without binaries")
	}
}

func TestLifecycle(t *testing.T) {
	c := startCluster(t, Options{Settings: map[string]string{"application_name": "pgcluster-test"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	if c.Port() == 5432 || c.Port() == 0 {
		t.Fatalf("unexpected port %d", c.Port())
	}
	v, err := query(ctx, c.DSN(""), "SHOW server_version_num")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("server_version_num %s", v)
	if v, err := query(ctx, c.DSN(""), "SHOW max_connections"); err != nil || v != "300" {
		t.Fatalf("max_connections = %q, %v", v, err)
	}
	if v, err := query(ctx, c.DSN(""), "SHOW application_name"); err != nil || v == "" {
		t.Fatalf("application_name = %q, %v", v, err)
	}
	if err := c.Exec(ctx, "CREATE TABLE t (x int); INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}

	for _, mode := range []string{"fast", "immediate"} {
		if err := c.Restart(ctx, mode); err != nil {
			t.Fatalf("restart %s: %v", mode, err)
		}
		if v, err := query(ctx, c.DSN("postgres"), "SELECT x::text FROM t"); err != nil || v != "1" {
			t.Fatalf("after restart %s: %q, %v", mode, v, err)
		}
	}
	if err := c.Restart(ctx, "bogus"); err == nil {
		t.Fatal("expected error for bogus mode")
	}

	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	if _, err := query(ctx, c.DSN(""), "SELECT 1::text"); err == nil {
		t.Fatal("query succeeded on stopped server")
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}

	// Kill while a client is connected, then start again.
	conn, err := pgx.Connect(ctx, c.DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	pid := c.pid()
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Fatalf("postmaster %d still alive after Kill", pid)
	}
	if err := conn.Ping(ctx); err == nil {
		t.Fatal("ping succeeded after Kill")
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := query(ctx, c.DSN(""), "SELECT x::text FROM t"); err != nil || v != "1" {
		t.Fatalf("after kill+start: %q, %v", v, err)
	}

	root := filepath.Dir(c.DataDir())
	pid = c.pid()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dir %s still exists: %v", root, err)
	}
	if alive(pid) {
		t.Fatalf("postmaster %d alive after Close", pid)
	}
	if err := c.Start(ctx); err == nil {
		t.Fatal("Start after Close succeeded")
	}
}

func TestFixedPortConflict(t *testing.T) {
	c1 := startCluster(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c2, err := Start(ctx, Options{Port: c1.Port()})
	if err == nil {
		c2.Close()
		t.Fatal("second cluster on same port started")
	}
	t.Logf("expected error: %v", err)
}

// A cluster whose owning process died is stopped and removed by the next
// Start in the same parent directory.
func TestStaleClusterIsReaped(t *testing.T) {
	parent, err := os.MkdirTemp("", "pgcluster-reap-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(parent)
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	stale := startCluster(t, Options{Dir: parent})
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stale.root, ownerFile), []byte(strconv.Itoa(dead.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	pid := stale.pid()
	fresh := startCluster(t, Options{Dir: parent})
	if _, err := os.Stat(stale.root); !os.IsNotExist(err) {
		t.Fatalf("stale cluster directory still there: %v", err)
	}
	if alive(pid) {
		t.Fatalf("stale postmaster %d still running", pid)
	}
	if _, err := os.Stat(fresh.root); err != nil {
		t.Fatalf("fresh cluster: %v", err)
	}
}
