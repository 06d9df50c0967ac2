package pglease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/pgtest"
	"github.com/pglease/pglease/internal/store"
)

// The acceptance test: clients, each a Client of its own, take
// random sets of 3 of 6 names with the blocking form, over and over. No
// client waits long for a set (no deadlock, no starvation: a wait that
// reaches patience fails the test), and no name ever has two holders: each
// holder counts itself in on every name of its set and fails on finding
// someone there, and sees the name's tokens increase.
func TestOverlappingSetsInAnyOrderNeitherDeadlockNorOverlap(t *testing.T) {
	t.Run("Short", func(t *testing.T) { manySets(t, 8, 3*time.Second) })
	t.Run("Long", func(t *testing.T) {
		if testing.Short() {
			t.Skip("30 s under -short")
		}
		manySets(t, 8, 30*time.Second)
	})
}

func manySets(t *testing.T, clients int, d time.Duration) {
	const names, per = 6, 3
	first := testClient(t, Config{})
	cs := []*Client{first}
	for range clients - 1 {
		cs = append(cs, testClient(t, Config{Table: first.cfg.Table}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), d+2*patience)
	defer cancel()
	var (
		holders  [names]atomic.Int32
		tokens   [names]atomic.Int64
		overlaps atomic.Int32
		counts   = make([]int, clients)
		wg       sync.WaitGroup
	)
	fail := func(format string, args ...any) {
		if overlaps.Add(1) <= 3 { // the first few tell the story
			t.Errorf(format, args...)
		}
	}
	end := time.Now().Add(d)
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				pick := rand.Perm(names)[:per] // in no particular order
				set := make([]string, per)
				for j, k := range pick {
					set[j] = fmt.Sprintf("n%d", k)
				}
				actx, cancel := context.WithTimeout(ctx, patience)
				s, err := c.AcquireAll(actx, set, WithTTL(5*time.Second))
				cancel()
				if err != nil {
					t.Errorf("client %d got nothing for %s: AcquireAll %q: %v", i, patience, set, err)
					return
				}
				for _, k := range pick {
					if n := holders[k].Add(1); n != 1 {
						fail("client %d entered n%d with %d other holder(s) inside", i, k, n-1)
					}
					tok := setLease(s, fmt.Sprintf("n%d", k)).Token()
					if prev := tokens[k].Swap(tok); tok <= prev {
						fail("n%d: token %d after %d", k, tok, prev)
					}
				}
				// Not a wait: the width of the critical section, so that an
				// overlapping holder would be caught inside.
				time.Sleep(time.Millisecond)
				if err := causeOf(s.Context()); err != nil {
					t.Errorf("client %d: the set ended while held: %v", i, err)
				}
				for _, k := range pick {
					holders[k].Add(-1)
				}
				if err := s.Release(ctx); err != nil {
					t.Errorf("client %d: Release: %v", i, err)
					return
				}
				counts[i]++
			}
		}()
	}
	wg.Wait()
	total := 0
	for i, n := range counts {
		total += n
		if n == 0 && !t.Failed() {
			t.Errorf("client %d acquired no set in %s", i, d)
		}
	}
	t.Logf("%d set acquisitions (%d of %d names each) in %s by %d clients: %v per client", total, per, names, d, clients, counts)
	if n := rows(t, first).Count(); n != 0 {
		t.Errorf("%d rows left after every set was released", n)
	}
}

// Goroutines of one client take overlapping sets, in different orders,
// beside goroutines that take single names: none waits for another in a
// cycle (each loop finishes), and no name has two holders.
func TestSetsAndNamesOfOneClientNeverDeadlock(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	other := testClient(t, Config{Table: c.cfg.Table})
	const rounds = 15
	sets := [][]string{{"a", "b", "c"}, {"c", "b"}, {"c", "a"}, {"b", "a", "d"}}
	var holders sync.Map // name → *atomic.Int32
	enter := func(names ...string) {
		for _, n := range names {
			v, _ := holders.LoadOrStore(n, new(atomic.Int32))
			if k := v.(*atomic.Int32).Add(1); k != 1 {
				t.Errorf("%q has %d holders", n, k)
			}
		}
	}
	leave := func(names ...string) {
		for _, n := range names {
			v, _ := holders.Load(n)
			v.(*atomic.Int32).Add(-1)
		}
	}
	var wg sync.WaitGroup
	for _, set := range sets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				s, err := c.AcquireAll(ctx, set)
				if err != nil {
					t.Errorf("AcquireAll %q: %v", set, err)
					return
				}
				enter(set...)
				time.Sleep(time.Millisecond) // the critical section's width
				leave(set...)
				if err := s.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for _, pair := range []struct {
		c    *Client
		name string
	}{{c, "b"}, {other, "c"}, {other, "a"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				l, err := pair.c.Acquire(ctx, pair.name)
				if err != nil {
					t.Errorf("Acquire %q: %v", pair.name, err)
					return
				}
				enter(pair.name)
				time.Sleep(time.Millisecond)
				leave(pair.name)
				if err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TryAcquireAll with one name held elsewhere names it and its holder,
// writes nothing, and leaves the other names free, on the server and
// locally; a name held by another goroutine of the same client is named
// too.
func TestTryAcquireAllWithANameHeldWritesNothing(t *testing.T) {
	ctx := testCtx(t)
	a := testClient(t, Config{Owner: "a"})
	b := testClient(t, Config{Table: a.cfg.Table, Owner: "b"})
	hb, err := b.TryAcquire(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	maxBefore := rows(t, a).MaxToken()
	_, err = a.TryAcquireAll(ctx, []string{"c", "b", "a"})
	var held *HeldError
	if !errors.Is(err, ErrNotAcquired) || !errors.As(err, &held) {
		t.Fatalf("TryAcquireAll with b held: %v, want a HeldError", err)
	}
	if held.Holder.Name != "b" || held.Holder.Owner != "b" || held.Holder.Token != hb.Token() {
		t.Fatalf("holder = %+v, want b held by b with token %d", held.Holder, hb.Token())
	}
	if !strings.Contains(err.Error(), `"b"`) {
		t.Errorf("error %q does not name b", err)
	}
	for _, name := range []string{"a", "c"} {
		if r, ok := rows(t, a).Get(name); ok {
			t.Errorf("row %q written by a refused set: %+v", name, r)
		}
	}
	if n := rows(t, a).MaxToken(); n != maxBefore {
		t.Errorf("largest token in the table %d, was %d", n, maxBefore)
	}
	// Free afterwards, for other clients and for the client itself.
	lc, err := b.TryAcquire(ctx, "c")
	if err != nil {
		t.Fatalf("c after the refused set: %v", err)
	}
	la, err := a.TryAcquire(ctx, "a")
	if err != nil {
		t.Fatalf("a after the refused set, same client: %v", err)
	}
	// Held by this client's own lease: named too, with the client as owner.
	_, err = a.TryAcquireAll(ctx, []string{"z", "a"})
	if !errors.As(err, &held) || held.Holder.Name != "a" || held.Holder.Owner != "a" {
		t.Fatalf("TryAcquireAll with a held locally: %v", err)
	}
	for _, l := range []*Lease{hb, lc, la} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s, err := a.TryAcquireAll(ctx, []string{"c", "b", "a"})
	if err != nil {
		t.Fatalf("TryAcquireAll of free names: %v", err)
	}
	if got := len(s.Leases()); got != 3 || s.Leases()[0].Name() != "a" || s.Leases()[1].Name() != "b" || s.Leases()[2].Name() != "c" {
		t.Fatalf("Leases = %v", s.Leases())
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// When one lease of a set is lost (force-released, noticed at its
// renewal), the whole set ends: its context is cancelled with a cause
// matching ErrLeaseLost that names the lease, every lease ends, and the
// other rows are deleted.
func TestASetIsLostTogether(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	admin := testClient(t, Config{Table: c.cfg.Table})
	s, err := c.AcquireAll(ctx, []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.forceRelease(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	// The renewal that notices (the background one would, within a
	// third of the TTL).
	if err := setLease(s, "b").Renew(ctx); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Renew of the force-released lease: %v, want ErrLeaseLost", err)
	}
	pgtest.Receive(t, s.Context().Done(), "the set's end")
	if err := causeOf(s.Context()); !errors.Is(err, ErrLeaseLost) || !strings.Contains(err.Error(), `"b"`) {
		t.Fatalf("set Err = %v, want ErrLeaseLost naming b", err)
	}
	if err := context.Cause(s.Context()); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("context cause = %v", err)
	}
	// The set's context is cancelled first, then its other leases are ended
	// (memberEnded): each ends right after the set, not necessarily before
	// Done was received here.
	for _, l := range s.Leases() {
		pgtest.Receive(t, l.Context().Done(), "the end of lease "+l.Name())
		if err := causeOf(l.Context()); !errors.Is(err, ErrLeaseLost) {
			t.Errorf("%q: Err = %v, want ErrLeaseLost", l.Name(), err)
		}
	}
	pgtest.WaitFor(t, patience, "the other rows of the set to be deleted", func() bool {
		return rows(t, c).Count() == 0
	})
	if err := s.Release(ctx); err != nil {
		t.Fatalf("Release after the loss: %v", err)
	}
	if _, err := admin.TryAcquireAll(ctx, []string{"a", "c"}); err != nil {
		t.Fatalf("the set's other names after its loss: %v", err)
	}
}

// Every lease of a set has a token of its own, greater than every token
// handed out before; Release ends every lease and deletes every row, and
// is idempotent.
func TestEachLeaseOfASetHasItsOwnGreaterToken(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	l, err := c.TryAcquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	floor := l.Token()
	for range 2 {
		s, err := c.TryAcquireAll(ctx, []string{"c", "a", "b"}, WithTTL(7*time.Second), WithMetadata(map[string]any{"k": "v"}))
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int64]bool{}
		top := floor
		for _, l := range s.Leases() {
			if l.Token() <= floor || seen[l.Token()] {
				t.Errorf("%q: token %d, want one of its own above %d", l.Name(), l.Token(), floor)
			}
			seen[l.Token()] = true
			top = max(top, l.Token())
			r, ok := rows(t, c).Get(l.Name())
			if !ok || r.Token != l.Token() || !strings.Contains(r.Metadata, `"k": "v"`) || l.TTL() != 7*time.Second {
				t.Errorf("row of %q = %+v (present %v), want token %d and the metadata", l.Name(), r, ok, l.Token())
			}
		}
		if err := s.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx); err != nil {
			t.Fatalf("second Release: %v", err)
		}
		if !errors.Is(causeOf(s.Context()), ErrReleased) {
			t.Fatalf("Err after Release = %v", causeOf(s.Context()))
		}
		for _, l := range s.Leases() {
			if !errors.Is(causeOf(l.Context()), ErrReleased) {
				t.Errorf("%q after Release: %v", l.Name(), causeOf(l.Context()))
			}
		}
		if n := rows(t, c).Count(); n != 0 {
			t.Fatalf("%d rows after Release", n)
		}
		floor = top
	}
}

// A blocked AcquireAll whose ctx ends returns an error matching both
// ErrNotAcquired and ctx's error, and leaves nothing behind: no row, no
// local slot, no subscription.
func TestCancelledAcquireAllLeavesNothingHeld(t *testing.T) {
	ctx := testCtx(t)
	log := newEventLog()
	c := testClient(t, Config{Observer: log})
	b := testClient(t, Config{Table: c.cfg.Table})
	hb, err := b.TryAcquire(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := c.AcquireAll(wctx, []string{"b", "a"})
		done <- err
	}()
	log.await(t, "the set's refusal", is(EventContended, "b"))
	cancel()
	err = pgtest.Receive(t, done, "AcquireAll to give up")
	if !errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("AcquireAll after cancel: %v, want ErrNotAcquired and context.Canceled", err)
	}
	if r, ok := rows(t, c).Get("a"); ok {
		t.Fatalf("row of a after the cancelled wait: %+v", r)
	}
	c.wake.hub.mu.Lock()
	subs := len(c.wake.hub.subs)
	c.wake.hub.mu.Unlock()
	if subs != 0 {
		t.Errorf("%d names still subscribed", subs)
	}
	if err := hb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Both names free, locally too.
	s, err := c.TryAcquireAll(ctx, []string{"a", "b"})
	if err != nil {
		t.Fatalf("TryAcquireAll after the cancelled wait: %v", err)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A blocked AcquireAll is woken by the release of the name it waits for.
func TestAcquireAllIsWokenByARelease(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{PollInterval: time.Minute})
	b := testClient(t, Config{Table: c.cfg.Table})
	hb, err := b.TryAcquire(ctx, "b", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		s, err := c.AcquireAll(ctx, []string{"a", "b", "c"})
		if err == nil {
			err = s.Release(ctx)
		}
		done <- err
	}()
	waitSubscribed(t, c, "b", 1)
	if err := hb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pgtest.Receive(t, done, "AcquireAll after the release"); err != nil {
		t.Fatal(err)
	}
}

// Bad input is refused before anything is sent.
func TestAcquireAllRefusesBadInput(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	many := make([]string, maxSetNames+1)
	for i := range many {
		many[i] = fmt.Sprintf("n%d", i)
	}
	for _, tc := range []struct {
		what  string
		names []string
		opts  []Option
		want  string // the kind of InvalidError
	}{
		{"no names", nil, nil, kindArgument},
		{"an empty set", []string{}, nil, kindArgument},
		{"a duplicate", []string{"a", "b", "a"}, nil, kindArgument},
		{"too many names", many, nil, kindArgument},
		{"an invalid name", []string{"a", ""}, nil, kindName},
		{"WithSlots", []string{"a"}, []Option{WithSlots(2)}, kindArgument},
		{"WithFastFailover", []string{"a"}, []Option{WithFastFailover()}, kindArgument},
		{"a bad TTL", []string{"a"}, []Option{WithTTL(time.Millisecond)}, kindTTL},
	} {
		for _, try := range []bool{true, false} {
			var err error
			if try {
				_, err = c.TryAcquireAll(ctx, tc.names, tc.opts...)
			} else {
				_, err = c.AcquireAll(ctx, tc.names, tc.opts...)
			}
			if !isInvalid(err, tc.want) {
				t.Errorf("%s (try %v): %v, want %v", tc.what, try, err, tc.want)
			}
		}
	}
	if err := c.migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rows(t, c).Count(); n != 0 {
		t.Fatalf("%d rows after bad input", n)
	}
	if s, err := c.TryAcquireAll(ctx, many[:maxSetNames]); err != nil {
		t.Fatalf("%d names: %v", maxSetNames, err)
	} else if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A set works on a database/sql handle too, with a driver pglease knows
// nothing about (its transaction runs through database/sql's).
func TestSetsOnDatabaseSQL(t *testing.T) {
	ctx := testCtx(t)
	c, err := NewFromDB(openSQL(t, true), Config{Table: pgtest.Schema(t) + ".leases"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	s, err := c.TryAcquireAll(ctx, []string{"b", "a"})
	if err != nil {
		t.Fatalf("TryAcquireAll: %v", err)
	}
	if _, err := c.TryAcquireAll(ctx, []string{"c", "b"}); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("overlapping TryAcquireAll: %v, want ErrNotAcquired", err)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	s, err = c.AcquireAll(ctx, []string{"c", "b"})
	if err != nil {
		t.Fatalf("AcquireAll: %v", err)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rows(t, c).Count(); n != 0 {
		t.Fatalf("%d rows after Release", n)
	}
}

// A set keeps the queue's promise: a name that expired while a waiter of
// another client has been queued for it longer than fairAfter is not free
// for a set, which is refused with the waiter counted (HeldError.Queued),
// writes nothing, and wakes the waiter, who takes the name.
//
// The waiter must not take the name between its expiry and the set's
// attempt, so its own looks are held back meanwhile: its dedicated session
// is up before it waits (slowPair: the session's start would wake the
// wait), its first attempt registers it, and its second, the look after
// registering, waits until the set has been refused. (Without that hold
// the test relied on the waiter sleeping through the set's attempt, which
// it does not: a wait woken once looks again by itself fairAfter into its
// turn, just when the name had been made to expire, and a waiter that got
// there first took the name and released it, leaving it free for the set.)
func TestASetKeepsTheQueuesPromise(t *testing.T) {
	ctx := testCtx(t)
	holder, waiter := slowPair(t)
	set := testClient(t, Config{Table: holder.cfg.Table, PollInterval: 10 * time.Minute})
	if _, err := holder.TryAcquire(ctx, "x", WithTTL(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	_, look, proceed := holdAttempt(t, waiter, 2)
	got := waitingFor(ctx, waiter, "x")
	pgtest.Receive(t, look, "the waiter's look after registering")
	waitQueued(t, holder, waiter, "x")
	pgtest.WaitFor(t, patience, "the waiter to be queued longer than fairAfter", func() bool {
		return pgtest.Value[bool](t, `SELECT bool_and("since" <= now() - $1 * interval '1 millisecond') FROM `+
			holder.st.Names.QualifiedWaiters()+` WHERE "name" = 'x'`, fairAfter.Milliseconds())
	})
	// The waiter's own channel, to hear the refused set wake it.
	listener := pgtest.Conn(t)
	if _, err := listener.Exec(ctx, "LISTEN "+pgx.Identifier{store.ClientChannel(waiter.id)}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	// Expired, without a release to notify: x is free but promised to the
	// waiter.
	rows(t, holder).SetExpiry("x", -time.Second)
	_, err := set.TryAcquireAll(ctx, []string{"x", "y"})
	var held *HeldError
	if !errors.As(err, &held) || held.Holder.Name != "x" || held.Queued != 1 {
		t.Fatalf("TryAcquireAll of a promised name: %v, want a HeldError for x with 1 queued", err)
	}
	if _, ok := rows(t, holder).Get("y"); ok {
		t.Fatal("a refused set wrote y")
	}
	wctx, cancel := context.WithTimeout(ctx, patience)
	defer cancel()
	if n, err := listener.WaitForNotification(wctx); err != nil || n.Payload != "x" {
		t.Fatalf("the promised waiter's channel after the refused set: %v, %v; want a wake-up for x", n, err)
	}
	proceed()
	if err := pgtest.Receive(t, got, "the promised waiter to take x"); err != nil {
		t.Fatal(err)
	}
}

// setLease returns the lease of name in s, or nil.
func setLease(s *LeaseSet, name string) *Lease {
	for _, l := range s.Leases() {
		if l.Name() == name {
			return l
		}
	}
	return nil
}
