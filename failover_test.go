package pglease

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
	"github.com/pglease/pglease/internal/store"
)

// A fast-failover holder process is SIGKILLed; the waiter takes over at
// once, long before the TTL would have expired.
func TestWaiterTakesOverAtOnceWhenAFastFailoverHolderIsKilled(t *testing.T) {
	ctx := testCtx(t)
	const ttl = time.Minute
	log := newEventLog()
	c := testClient(t, Config{PollInterval: time.Hour, Observer: log})
	if err := c.migrate(ctx); err != nil {
		t.Fatal(err)
	}
	holder, token := startHolder(t, c.cfg.Table, "ff", ttl, true)
	got := make(chan *Lease, 1)
	go func() {
		l, err := c.Acquire(ctx, "ff", WithFastFailover(), WithTTL(ttl))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	log.await(t, "the waiter to find the name held", is(EventContended, "ff"))
	killed := time.Now()
	if err := holder.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	l := pgtest.Receive(t, got, "the waiter to take over (the TTL is a minute)")
	if l == nil {
		t.FailNow()
	}
	if l.Token() <= token || !l.session {
		t.Fatalf("token %d (holder had %d), session-bound %v", l.Token(), token, l.session)
	}
	t.Logf("kill → acquired in %s", time.Since(killed))
	_ = l.Release(ctx)
}

// A fast-failover holder behind a partition loses its lease (at its local
// deadline) before the waiter gets it: the server cannot declare the
// session dead earlier.
func TestPartitionedFastFailoverHolderLosesFirst(t *testing.T) {
	partitionedHolderLosesFirst(t, WithFastFailover())
}

// When the server ends a fast-failover holder's session, the holder's
// lease ends at once rather than at its deadline, with ErrSessionLost.
func TestSessionLossEndsSessionBoundLeaseAtOnce(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{Owner: "session-victim"})
	l, err := c.TryAcquire(ctx, "s", WithFastFailover(), WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := c.TryAcquire(ctx, "p", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	pgtest.TerminateBackends(t, "pglease session-victim")
	// Its deadline is 48s away.
	pgtest.Receive(t, l.Context().Done(), "the session-bound lease to end with its session")
	if !errors.Is(causeOf(l.Context()), ErrLeaseLost) || !errors.Is(causeOf(l.Context()), ErrSessionLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost and ErrSessionLost", causeOf(l.Context()))
	}
	if err := causeOf(plain.Context()); err != nil {
		t.Fatalf("plain lease ended with the session: %v", err)
	}
	// The name is free for a fast-failover contender right away.
	other := testClient(t, Config{Table: c.cfg.Table})
	l2, err := other.Acquire(ctx, "s", WithFastFailover())
	if err != nil {
		t.Fatal(err)
	}
	_ = l2.Release(ctx)
	_ = plain.Release(ctx)
}

// A fast-failover session tells the server not to declare it dead before
// the lease's TTL has passed, and not to end it for idling.
func TestFastFailoverSessionBoundsDeadPeerDetection(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	l, err := c.TryAcquire(ctx, "ka", WithFastFailover(), WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	var idle, user, idleSession string
	err = c.conn.sess.Load().do(ctx, time.Second, func(ctx context.Context, q store.Querier, _ *sessState) error {
		return q.Query(ctx, `SELECT current_setting('tcp_keepalives_idle'), current_setting('tcp_user_timeout'), current_setting('idle_session_timeout')`, nil,
			func(r store.Row) error { return r.Scan(&idle, &user, &idleSession) })
	})
	if err != nil {
		t.Fatal(err)
	}
	if idle != "10" || user != "20000" || idleSession != "0" {
		t.Fatalf("keepalive idle %q, user timeout %q, idle_session_timeout %q", idle, user, idleSession)
	}
}

// A session-bound acquisition whose session ends between the commit and the
// lease's registration is given up, never handed out as held while a
// waiter can take the name over.
func TestSessionEndingBeforeRegistrationEndsTheLease(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{Owner: "register-race"})
	other := testClient(t, Config{Table: c.cfg.Table})
	fired := false
	hook := func(name string, epoch uint64) {
		if fired || name != "r" {
			return
		}
		fired = true
		pgtest.TerminateBackends(t, "pglease register-race")
		if !pgtest.Eventually(patience, func() bool { return c.conn.sess.Load().currentEpoch() != epoch }) {
			t.Error("the client did not notice its session ending")
		}
	}
	testHookAcquired.Store(&hook)
	defer testHookAcquired.Store(nil)
	l, err := c.TryAcquire(ctx, "r", WithFastFailover(), WithTTL(time.Minute))
	testHookAcquired.Store(nil)
	if !fired {
		t.Fatal("the hook did not run")
	}
	if err != nil {
		// Giving up is also right, as long as nothing looks held.
		t.Logf("TryAcquire: %v", err)
		return
	}
	defer l.Release(ctx)
	if causeOf(l.Context()) == nil {
		if _, err := other.TryAcquire(ctx, "r", WithFastFailover()); !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("lease %d looks held, yet another client's TryAcquire returned %v", l.Token(), err)
		}
	}
}

// A statement on the dedicated connection that waits for a lock (here a
// fast-failover acquisition of a row another session has locked) ends in
// an error of its own; the session, and with it every session-bound lease
// on it, survives, and renewals are not held up.
func TestBlockedFastFailoverAcquireKeepsSessionAndRenewals(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{StatementTimeout: 1500 * time.Millisecond})
	a, err := c.TryAcquire(ctx, "a", WithFastFailover(), WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	holder := testClient(t, Config{Table: c.cfg.Table})
	// Fast failover: an attempt locks such a row (to see whether its
	// session ended), where it only reads a plain live row.
	b, err := holder.TryAcquire(ctx, "b", WithTTL(time.Minute), WithFastFailover())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx)
	rows(t, c).LockRow("b")
	epoch := c.conn.sess.Load().currentEpoch()
	d0 := a.Deadline()
	// Keep asking for the locked row, for longer than a's deadline.
	for end := d0.Add(500 * time.Millisecond); time.Now().Before(end); {
		_, err := c.TryAcquire(ctx, "b", WithFastFailover(), WithTTL(2*time.Second))
		if !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("TryAcquire of a locked, held row: %v, want ErrNotAcquired", err)
		}
	}
	if err := causeOf(a.Context()); err != nil {
		t.Fatalf("session-bound lease lost while an acquisition waited for a row lock: %v", err)
	}
	if !a.Deadline().After(d0) {
		t.Fatal("no renewal while acquisitions waited for a row lock")
	}
	if e := c.conn.sess.Load().currentEpoch(); e != epoch {
		t.Fatalf("the session was re-opened (epoch %d → %d)", epoch, e)
	}
	if _, err := holder.TryAcquire(ctx, "a", WithFastFailover()); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("another client's TryAcquire of the held name: %v", err)
	}
}

// A semaphore waits like a single name: a fast-failover slot holder that
// dies hands its slot to a waiter at once, not at its expiry, whichever
// slot it held (the waiter watches every session-bound slot holder).
func TestSlotWaiterGetsFastFailover(t *testing.T) {
	ctx := testCtx(t)
	table := pgtest.Schema(t) + ".leases"
	var holders []*os.Process
	for range 2 {
		cmd, _ := startSlotHolder(t, table, "sem", 2, time.Minute)
		holders = append(holders, cmd.Process)
	}
	// Each holder in turn dies while a new waiter waits; the slot that
	// the first waiter took is held, session-bound, during the second
	// round.
	for i, holder := range holders {
		log := newEventLog()
		w := testClient(t, Config{Table: table, PollInterval: time.Minute, Observer: log})
		got := make(chan error, 1)
		var l *Lease
		go func() {
			var err error
			l, err = w.Acquire(ctx, "sem", WithSlots(2), WithFastFailover(), WithTTL(time.Minute))
			got <- err
		}()
		for range 2 { // a round of attempts: each slot once, in random order
			log.await(t, "the waiter to find a slot held", func(e Event) bool {
				return e.Kind == EventContended && strings.HasPrefix(e.Name, "sem#")
			})
		}
		select {
		case err := <-got:
			t.Fatalf("round %d: Acquire returned while both slots were held: %v", i, err)
		default:
		}
		killed := time.Now()
		if err := holder.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if err := pgtest.Receive(t, got, fmt.Sprintf("round %d: a slot to be taken over after its fast-failover holder died (TTL 1m)", i)); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: %s taken over %v after SIGKILL of its holder", i, l.Name(), time.Since(killed).Round(time.Millisecond))
		defer l.Release(ctx)
	}
}

// A plain waiter takes a session-bound lease over once the holder's
// session ends, as a fast-failover one does: the holder's process is
// killed with a minute of its lease left, and the waiter, which never
// polls, has it well within the test's 30 s (it used to wait for the
// expiry), in a few attempts.
func TestPlainWaiterTakesOverFromADeadSessionHolder(t *testing.T) {
	ctx := testCtx(t)
	table := pgtest.Schema(t) + ".leases"
	var attempts atomic.Int64
	w := testClient(t, Config{Table: table, PollInterval: time.Hour, Observer: observerFunc(func(e Event) {
		if e.Kind == EventContended {
			attempts.Add(1)
		}
	})})
	cmd, token := startHolder(t, table, "p", time.Minute, true)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	l, err := w.Acquire(ctx, "p", WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if l.Token() <= token || l.session {
		t.Fatalf("token %d after the holder's %d, session-bound %v", l.Token(), token, l.session)
	}
	if n := attempts.Load(); n > 5 {
		t.Fatalf("a plain waiter made %d attempts before it took a dead fast-failover holder's lease over", n)
	}
}

// Fast-failover acquisitions of a free name that race: the winner's lease
// is session-bound, so that a later failover does not wait for the TTL.
// Found by the CLI tests when a lease was bound by a lock of its name,
// which a loser could hold for an instant; it is now bound by its own
// session's lock.
func TestFastFailoverWinnerOfARaceIsSessionBound(t *testing.T) {
	ctx := testCtx(t)
	first := testClient(t, Config{Owner: "c0"})
	if err := first.migrate(ctx); err != nil {
		t.Fatal(err)
	}
	clients := []*Client{first}
	for i := 1; i < 4; i++ {
		clients = append(clients, testClient(t, Config{Table: first.cfg.Table, Owner: fmt.Sprint("c", i)}))
	}
	for round := range 30 {
		name := fmt.Sprint("race-", round)
		leases := make([]*Lease, len(clients))
		errs := make([]error, len(clients))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				leases[i], errs[i] = c.TryAcquire(ctx, name, WithFastFailover(), WithTTL(5*time.Second))
			}()
		}
		close(start)
		wg.Wait()
		won := 0
		for i, err := range errs {
			switch {
			case err == nil:
				won++
				if !leases[i].session {
					t.Errorf("round %d: the winner's lease (%s, token %d) is not session-bound", round, clients[i].Owner(), leases[i].Token())
				}
				if err := leases[i].Release(ctx); err != nil {
					t.Errorf("round %d: Release: %v", round, err)
				}
			case errors.Is(err, ErrNotAcquired):
			default:
				t.Errorf("round %d: %s: TryAcquire: %v", round, clients[i].Owner(), err)
			}
		}
		if won != 1 {
			t.Errorf("round %d: %d clients acquired a free name at once, want 1", round, won)
		}
	}
}

// A set takes a name over from a fast-failover holder whose session
// ended, as an acquisition of the name alone does: at once when the
// holder is already dead, and as soon as it dies when the set waits (it
// watches the holder's session), long before the TTL (a minute).
func TestASetTakesOverFromADeadFastFailoverHolder(t *testing.T) {
	ctx := testCtx(t)
	table := pgtest.Schema(t) + ".leases"
	log := newEventLog()
	w := testClient(t, Config{Table: table, PollInterval: time.Hour, Observer: log})
	if err := w.migrate(ctx); err != nil {
		t.Fatal(err)
	}

	dead, token := startHolder(t, table, "set-dead", time.Minute, true)
	_ = dead.Process.Signal(syscall.SIGKILL)
	_ = dead.Wait()
	// The server ends the backend once it reads the closed connection
	// (a clean-clone CI run tried before it had).
	pgtest.WaitFor(t, patience, "the dead holder's backend to end", func() bool {
		return pgtest.Value[bool](t, `SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity AS a JOIN `+w.st.Names.QualifiedTable()+
			` AS l ON a.pid = l.session_pid WHERE l.name = 'set-dead')`)
	})
	s, err := w.TryAcquireAll(ctx, []string{"set-dead", "set-free"})
	if err != nil {
		t.Fatalf("a set with a name of a dead fast-failover holder: %v", err)
	}
	if l := setLease(s, "set-dead"); l.Token() <= token {
		t.Fatalf("token %d after the dead holder's %d", l.Token(), token)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// The listener's start wakes every wait once: let it pass first.
	pgtest.WaitFor(t, patience, "the waiting client's dedicated session", func() bool {
		s, err := w.session()
		return err == nil && s.isLive()
	})
	dying, token := startHolder(t, table, "set-dying", time.Minute, true)
	got := make(chan *LeaseSet, 1)
	go func() {
		s, err := w.AcquireAll(ctx, []string{"set-dying", "set-free"})
		if err != nil {
			t.Error(err)
		}
		got <- s
	}()
	log.await(t, "the set to find the name held", is(EventContended, "set-dying"))
	if err := dying.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s = pgtest.Receive(t, got, "the set to take the name over (the TTL is a minute)")
	if s == nil {
		t.FailNow()
	}
	if l := setLease(s, "set-dying"); l.Token() <= token {
		t.Fatalf("token %d after the dead holder's %d", l.Token(), token)
	}
	_ = s.Release(ctx)
}

// Routine statistics resets leave the server incarnation alone: a
// fast-failover holder that dies just after an operator reset every kind
// of statistics that can be reset is taken over at once, not at its
// expiry (a minute; the waiter never polls). Schema versions before 9
// named the incarnation by the time the shared statistics were last
// reset, and the waiter took the lease at its expiry (28.5 s with a 30 s
// TTL).
func TestStatisticsResetKeepsFastFailover(t *testing.T) {
	ctx := testCtx(t)
	table := pgtest.Schema(t) + ".leases"
	log := newEventLog()
	w := testClient(t, Config{Table: table, PollInterval: time.Hour, Observer: log})
	cmd, token := startHolder(t, table, "job", time.Minute, true)
	got := make(chan error, 1)
	var l *Lease
	go func() {
		var err error
		l, err = w.Acquire(ctx, "job", WithFastFailover(), WithTTL(time.Minute))
		got <- err
	}()
	log.await(t, "the waiter to find job held", is(EventContended, "job"))
	for _, reset := range []string{"pg_stat_reset_shared('bgwriter')", "pg_stat_reset_shared('archiver')",
		"pg_stat_reset_shared('wal')", "pg_stat_reset_shared('recovery_prefetch')", "pg_stat_reset_slru(NULL)", "pg_stat_reset()"} {
		pgtest.Exec(t, "SELECT "+reset)
	}
	killed := time.Now()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := pgtest.Receive(t, got, "the lease to be taken over after its fast-failover holder died (TTL 1m)"); err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if l.Token() <= token {
		t.Fatalf("token %d after the dead holder's %d", l.Token(), token)
	}
	t.Logf("taken over %v after SIGKILL of its holder", time.Since(killed).Round(time.Millisecond))
}
