package pglease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// closeKind is one kind of acquisition that a shutdown may cut: acquire
// makes it (blocking or one attempt) and returns its release; free checks,
// with another client, that nothing of it is held.
type closeKind struct {
	name    string
	acquire func(ctx context.Context, c *Client, name string, wait bool) (func(context.Context) error, error)
	free    func(ctx context.Context, c *Client, name string) error
}

func closeKinds() []closeKind {
	one := func(opts ...Option) func(context.Context, *Client, string, bool) (func(context.Context) error, error) {
		return func(ctx context.Context, c *Client, name string, wait bool) (func(context.Context) error, error) {
			acquire := c.TryAcquire
			if wait {
				acquire = c.Acquire
			}
			l, err := acquire(ctx, name, opts...)
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		}
	}
	set := func(ctx context.Context, c *Client, name string, wait bool) (func(context.Context) error, error) {
		acquire := c.TryAcquireAll
		if wait {
			acquire = c.AcquireAll
		}
		s, err := acquire(ctx, []string{name + "-a", name + "-b"})
		if err != nil {
			return nil, err
		}
		return s.Release, nil
	}
	// An exclusive lease of name: nothing else holds it, shared or not.
	exclusive := func(ctx context.Context, c *Client, name string) error {
		l, err := c.TryAcquire(ctx, name)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
	// Both slots of a semaphore at once.
	slots := func(ctx context.Context, c *Client, name string) error {
		var ls []*Lease
		defer func() {
			for _, l := range ls {
				_ = l.Release(ctx)
			}
		}()
		for range 2 {
			l, err := c.TryAcquire(ctx, name, WithSlots(2))
			if err != nil {
				return err
			}
			ls = append(ls, l)
		}
		return nil
	}
	return []closeKind{
		{"Plain", one(), exclusive},
		{"FastFailover", one(WithFastFailover()), exclusive},
		{"Slots", one(WithSlots(2)), slots},
		{"FastFailoverSlots", one(WithFastFailover(), WithSlots(2)), slots},
		{"Shared", one(WithShared()), exclusive},
		{"FastFailoverShared", one(WithShared(), WithFastFailover()), exclusive},
		{"Set", set, func(ctx context.Context, c *Client, name string) error {
			s, err := c.TryAcquireAll(ctx, []string{name + "-a", name + "-b"})
			if err != nil {
				return err
			}
			return s.Release(ctx)
		}},
	}
}

// A service that shuts down in the middle of an acquisition: the call's
// context ends while its statement is in flight, and Close follows at
// once. Close returns only when nothing the server granted to the client
// or its cut calls is held: right after it, no row of the client is live
// and another client acquires every name at once — for every kind of
// acquisition, blocking or not.
func TestCloseRightAfterACutAcquisitionLeavesNothingHeld(t *testing.T) {
	for _, kind := range closeKinds() {
		t.Run(kind.name, func(t *testing.T) { closeAfterCut(t, kind) })
	}
}

func closeAfterCut(t *testing.T, kind closeKind) {
	ctx := testCtx(t)
	checker := testClient(t, Config{})
	table := rows(t, checker).Name()
	const rounds = 30
	var cut, granted, left, taken int
	for i := range rounds {
		c, err := Open(ctx, pgtest.DSN(t), Config{Table: checker.cfg.Table, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		// Warm up (the table checked, connections open), and time a
		// whole acquisition, so that the cut falls within one.
		var took time.Duration
		for w := range 2 {
			began := time.Now()
			release, err := kind.acquire(ctx, c, fmt.Sprintf("warm-%d-%d", i, w), w == 0)
			if err != nil {
				t.Fatal(err)
			}
			took = time.Since(began)
			if err := release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		name := fmt.Sprintf("n-%d", i)
		actx, cancel := context.WithTimeout(ctx, rand.N(took+time.Millisecond))
		_, err = kind.acquire(actx, c, name, i%2 == 0)
		cancel()
		switch {
		case err == nil:
			granted++
		case errors.Is(err, context.DeadlineExceeded):
			cut++
		default:
			t.Fatalf("round %d: acquire: %v", i, err)
		}
		if err := c.Close(); err != nil {
			t.Fatalf("round %d: Close: %v", i, err)
		}
		if n := pgtest.Value[int](t, `SELECT count(*)::int FROM `+table+
			` WHERE "metadata" ->> 'client' = $1 AND "expires_at" > now()`, c.id); n > 0 {
			left++
			t.Errorf("round %d: %d row(s) of the closed client still held", i, n)
		}
		if err := kind.free(ctx, checker, name); err != nil {
			taken++
			t.Errorf("round %d: another client cannot acquire what the closed client asked for: %v", i, err)
		}
	}
	t.Logf("%d rounds: %d cut, %d granted before Close; rows left held after Close in %d, names not free in %d", rounds, cut, granted, left, taken)
	if cut == 0 {
		t.Fatal("no acquisition was cut: the test shows nothing")
	}
}

// An acquisition whose reply is lost after its statement committed (the
// connection failed; no retry answered) leaves a row of the client's
// that no lease holds. A running client releases it in the background,
// without another attempt on the name and without Close: whether the call
// got the error or had returned already, its context cut — for every kind.
func TestRunningClientReleasesTheRowOfAnAcquisitionWhoseReplyWasLost(t *testing.T) {
	for _, kind := range closeKinds() {
		for _, cut := range []bool{false, true} {
			name := kind.name
			if cut {
				name += "/Cut"
			}
			t.Run(name, func(t *testing.T) { sweptInBackground(t, kind, cut) })
		}
	}
}

func sweptInBackground(t *testing.T, kind closeKind, cut bool) {
	ctx := testCtx(t)
	checker := testClient(t, Config{})
	records := make(chan slog.Record, 64)
	c := testClient(t, Config{Table: checker.cfg.Table, TTL: 10 * time.Minute, Logger: slog.New(recordHandler{records})})
	release, err := kind.acquire(ctx, c, "warm", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := release(ctx); err != nil {
		t.Fatal(err)
	}

	lost := errors.New("the reply was lost (test)")
	reached, proceed := make(chan struct{}), make(chan struct{})
	var fired atomic.Bool
	hook := func(client string) error {
		if client != c.id || fired.Swap(true) {
			return nil
		}
		close(reached)
		<-proceed
		return lost
	}
	testHookLoseReply.Store(&hook)
	defer testHookLoseReply.Store(nil)
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan error, 1)
	go func() { _, err := kind.acquire(actx, c, "lost", false); got <- err }()
	pgtest.Receive(t, reached, "the statement to commit")
	if cut {
		cancel()
		if err := pgtest.Receive(t, got, "the cut call to return"); !errors.Is(err, context.Canceled) {
			t.Fatalf("acquire: %v", err)
		}
		close(proceed)
	} else {
		close(proceed)
		if err := pgtest.Receive(t, got, "the call to return"); !errors.Is(err, lost) {
			t.Fatalf("acquire: %v; want the lost reply's error", err)
		}
	}
	live := func() int {
		return pgtest.Value[int](t, `SELECT count(*)::int FROM `+rows(t, c).Name()+
			` WHERE "metadata" ->> 'client' = $1 AND "expires_at" > now()`, c.id)
	}
	pgtest.WaitFor(t, patience, "the client to release the row granted to the lost reply", func() bool { return live() == 0 })
	if !logged(records, "releasing a lease row whose acquisition reply was lost") {
		t.Fatal("the row went, but not by the client's release of a lost reply's row")
	}
	if err := kind.free(ctx, checker, "lost"); err != nil {
		t.Fatalf("another client cannot acquire the name: %v", err)
	}
	// The client itself acquires the name again.
	release, err = kind.acquire(ctx, c, "lost", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := release(ctx); err != nil {
		t.Fatal(err)
	}
}

// logged reports whether a record with a message containing msg came on
// records (see recordHandler).
func logged(records <-chan slog.Record, msg string) bool {
	for {
		select {
		case r := <-records:
			if strings.Contains(r.Message, msg) {
				return true
			}
		default:
			return false
		}
	}
}

// Close with the database unreachable: it cannot release what an
// acquisition in flight was granted. It returns within its bound, with an
// error that names the name and says that its row expires by its TTL; the
// row is still there, held until then.
func TestCloseWithTheDatabaseUnreachableSaysWhatItLeaves(t *testing.T) {
	ctx := testCtx(t)
	c, proxy := proxiedClient(t, Config{})
	// The dedicated session runs the client's statements once it has
	// connected; the warm-up prepares them there.
	if _, err := c.session(); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, patience, "the dedicated session", func() bool { return c.conn.sess.Load().servesNow() })
	warm, err := c.TryAcquire(ctx, "warm")
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The statement of a TryAcquire commits and its reply is lost; the
	// call's context ends; then the database becomes unreachable.
	proxy.DropReplies(true)
	sent := proxy.ClientSent()
	actx, cancel := context.WithCancel(ctx)
	got := make(chan error, 1)
	go func() { _, err := c.TryAcquire(actx, "cut"); got <- err }()
	<-sent
	pgtest.WaitFor(t, patience, "the statement to commit", func() bool { return len(rows(t, c).Held("cut")) == 1 })
	cancel()
	if err := pgtest.Receive(t, got, "the cut TryAcquire to return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("TryAcquire: %v", err)
	}
	proxy.Refuse(true)
	proxy.ResetAll()
	began := time.Now()
	err = c.Close()
	took := time.Since(began)
	t.Logf("Close took %s: %v", took, err)
	if err == nil || !strings.Contains(err.Error(), "TTL") || !strings.Contains(err.Error(), `"cut"`) {
		t.Fatalf("Close with the database unreachable: %v; want an error that names the name and says its row expires by its TTL", err)
	}
	if bound := 2 * releaseTimeout; took > bound {
		t.Fatalf("Close took %s, past its bound %s", took, bound)
	}
	if left := rows(t, c).Held("cut"); len(left) != 1 {
		t.Fatalf("rows held after Close: %v; want the one Close could not release", left)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
