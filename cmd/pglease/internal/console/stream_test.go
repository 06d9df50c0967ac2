package console_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
	"github.com/pglease/pglease/cmd/pglease/internal/console"
	"github.com/pglease/pglease/internal/pgtest"
)

// The event stream shows an acquisition, a release and an expiry, each by
// its own signal: with the fallback re-read an hour away, an acquisition
// can only be seen through the token sequence, a release through its
// notification and an expiry through the timer at the expiry instant.
func TestStreamShowsAcquireReleaseAndExpiry(t *testing.T) {
	t.Parallel()
	f := start(t, console.Config{FullRefresh: time.Hour})
	c := f.client()
	events := f.stream()
	await(t, events, "the listener to be up", func(m msg) bool { return m.Status.Listener })

	ctx, cancel := context.WithTimeout(context.Background(), pgtest.Patience)
	defer cancel()
	l, err := c.TryAcquire(ctx, "report", pglease.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	acquired := time.Now()
	m := await(t, events, "report acquired", func(m msg) bool { return m.state("report") == "held" })
	t.Logf("acquisition seen %s after TryAcquire returned", m.received.Sub(acquired))
	if !feedHas(m, "acquired", "report acquired by tester") {
		t.Errorf("feed %+v lacks the acquisition", m.Feed)
	}

	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	m = await(t, events, "report released", func(m msg) bool { return m.state("report") == "" })
	t.Logf("release seen %s after Release returned", m.received.Sub(released))
	if !feedHas(m, "released", "report released by tester") {
		t.Errorf("feed %+v lacks the release", m.Feed)
	}

	// A holder that dies: a row with a TTL of 1s that nobody renews.
	leases := pgtest.LeaseTable(t, pgtest.DSN(t), f.table)
	leases.Insert("dead", "crashed-host", 1000, time.Second, `{"pid": 42}`)
	// A plain insert draws no token and notifies nothing: wake the console
	// with an acquisition of another name, which it sees by the sequence.
	if _, err := c.TryAcquire(ctx, "other", pglease.WithTTL(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	await(t, events, "dead held", func(m msg) bool { return m.state("dead") == "held" })
	m = await(t, events, "dead expired", func(m msg) bool { return m.state("dead") == "expired" })
	expires := leases.ExpiresAt("dead")
	t.Logf("expiry seen %s after expires_at", m.received.Sub(expires))
	if !feedHas(m, "expired", "dead expired: crashed-host (token 1000) stopped renewing") {
		t.Errorf("feed %+v lacks the expiry", m.Feed)
	}
}

func feedHas(m msg, kind, text string) bool {
	for _, e := range m.Feed {
		if e.Kind == kind && strings.Contains(e.Text, text) {
			return true
		}
	}
	return false
}

// However many viewers watch, the console has one listener connection and
// reads the table once per change.
func TestOneListenerForManyViewers(t *testing.T) {
	t.Parallel()
	f := start(t, console.Config{FullRefresh: time.Hour})
	c := f.client()
	const viewers = 8
	streams := make([]<-chan msg, viewers)
	for i := range streams {
		streams[i] = f.stream()
	}
	for _, s := range streams {
		await(t, s, "the listener to be up", func(m msg) bool { return m.Status.Listener })
	}
	if n := f.c.Viewers(); n != viewers {
		t.Fatalf("Viewers() = %d, want %d", n, viewers)
	}
	before := f.c.Refreshes()
	ctx, cancel := context.WithTimeout(context.Background(), pgtest.Patience)
	defer cancel()
	if _, err := c.TryAcquire(ctx, "job", pglease.WithTTL(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	for _, s := range streams {
		await(t, s, "job acquired", func(m msg) bool { return m.state("job") == "held" })
	}
	// One read for the acquisition, one more if it ran before the commit.
	if n := f.c.Refreshes() - before; n > 2 {
		t.Errorf("%d reads of the table for one acquisition seen by %d viewers; want at most 2", n, viewers)
	}
	listeners := pgtest.Value[int64](t, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, f.cfg.AppName+" listener")
	all := pgtest.Value[int64](t, `SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE $1`, f.cfg.AppName+"%")
	if listeners != 1 || all > 4 {
		t.Errorf("%d viewers: %d listener connections (want 1), %d connections in all (want at most 4)", viewers, listeners, all)
	}
}

// Closing the console ends the open event streams, so that a server can
// shut down.
func TestCloseEndsStreams(t *testing.T) {
	t.Parallel()
	f := start(t, console.Config{})
	s := f.stream()
	await(t, s, "a first snapshot", func(msg) bool { return true })
	f.c.CloseStreams()
	timeout := time.After(pgtest.Patience)
	for {
		select {
		case _, ok := <-s:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatal("the event stream is still open after CloseStreams")
		}
	}
}

// A role that may read the table but not its token sequence still sees
// every change: the console re-reads the table every poll, and says so.
func TestSelectOnlyRoleFallsBackToPolling(t *testing.T) {
	t.Parallel()
	table := pgtest.Schema(t) + ".leases"
	owner := start(t, console.Config{Table: table}) // only to create the table with its client
	c := owner.client()
	f := start(t, console.Config{DSN: pgtest.SelectOnlyDSN(t, table), Table: table, FullRefresh: time.Hour})
	events := f.stream()
	await(t, events, "the fallback in the status", func(m msg) bool {
		return m.Status.Class == "degraded" && strings.Contains(m.Status.Text, "token sequence is not readable")
	})
	ctx, cancel := context.WithTimeout(context.Background(), pgtest.Patience)
	defer cancel()
	if _, err := c.TryAcquire(ctx, "seen-anyway", pglease.WithTTL(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	await(t, events, "seen-anyway acquired", func(m msg) bool { return m.state("seen-anyway") == "held" })
}

// A viewer who connects before the console has read the table is shown
// that first read, not the empty state the console starts from (which the
// page shows as "no lease table yet", with no leases). The first read is
// held up by a lock on the table until the viewer is connected.
func TestAViewerBeforeTheFirstReadSeesThatRead(t *testing.T) {
	table := pgtest.Schema(t) + ".leases"
	ctx, cancel := context.WithTimeout(context.Background(), pgtest.Patience)
	defer cancel()
	c, err := pglease.Open(ctx, pgtest.DSN(t), pglease.Config{Table: table, Owner: "tester"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := admin.Migrate(ctx, c); err != nil {
		t.Fatal(err)
	}
	l, err := c.TryAcquire(ctx, "held-at-start", pglease.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())

	conn, err := pgx.Connect(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}

	f := serve(t, console.Config{Table: table})
	events := f.stream() // connected: the response's headers came
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	m := await(t, events, "the first snapshot", func(msg) bool { return true })
	if m.Version == 0 || !m.Status.Exists || m.state("held-at-start") != "held" {
		t.Fatalf("the first snapshot: version %d, table exists %v, held-at-start %q; want the first read's: version ≥ 1, the table, the lease held",
			m.Version, m.Status.Exists, m.state("held-at-start"))
	}
}

// Who waits is pushed live: a client queued behind the holder appears in
// the lease's row (no token is drawn and nothing is notified when it
// queues: the console sees it at its next poll), then a second one behind
// it, and both leave the row as the lease is handed on. The page renders
// the queue too.
func TestStreamShowsWhoWaits(t *testing.T) {
	t.Parallel()
	f := start(t, console.Config{FullRefresh: time.Hour})
	holder := f.client()
	events := f.stream()
	ctx, cancel := context.WithTimeout(context.Background(), pgtest.Patience)
	defer cancel()
	l, err := holder.TryAcquire(ctx, "report", pglease.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	await(t, events, "report held", func(m msg) bool { return m.state("report") == "held" })
	got := make(chan *pglease.Lease, 2)
	wait := func(owner string) {
		c, err := pglease.Open(ctx, pgtest.DSN(t), pglease.Config{Table: f.table, Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		go func() {
			l, err := c.Acquire(ctx, "report", pglease.WithTTL(30*time.Second))
			if err != nil {
				t.Errorf("%s: %v", owner, err)
			}
			got <- l
		}()
	}
	wait("first-waiter")
	m := await(t, events, "the first waiter in the row", func(m msg) bool { return len(m.waiters("report")) == 1 })
	if !m.Status.Queues || m.waiters("report")[0] != "first-waiter" {
		t.Fatalf("queue %v (known: %v), want [first-waiter]", m.waiters("report"), m.Status.Queues)
	}
	wait("second-waiter")
	m = await(t, events, "the second waiter in the row", func(m msg) bool { return len(m.waiters("report")) == 2 })
	if w := m.waiters("report"); w[0] != "first-waiter" || w[1] != "second-waiter" {
		t.Fatalf("queue %v, want [first-waiter second-waiter]", w)
	}
	if _, body := f.get("/"); !strings.Contains(body, "first-waiter ") || !strings.Contains(body, "second-waiter ") {
		t.Errorf("the page does not show the queue:\n%s", body)
	}
	if v, ok := value(f.scrape(), "pglease_table_waiters"); !ok || v != 2 {
		t.Errorf("pglease_table_waiters = %v (present %v), want 2", v, ok)
	}
	if v, _ := value(f.scrape(), "pglease_table_oldest_wait_seconds"); v <= 0 || v > 60 {
		t.Errorf("pglease_table_oldest_wait_seconds = %v", v)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next := pgtest.Receive(t, got, "the first waiter's lease")
	m = await(t, events, "the first waiter holding, the second waiting", func(m msg) bool {
		w := m.waiters("report")
		return m.state("report") == "held" && len(w) == 1 && w[0] == "second-waiter"
	})
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
	last := pgtest.Receive(t, got, "the second waiter's lease")
	await(t, events, "nobody waiting", func(m msg) bool { return m.state("report") == "held" && len(m.waiters("report")) == 0 })
	_ = last.Release(ctx)
}

// A row of a kind the console does not know (one a later version may add)
// is shown as the table records it, with the units of its kind's size the
// row takes, as pglease ls shows it: in the snapshot the stream sends, on
// the page, and the waits for its name with their kind; the rows of the
// other kinds alike.
func TestStreamAndPageShowAKindTheyDoNotKnow(t *testing.T) {
	t.Parallel()
	f := start(t, console.Config{FullRefresh: 200 * time.Millisecond})
	c := f.client()
	ctx, cancel := context.WithTimeout(context.Background(), pgtest.Patience)
	defer cancel()
	shared, err := c.TryAcquire(ctx, "cfg", pglease.WithShared(), pglease.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Release(ctx)
	slot, err := c.TryAcquire(ctx, "pool", pglease.WithSlots(2), pglease.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer slot.Release(ctx)
	events := f.stream()
	leases := pgtest.LeaseTable(t, pgtest.DSN(t), f.table)
	leases.InsertOfKind("q#0", "later-holder", 1<<40, time.Minute, "later", "q", 10, 3)
	leases.QueueShared("q", "q-reader")
	m := await(t, events, "the later kind's row and its waiter", func(m msg) bool {
		return m.state("q#0") == "held" && len(m.waiters("q#0")) == 1
	})
	want := map[string]string{
		"q#0":         "later q 10 3 [later, 3 of 10] [q-reader later [later]]",
		shared.Name(): "shared cfg 0 1 [shared]",
		slot.Name():   "semaphore pool 2 1 []",
	}
	for _, l := range m.Leases {
		got := fmt.Sprintf("%s %s %d %d [%s]", l.Kind, l.Of, l.Size, l.Weight, l.Label)
		for _, w := range l.Waiters {
			got += fmt.Sprintf(" [%s %s [%s]]", w.Owner, w.Kind, w.Label)
		}
		if got != want[l.Name] {
			t.Errorf("snapshot row %s: %q, want %q", l.Name, got, want[l.Name])
		}
	}
	if len(m.Leases) != len(want) {
		t.Errorf("snapshot: %d rows, want %d", len(m.Leases), len(want))
	}
	_, body := f.get("/")
	for _, w := range []string{"q#0 (later, 3 of 10)</th>", "q-reader ", " (later)", shared.Name() + " (shared)</th>", slot.Name() + "</th>"} {
		if !strings.Contains(body, w) {
			t.Errorf("the page lacks %q:\n%s", w, body)
		}
	}
}
