package store

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/pgtest"
)

// queueFixture is a lease table with live waiting clients: each holds its
// client lock on a connection of its own and listens on its client channel,
// as a client's dedicated session does. One more connection listens on the
// table's channel.
type queueFixture struct {
	t     *testing.T
	ctx   context.Context
	s     *Store
	db    DB
	table *pgx.Conn // listens on the table's channel
	conns map[string]*pgx.Conn
}

func newQueueFixture(t *testing.T, waiters ...string) *queueFixture {
	f := &queueFixture{t: t, ctx: testCtx(t), conns: map[string]*pgx.Conn{}}
	f.s, f.db = migrated(t)
	ns, err := f.s.LockNamespace()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range waiters {
		conn := batchConn(t, f.s)
		if _, err := conn.Exec(f.ctx, `SELECT pg_advisory_lock(hashtextextended($1::text || $2::text, 1))`, ns, w); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(f.ctx, ListenSQL(ClientChannel(w))); err != nil {
			t.Fatal(err)
		}
		f.conns[w] = conn
	}
	f.table = batchConn(t, f.s)
	if _, err := f.table.Exec(f.ctx, f.s.Q.Listen); err != nil {
		t.Fatal(err)
	}
	return f
}

// register queues waiter for name, as if it had queued ago.
func (f *queueFixture) register(name, waiter string, ago time.Duration) {
	f.t.Helper()
	pgtest.Exec(f.t, `INSERT INTO `+f.s.Names.QualifiedWaiters()+` VALUES ($1, $2, now() - $3::bigint * interval '1 millisecond', now() + interval '1 hour')`,
		name, waiter, ago.Milliseconds())
}

// attempt is one acquisition of name by client; queued attempts belong to
// a wait in the queue.
func (f *queueFixture) attempt(name, client string, queued bool) AcquireResult {
	f.t.Helper()
	r, err := f.s.Acquire(f.ctx, f.db, AcquireArgs{Name: name, Owner: "o-" + client, TTL: time.Minute, Client: client,
		Queued: queued, QueueTTL: time.Hour, FairAfter: FairAfter})
	if err != nil {
		f.t.Fatalf("acquire %s by %s: %v", name, client, err)
	}
	return r
}

func (f *queueFixture) release(name string, token int64) {
	f.t.Helper()
	if _, err := f.s.Release(f.ctx, f.db, name, token); err != nil {
		f.t.Fatal(err)
	}
}

// heldFor backdates the lease on name as acquired ago.
func (f *queueFixture) heldFor(name string, ago time.Duration) {
	f.t.Helper()
	pgtest.Exec(f.t, `UPDATE `+f.s.Names.QualifiedTable()+` SET acquired_at = now() - $2::bigint * interval '1 millisecond' WHERE name = $1`, name, ago.Milliseconds())
}

// turnBegan backdates the start of waiter's turn (its first wake); a
// negative ago sets it in the future, a turn that stays young.
func (f *queueFixture) turnBegan(waiter string, ago time.Duration) {
	f.t.Helper()
	pgtest.Exec(f.t, `UPDATE `+f.s.Names.QualifiedWaiters()+` SET notified_at = now() - $2::bigint * interval '1 millisecond' WHERE client = $1`, waiter, ago.Milliseconds())
}

// next is the payload of the next notification on conn. Notifications
// arrive in commit order, so one that should not have been sent shows up
// before the one expected (each test ends its checks with one that must
// arrive).
func (f *queueFixture) next(conn *pgx.Conn) string {
	f.t.Helper()
	wctx, cancel := context.WithTimeout(f.ctx, pgtest.Patience)
	defer cancel()
	n, err := conn.WaitForNotification(wctx)
	if err != nil {
		f.t.Fatalf("no notification: %v", err)
	}
	return n.Payload
}

// A client that releases and takes the name again at once keeps it (a
// burst) while the first waiter's turn is younger than FairAfter. Its turn
// begins when the lease released first is acquired; the waiter is woken
// once then, and again only when the lease is promised to it, when the
// releasing client's next attempt is refused and wakes it too. The
// table's channel hears the first wake-up, not the releases of the burst.
func TestBurstUntilTheFirstWaitersTurnIsFairAfterOld(t *testing.T) {
	const w = "00000000000000aa"
	f := newQueueFixture(t, w)
	r := f.attempt("n", "holder", false)
	if !r.Acquired {
		t.Fatalf("the free lease was not acquired: %+v", r)
	}
	f.register("n", w, time.Hour)
	acquiredAt := pgtest.Value[int64](t, `SELECT (extract(epoch FROM acquired_at) * 1e6)::bigint FROM `+f.s.Names.QualifiedTable()+` WHERE name = 'n'`)
	f.release("n", r.Token)
	if got := f.next(f.conns[w]); got != "n" {
		t.Fatalf("the first release woke the waiter for %q, want n", got)
	}
	if got := f.next(f.table); got != "n" {
		t.Fatalf("the table's channel heard %q, want n (a waiter was woken)", got)
	}
	if began := pgtest.Value[int64](t, `SELECT (extract(epoch FROM notified_at) * 1e6)::bigint FROM `+f.s.Names.QualifiedWaiters()); began != acquiredAt {
		t.Fatalf("the waiter's turn began at %d µs, want %d µs: when the lease released was acquired (it queued earlier)", began, acquiredAt)
	}
	for range 3 {
		// Young however slow this machine is: a turn that began now would
		// be promised FairAfter (100 ms) later, and a stall that long
		// between two statements happens under load; this one begins in an
		// hour.
		f.turnBegan(w, -time.Hour)
		r = f.attempt("n", "holder", false)
		if !r.Acquired {
			t.Fatalf("the holder's next attempt within the burst was refused: %+v", r)
		}
		f.release("n", r.Token)
	}
	// The releases of the burst woke nobody and notified nothing: the
	// next notifications are those of a release of m.
	r = f.attempt("m", "holder", false)
	f.register("m", w, time.Second)
	f.release("m", r.Token)
	if got := f.next(f.conns[w]); got != "m" {
		t.Fatalf("got %q: a release within the burst woke the waiter again", got)
	}
	if got := f.next(f.table); got != "m" {
		t.Fatalf("got %q: a release within the burst notified the table's channel", got)
	}
	// FairAfter into the waiter's turn the lease is promised to it.
	f.turnBegan(w, FairAfter+time.Second)
	if r = f.attempt("n", "holder", false); r.Acquired || r.Ahead != 1 {
		t.Fatalf("an attempt on a lease promised to the waiter: %+v, want refused with 1 ahead", r)
	}
	if got := f.next(f.conns[w]); got != "n" {
		t.Fatalf("got %q, want the refusal's wake-up for n", got)
	}
	r = f.attempt("n", w, true)
	if !r.Acquired {
		t.Fatalf("the waiter could not take the lease promised to it: %+v", r)
	}
	if n := pgtest.Value[int](t, `SELECT count(*) FROM `+f.s.Names.QualifiedWaiters()+` WHERE name = 'n'`); n != 0 {
		t.Fatalf("%d registrations for n left after the waiter acquired", n)
	}
}

// A waiter queued through a whole hold longer than FairAfter has had its
// turn: the lease is promised to it at the release, and the holder's next
// attempt is refused.
func TestWaiterQueuedThroughALongHoldIsPromisedAtRelease(t *testing.T) {
	const w = "00000000000000bb"
	f := newQueueFixture(t, w)
	r := f.attempt("n", "holder", false)
	f.register("n", w, time.Hour)
	f.heldFor("n", time.Hour)
	f.release("n", r.Token)
	if got := f.next(f.conns[w]); got != "n" {
		t.Fatalf("the release woke the waiter for %q, want n", got)
	}
	if r = f.attempt("n", "holder", false); r.Acquired || r.Ahead != 1 {
		t.Fatalf("the holder's next attempt: %+v, want refused (promised to the waiter)", r)
	}
}

// Waiters in the queue take their turns in order: one behind the first
// never takes a free lease ahead of it, even before the lease is promised
// to the first; a new attempt may.
func TestQueuedWaitersDoNotOvertakeTheFirst(t *testing.T) {
	const first, second = "00000000000000c1", "00000000000000c2"
	f := newQueueFixture(t, first, second)
	f.register("n", first, 2*time.Second)
	f.register("n", second, time.Second)
	f.turnBegan(first, -time.Hour) // young however slow this machine is (see above)
	if r := f.attempt("n", second, true); r.Acquired || r.Ahead != 1 {
		t.Fatalf("the second waiter's attempt on the free lease: %+v, want refused behind the first", r)
	}
	if r := f.attempt("n", "newcomer", false); !r.Acquired {
		t.Fatalf("a new attempt before the lease is promised: %+v, want acquired", r)
	}
}

// A release wakes again a first waiter it woke before once the lease is
// promised to it (its turn is FairAfter old), so that it takes the free
// lease at once.
func TestReleaseWakesThePromisedWaiterAgain(t *testing.T) {
	const w = "00000000000000dd"
	f := newQueueFixture(t, w)
	r := f.attempt("n", "holder", false)
	f.register("n", w, time.Hour)
	f.turnBegan(w, FairAfter+time.Second)
	f.release("n", r.Token)
	if got := f.next(f.conns[w]); got != "n" {
		t.Fatalf("the release woke the waiter for %q, want n", got)
	}
}

// A release on the session that holds the client's doorbell rings it in
// the same statement when it wakes the first waiter (schema version 12),
// and not when it wakes nobody; the attempt of the waiter that the ring
// woke waits for the release's commit (the release rings only once it
// holds the name's lock), so it never reads the row as still held: it
// acquires once the release commits. (Ringing without that lock, the
// attempt read the row as held, and was refused.) While an acquisition
// holds the name's lock, the release rings nothing.
func TestAReleaseOnTheSessionRingsTheBell(t *testing.T) {
	f := newQueueFixture(t, "w1")
	ctx := f.ctx
	holder := batchConn(t, f.s)
	if err := f.s.ClientLock(ctx, Pgx(holder), "h"); err != nil { // bell 0
		t.Fatal(err)
	}
	probe := func() int {
		t.Helper()
		k, ok, err := f.s.ProbeBell(ctx, f.db, "h")
		if err != nil || !ok {
			t.Fatalf("probe the bell: %d, %v, %v", k, ok, err)
		}
		return k
	}
	acquire := func(name string) int64 {
		t.Helper()
		r, err := f.s.Acquire(ctx, Pgx(holder), AcquireArgs{Name: name, Owner: "o-h", TTL: time.Minute, Client: "h", FairAfter: FairAfter})
		if err != nil || !r.Acquired {
			t.Fatalf("acquire %s: %+v, %v", name, r, err)
		}
		return r.Token
	}

	// Nobody waits: no ring.
	token := acquire("alone")
	if r, err := f.s.ReleaseAndRing(ctx, Pgx(holder), "alone", token, "h", 0); err != nil || !r.Released || r.Rang || r.Bell != 0 {
		t.Fatalf("a release that woke nobody: %+v, %v; want released, no ring, bell 0", r, err)
	}
	if k := probe(); k != 0 {
		t.Fatalf("bell %d held after a release that woke nobody, want 0", k)
	}

	// A live waiter: the release wakes it and rings, before its commit.
	// (A dead one queued ahead of it makes its attempt read the name, as
	// any attempt but the first path does, rather than only insert.)
	token = acquire("n")
	f.register("n", "dead", 2*time.Second)
	f.register("n", "w1", time.Second)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	r, err := f.s.ReleaseAndRing(ctx, Pgx(tx), "n", token, "h", 0)
	if err != nil || !r.Released || !r.WokeFirst || !r.Rang || r.Bell != 1 {
		t.Fatalf("a release that woke the first waiter: %+v, %v; want it rang, bell 1", r, err)
	}
	if k := probe(); k != 1 {
		t.Fatalf("bell %d held after the ring, before the commit; want 1", k)
	}
	w := f.conns["w1"]
	got := make(chan AcquireResult, 1)
	go func() {
		r, err := f.s.Acquire(ctx, Pgx(w), AcquireArgs{Name: "n", Owner: "o-w1", TTL: time.Minute, Client: "w1",
			Queued: true, QueueTTL: time.Hour, FairAfter: FairAfter})
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	pid := w.PgConn().PID()
	pgtest.WaitFor(t, 10*time.Second, "the woken waiter's attempt to wait for the release's commit", func() bool {
		return pgtest.Value[bool](t, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE "pid" = $1 AND NOT "granted")`, pid)
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r := pgtest.Receive(t, got, "the woken waiter's attempt"); !r.Acquired {
		t.Fatalf("the woken waiter's attempt after the release committed: %+v, want acquired", r)
	}

	// An acquisition of the name holds its lock: the release does not
	// wait for it (it holds the row's lock), and rings nothing; its client
	// rings after the reply.
	token = acquire("busy")
	f.register("busy", "w1", time.Second)
	other, err := pgtest.Pool(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback(ctx) }()
	ns, err := f.s.LockNamespace()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1::text || $2::text), hashtext($2::text || $1::text))`, ns, "busy"); err != nil {
		t.Fatal(err)
	}
	r, err = f.s.ReleaseAndRing(ctx, Pgx(holder), "busy", token, "h", 1)
	if err != nil || !r.Released || !r.WokeFirst || r.Rang || r.Bell != 1 {
		t.Fatalf("a release while an acquisition holds the name's lock: %+v, %v; want it woke the first waiter, no ring, bell 1", r, err)
	}
	if k := probe(); k != 1 {
		t.Fatalf("bell %d held after a release that rang nothing, want 1", k)
	}
}
