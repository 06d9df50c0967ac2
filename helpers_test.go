package pglease

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pglease/pglease/internal/pgtest"
)

func TestMain(m *testing.M) {
	pgtest.ExportDatabaseURL = true
	if os.Getenv("PGLEASE_TEST_HOLDER") != "" {
		os.Exit(runHolder())
	}
	pgtest.Main(m)
}

// runHolder is the body of a holder process: the test binary re-executed by
// startHolder. It acquires PGLEASE_TEST_HOLDER in PGLEASE_TEST_TABLE with
// fast failover, prints "acquired TOKEN" and waits to be killed.
func runHolder() int {
	ctx := context.Background()
	c, err := Open(ctx, os.Getenv("PGLEASE_TEST_DSN_HOLDER"), Config{Table: os.Getenv("PGLEASE_TEST_TABLE")})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	var opts []Option
	if os.Getenv("PGLEASE_TEST_FAST") == "1" {
		opts = append(opts, WithFastFailover())
	}
	if n, _ := strconv.Atoi(os.Getenv("PGLEASE_TEST_SLOTS")); n > 1 {
		opts = append(opts, WithSlots(n))
	}
	ttl, _ := time.ParseDuration(os.Getenv("PGLEASE_TEST_TTL"))
	l, err := c.Acquire(ctx, os.Getenv("PGLEASE_TEST_HOLDER"), append(opts, WithTTL(ttl))...)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("acquired", l.Token())
	<-l.Done()
	fmt.Println("lost", l.Err())
	return 3
}

// startHolder runs a holder process and waits until it holds the lease.
func startHolder(t *testing.T, table, name string, ttl time.Duration, fast bool) (*exec.Cmd, int64) {
	t.Helper()
	f := "0"
	if fast {
		f = "1"
	}
	return startHolderEnv(t, table, name, ttl, "PGLEASE_TEST_FAST="+f)
}

// startSlotHolder runs a holder process of one of slots fast-failover
// slots of name and waits until it holds one.
func startSlotHolder(t *testing.T, table, name string, slots int, ttl time.Duration) (*exec.Cmd, int64) {
	t.Helper()
	return startHolderEnv(t, table, name, ttl, "PGLEASE_TEST_FAST=1", "PGLEASE_TEST_SLOTS="+strconv.Itoa(slots))
}

func startHolderEnv(t *testing.T, table, name string, ttl time.Duration, env ...string) (*exec.Cmd, int64) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PGLEASE_TEST_HOLDER="+name, "PGLEASE_TEST_TABLE="+table,
		"PGLEASE_TEST_DSN_HOLDER="+pgtest.DSN(t), "PGLEASE_TEST_TTL="+ttl.String())
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		t.Fatalf("holder process printed nothing: %v", sc.Err())
	}
	var token int64
	if _, err := fmt.Sscanf(sc.Text(), "acquired %d", &token); err != nil {
		t.Fatalf("holder process: %q", sc.Text())
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return cmd, token
}

// newClient returns a client on a fresh schema, closed at cleanup.
func testClient(t testing.TB, cfg Config) *Client {
	t.Helper()
	if cfg.Table == "" {
		cfg.Table = pgtest.Schema(t) + ".leases"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Open(ctx, pgtest.DSN(t), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// proxiedClient returns a client on a fresh table that reaches the server
// through a fault proxy, and the proxy.
func proxiedClient(t testing.TB, cfg Config) (*Client, *pgtest.Proxy) {
	t.Helper()
	if cfg.Table == "" {
		cfg.Table = pgtest.Schema(t) + ".leases"
	}
	proxy := pgtest.NewProxy(t, pgtest.HostPort(t, pgtest.DSN(t)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Open(ctx, proxy.DSN(pgtest.DSN(t)), cfg)
	if err != nil {
		t.Fatalf("Open through the proxy: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, proxy
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitUntil polls cond every 10ms until it holds or bound passes.
func waitUntil(bound time.Duration, cond func() bool) bool {
	for end := time.Now().Add(bound); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// adminConn is a superuser connection to the test server, closed at cleanup.
func adminConn(t *testing.T) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(testCtx(t), pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// waitContended waits until c has seen name held at least once.
func waitContended(t *testing.T, c *Client, name string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c.hub.mu.Lock()
		n := len(c.hub.subs[name])
		c.hub.mu.Unlock()
		if n > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("waiter never subscribed")
}

func execSQL(t testing.TB, sql string) {
	t.Helper()
	query(t, sql, nil)
}

func query(t testing.TB, sql string, args []any, dest ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if len(dest) == 0 {
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return
	}
	if err := conn.QueryRow(ctx, sql, args...).Scan(dest...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}
