package patroni

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestPartitionAndRejoin: a primary cut off from clients, replicas and
// etcd by its proxies is replaced by a replica, and rejoins the cluster
// as a replica once the partition heals. The kill path is run by the
// chaos suite (internal/chaos TestPatroni). It runs with make ha
// (PGLEASE_HA set), not in CI, to keep CI short.
func TestPartitionAndRejoin(t *testing.T) {
	if os.Getenv("PGLEASE_HA") == "" {
		t.Skip("set PGLEASE_HA=1 (make ha) to run the partition test of the Patroni cluster")
	}
	if err := Available(); err != nil {
		t.Fatal(err)
	}
	c := Start(t, Options{Sync: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	old, err := c.WaitPrimary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	old.Partition(true)
	next, err := c.WaitPrimary(ctx, old)
	if err != nil {
		t.Fatalf("%v\n%s", err, c.Logs())
	}
	t.Logf("%s replaced the partitioned %s after %v", next.Name, old.Name, time.Since(start).Round(time.Millisecond))
	old.Partition(false)
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatalf("%v\n%s", err, c.Logs())
	}
}

// A cluster directory left by a dead test binary is reaped: its processes
// (found by the directory in their command line) are killed and the
// directory removed. A live owner's directory is left alone.
func TestReapStale(t *testing.T) {
	parent := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(parent, "pglease-patroni-stale")
	live := filepath.Join(parent, "pglease-patroni-live")
	for dir, owner := range map[string]int{stale: dead.Process.Pid, live: os.Getpid()} {
		if err := os.MkdirAll(filepath.Join(dir, "n1"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(owner)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A leftover daemon: its command line names a path in the directory.
	leftover := exec.Command("sh", "-c", "sleep 600", filepath.Join(stale, "n1", "patroni.yml"))
	if err := leftover.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- leftover.Wait() }()
	t.Cleanup(func() { _ = leftover.Process.Kill() })

	reapStale(parent, t.Logf)
	select {
	case <-exited:
	case <-time.After(time.Minute):
		t.Fatal("the leftover process of the stale cluster still runs")
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale cluster directory not removed: %v", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a live owner's directory was touched: %v", err)
	}
}
