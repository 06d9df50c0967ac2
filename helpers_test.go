package pglease

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

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
	if os.Getenv("PGLEASE_TEST_SHARED") == "1" {
		opts = append(opts, WithShared())
	}
	if q := os.Getenv("PGLEASE_TEST_QUOTA"); q != "" { // "N,W"
		var n, w int
		if _, err := fmt.Sscanf(q, "%d,%d", &n, &w); err != nil {
			fmt.Println("error", err)
			return 1
		}
		opts = append(opts, WithQuota(n, w))
	}
	ttl, _ := time.ParseDuration(os.Getenv("PGLEASE_TEST_TTL"))
	l, err := c.Acquire(ctx, os.Getenv("PGLEASE_TEST_HOLDER"), append(opts, WithTTL(ttl))...)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	if os.Getenv("PGLEASE_TEST_FIRST_WAITER") == "1" {
		// A second client of this process queues for the name first, and
		// dies with the holder.
		if err := queueBehind(ctx, c.cfg.Table, l.Name(), opts, ttl); err != nil {
			fmt.Println("error", err)
			return 1
		}
	}
	fmt.Println("acquired", l.Token())
	<-l.Context().Done()
	fmt.Println("lost", causeOf(l.Context()))
	return 3
}

// queueBehind opens a client that waits for name, in the holder's process,
// and returns once it is queued.
func queueBehind(ctx context.Context, table, name string, opts []Option, ttl time.Duration) error {
	w, err := Open(ctx, os.Getenv("PGLEASE_TEST_DSN_HOLDER"), Config{Table: table, Owner: "first waiter", PollInterval: time.Hour})
	if err != nil {
		return err
	}
	go func() {
		_, err := w.Acquire(ctx, name, append(opts, WithTTL(ttl))...)
		fmt.Println("the first waiter acquired:", err)
	}()
	poll, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		ws, err := w.waiters(poll, name)
		if err != nil {
			return err
		}
		for _, x := range ws {
			if x.Owner == "first waiter" {
				return nil
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
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

// testClient returns a client on a fresh schema (unless cfg names a table),
// closed at cleanup.
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

// dsnWithParams returns the test server's DSN with params added as
// run-time parameters (search_path, options, …).
func dsnWithParams(t testing.TB, params map[string]string) string {
	t.Helper()
	u, err := url.Parse(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	for k, v := range params {
		q.Set(k, v)
	}
	// %20, not +: the server reads options literally.
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return u.String()
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

// testCtx bounds a test's calls: longer than patience, so that a wait that
// times out reports what it waited for rather than a cancelled call.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// patience bounds every wait of these tests for a signal (see
// pgtest.Patience): a working test never comes near it.
const patience = pgtest.Patience

// rows returns c's lease table as the server has it, read and written
// directly.
func rows(t testing.TB, c *Client) *pgtest.Leases {
	return pgtest.LeaseTable(t, pgtest.DSN(t), c.cfg.Table)
}

// waitSubscribed waits until n waits of c for name (Acquire, an Elector's
// Observe) have subscribed to its release notifications. A waiter
// subscribes before its first attempt.
func waitSubscribed(t testing.TB, c *Client, name string, n int) {
	t.Helper()
	pgtest.WaitFor(t, patience, fmt.Sprintf("%d waiter(s) of %q to subscribe", n, name), func() bool {
		c.wake.hub.mu.Lock()
		defer c.wake.hub.mu.Unlock()
		return len(c.wake.hub.subs[name]) >= n
	})
}

// eventLog is an Observer that records a client's events and lets a test
// wait for one: the signal that an attempt found a name held, that a
// renewal succeeded, that a lease was lost.
type eventLog struct {
	mu      sync.Mutex
	events  []Event
	next    int           // the first event not yet returned by await
	changed chan struct{} // closed and replaced at every event
}

func newEventLog() *eventLog { return &eventLog{changed: make(chan struct{})} }

// Observe records e; it never blocks, so it never holds up Close.
func (r *eventLog) Observe(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	close(r.changed)
	r.changed = make(chan struct{})
}

// await returns the next event, after those already returned, that
// matches; earlier events that do not match are skipped. It fails the test
// if none comes within patience.
func (r *eventLog) await(t testing.TB, what string, match func(Event) bool) Event {
	t.Helper()
	timer := time.NewTimer(patience)
	defer timer.Stop()
	for {
		r.mu.Lock()
		for r.next < len(r.events) {
			e := r.events[r.next]
			r.next++
			if match(e) {
				r.mu.Unlock()
				return e
			}
		}
		changed := r.changed
		r.mu.Unlock()
		select {
		case <-changed:
		case <-timer.C:
			t.Fatalf("timed out after %s waiting for %s", patience, what)
		}
	}
}

// kinds returns the kinds of every event recorded, in order.
func (r *eventLog) kinds() []EventKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]EventKind, len(r.events))
	for i, e := range r.events {
		out[i] = e.Kind
	}
	return out
}

// skip makes await ignore the events recorded so far.
func (r *eventLog) skip() {
	r.mu.Lock()
	r.next = len(r.events)
	r.mu.Unlock()
}

// is matches the events of kind for name.
func is(kind EventKind, name string) func(Event) bool {
	return func(e Event) bool { return e.Kind == kind && e.Name == name }
}

// awaitKeptPast waits on l's renewal events (log is its client's observer)
// until a renewal has come in after at, typically a deadline l had, and
// fails unless l is still held then: renewals, not luck, kept it past at.
func awaitKeptPast(t testing.TB, log *eventLog, l *Lease, at time.Time) {
	t.Helper()
	for !time.Now().After(at) {
		log.await(t, fmt.Sprintf("a renewal of %q", l.Name()), is(EventRenewed, l.Name()))
	}
	if err := causeOf(l.Context()); err != nil {
		t.Fatalf("%q ended: %v", l.Name(), err)
	}
}

// observerFunc adapts a function to Observer.
type observerFunc func(Event)

func (f observerFunc) Observe(e Event) { f(e) }
