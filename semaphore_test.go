package pglease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// slotColumns returns the semaphore and slot count that name's row
// records ("" and 0 for NULL).
func slotColumns(t *testing.T, c *Client, name string) (semaphore string, slots int) {
	t.Helper()
	var sem *string
	var n *int
	pgtest.QueryRow(t, `SELECT "semaphore", "slots" FROM `+rows(t, c).Name()+` WHERE "name" = $1`, []any{name}, &sem, &n)
	if sem != nil {
		semaphore = *sem
	}
	if n != nil {
		slots = *n
	}
	return semaphore, slots
}

// wantKindError fails unless err is a *KindError for name, want and have
// (the kinds by name) that nothing treats as retryable or as a held lease,
// whose message names both kinds and what to use.
func wantKindError(t *testing.T, what string, err error, name string, want, have string) {
	t.Helper()
	var ke *KindError
	if !errors.As(err, &ke) {
		t.Fatalf("%s: %v, want a *KindError", what, err)
	}
	if ke.Name != name || ke.Want != want || ke.Have != have {
		t.Fatalf("%s: %+v, want {Name:%q Want:%q Have:%q}", what, *ke, name, want, have)
	}
	if IsRetryable(err) || errors.Is(err, ErrNotAcquired) {
		t.Fatalf("%s: %v is retryable (%v) or a held lease (%v)", what, err, IsRetryable(err), errors.Is(err, ErrNotAcquired))
	}
	msg := err.Error()
	for _, s := range []string{fmt.Sprintf("%q", name), "held as a " + have, "asked for a " + want, "WithSlots"} {
		if !strings.Contains(msg, s) {
			t.Fatalf("%s: message %q does not say %s", what, msg, s)
		}
	}
	if strings.Count(msg, "pglease: ") != 1 || !strings.HasPrefix(msg, "pglease: ") {
		t.Fatalf("%s: message %q does not begin with \"pglease: \" once", what, msg)
	}
}

// Every slot row records its semaphore and slot count, a plain lease
// neither; a slot asked for with another count than a live slot's fails at
// once (TryAcquire and a blocking Acquire alike), writes nothing and
// leaves the live slot alone; the same count works; once every slot is
// released, or has expired, another count works and is recorded.
func TestSemaphoreRefusesAnotherSlotCount(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []Option
	}{{"Plain", nil}, {"FastFailover", []Option{WithFastFailover()}}} {
		t.Run(mode.name, func(t *testing.T) { semaphoreRefusesAnotherSlotCount(t, mode.opts) })
	}
}

func semaphoreRefusesAnotherSlotCount(t *testing.T, opts []Option) {
	ctx := testCtx(t)
	a := testClient(t, Config{})
	b := testClient(t, Config{Table: a.cfg.Table})
	with := func(o ...Option) []Option { return append(append([]Option{}, opts...), o...) }

	plain, err := a.TryAcquire(ctx, "job", opts...)
	if err != nil {
		t.Fatal(err)
	}
	if sem, n := slotColumns(t, a, "job"); sem != "" || n != 0 {
		t.Fatalf("a plain lease records semaphore %q and %d slots, want neither", sem, n)
	}
	one, err := a.TryAcquire(ctx, "job1", with(WithSlots(1))...)
	if err != nil {
		t.Fatal(err)
	}
	if sem, n := slotColumns(t, a, one.Name()); one.Name() != "job1" || sem != "" || n != 0 {
		t.Fatalf("WithSlots(1) acquired %q recording semaphore %q and %d slots, want the plain lease job1", one.Name(), sem, n)
	}
	// A name is one kind of lease: no slot of job while a plain lease
	// holds it.
	_, err = b.TryAcquire(ctx, "job", with(WithSlots(3))...)
	wantKindError(t, "TryAcquire of a slot of a name a plain lease holds", err, "job", "semaphore of 3 slots", "plain lease")
	if err := plain.Release(ctx); err != nil {
		t.Fatal(err)
	}

	first, err := a.TryAcquire(ctx, "job", with(WithSlots(3))...)
	if err != nil {
		t.Fatal(err)
	}
	if sem, n := slotColumns(t, a, first.Name()); sem != "job" || n != 3 {
		t.Fatalf("slot %q records semaphore %q and %d slots, want job and 3", first.Name(), sem, n)
	}
	before := rows(t, a).Count()

	_, err = b.TryAcquire(ctx, "job", with(WithSlots(5))...)
	wantKindError(t, "TryAcquire with 5 slots", err, "job", "semaphore of 5 slots", "semaphore of 3 slots")
	// A blocking Acquire does not wait: the mismatch would outlast any
	// wait of a client that never releases. Bounded by patience, a wait
	// would end in the context's error instead.
	actx, cancel := context.WithTimeout(ctx, patience)
	_, err = b.Acquire(actx, "job", with(WithSlots(5))...)
	waited := actx.Err()
	cancel()
	if waited != nil {
		t.Fatalf("Acquire with 5 slots waited until its context ended: %v", err)
	}
	wantKindError(t, "Acquire with 5 slots", err, "job", "semaphore of 5 slots", "semaphore of 3 slots")
	if n := rows(t, a).Count(); n != before {
		t.Fatalf("the refused acquisitions left %d rows, want %d", n, before)
	}
	if err := causeOf(first.Context()); err != nil {
		t.Fatalf("the first client's slot ended: %v", err)
	}
	if r, _ := rows(t, a).Get(first.Name()); !r.Held || r.Token != first.Token() {
		t.Fatalf("the first client's slot row is %+v, want held with token %d", r, first.Token())
	}
	// Nor a plain lease on a semaphore's name, waiting or not, alone or
	// in a set.
	_, err = b.TryAcquire(ctx, "job", opts...)
	wantKindError(t, "TryAcquire of a plain lease on a semaphore's name", err, "job", "plain lease", "semaphore of 3 slots")
	actx, cancel = context.WithTimeout(ctx, patience)
	_, err = b.Acquire(actx, "job", opts...)
	cancel()
	wantKindError(t, "Acquire of a plain lease on a semaphore's name", err, "job", "plain lease", "semaphore of 3 slots")
	if len(opts) == 0 {
		_, err = a.TryAcquireAll(ctx, []string{"job", "other"})
		wantKindError(t, "TryAcquireAll of a semaphore's name", err, "job", "plain lease", "semaphore of 3 slots")
	}
	if n := rows(t, a).Count(); n != before {
		t.Fatalf("the refused acquisitions left %d rows, want %d", n, before)
	}

	// The same count works, from the other client.
	same, err := b.TryAcquire(ctx, "job", with(WithSlots(3))...)
	if err != nil {
		t.Fatalf("TryAcquire with the same 3 slots: %v", err)
	}
	if same.Name() == first.Name() {
		t.Fatalf("both clients hold %q", same.Name())
	}

	// Every slot released: another count works, and is recorded, also
	// on the rows of the old slots it takes over.
	for _, l := range []*Lease{first, same} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var five []*Lease
	for range 5 {
		l, err := b.TryAcquire(ctx, "job", with(WithSlots(5))...)
		if err != nil {
			t.Fatalf("TryAcquire with 5 slots once every slot was released: %v", err)
		}
		five = append(five, l)
	}
	for _, l := range five {
		if sem, n := slotColumns(t, b, l.Name()); sem != "job" || n != 5 {
			t.Fatalf("slot %q records semaphore %q and %d slots, want job and 5", l.Name(), sem, n)
		}
	}
	_, err = a.TryAcquire(ctx, "job", with(WithSlots(3))...)
	wantKindError(t, "TryAcquire with 3 slots while 5 are held", err, "job", "semaphore of 3 slots", "semaphore of 5 slots")

	// A slot that expired (its holder gone) no longer counts: only live
	// slot rows are compared. (A late renewal never revives a row.)
	for _, l := range five {
		rows(t, b).SetExpiry(l.Name(), -time.Second)
	}
	l, err := a.TryAcquire(ctx, "job", with(WithSlots(2))...)
	if err != nil {
		t.Fatalf("TryAcquire with 2 slots once every slot had expired: %v", err)
	}
	if sem, n := slotColumns(t, a, l.Name()); sem != "job" || n != 2 {
		t.Fatalf("slot %q taken over records semaphore %q and %d slots, want job and 2", l.Name(), sem, n)
	}
}

// On database/sql (a driver pglease knows nothing of, so no pgx batch)
// the semaphore's lock and the acquisition share a transaction too: the
// count is recorded and checked the same way.
func TestSemaphoreOnDatabaseSQL(t *testing.T) {
	ctx := testCtx(t)
	a := testClient(t, Config{})
	c, err := NewFromDB(openSQL(t, true), Config{Table: a.cfg.Table})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := a.TryAcquire(ctx, "sql", WithSlots(3)); err != nil {
		t.Fatal(err)
	}
	_, err = c.TryAcquire(ctx, "sql", WithSlots(4))
	wantKindError(t, "TryAcquire with 4 slots on database/sql", err, "sql", "semaphore of 4 slots", "semaphore of 3 slots")
	l, err := c.TryAcquire(ctx, "sql", WithSlots(3))
	if err != nil {
		t.Fatalf("TryAcquire with the same 3 slots on database/sql: %v", err)
	}
	if sem, n := slotColumns(t, a, l.Name()); sem != "sql" || n != 3 {
		t.Fatalf("slot %q records semaphore %q and %d slots, want sql and 3", l.Name(), sem, n)
	}
	if n := rows(t, a).Count(); n != 2 {
		t.Fatalf("%d rows, want the two slots", n)
	}
}

// Concurrent acquisitions of one name as a plain lease and as semaphores
// of two slot counts never hold two kinds at once (which would let more
// holders in than the smaller count, or a plain holder beside slots): the
// check and the insert are one atomic step under the name's lock. Without
// that lock, or with it taken inside the acquisition statement, contenders
// that start together each see no other kind and several get in.
func TestSemaphoreMismatchedContendersNeverMix(t *testing.T) {
	ctx := testCtx(t)
	const clients = 6
	cs := []*Client{testClient(t, Config{})}
	for len(cs) < clients {
		cs = append(cs, testClient(t, Config{Table: cs[0].cfg.Table}))
	}
	counts := [clients]int{}
	for i := range counts {
		counts[i] = []int{1, 2, 5}[i%3] // 1: a plain lease
	}
	mismatches := 0
	for round := range 25 {
		name := fmt.Sprintf("mix-%d", round)
		start := make(chan struct{})
		type got struct {
			slots int
			l     *Lease
			err   error
		}
		results := make(chan got, clients)
		var wg sync.WaitGroup
		for i, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				l, err := c.TryAcquire(ctx, name, WithSlots(counts[i]))
				results <- got{counts[i], l, err}
			}()
		}
		close(start)
		wg.Wait()
		close(results)
		held := map[int][]string{}
		var leases []*Lease
		for r := range results {
			switch {
			case r.err == nil:
				held[r.slots] = append(held[r.slots], r.l.Name())
				leases = append(leases, r.l)
			case errors.As(r.err, new(*KindError)):
				mismatches++
			case errors.Is(r.err, ErrNotAcquired):
			default:
				t.Fatalf("round %d: TryAcquire with %d slots: %v", round, r.slots, r.err)
			}
		}
		if len(held) > 1 {
			t.Fatalf("round %d: two kinds held at once (by slot count, 1 a plain lease): %v", round, held)
		}
		if len(held[1]) > 1 || len(held[2]) > 2 {
			t.Fatalf("round %d: %d holders of a 2-slot semaphore: %v", round, len(held[2]), held[2])
		}
		if live := rows(t, cs[0]).Held(name + "#"); len(live) > 5 {
			t.Fatalf("round %d: %d live slot rows: %v", round, len(live), live)
		}
		for _, l := range leases {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if mismatches == 0 {
		t.Fatal("no contender was ever refused for its slot count: the test exercised nothing")
	}
}

// Names of the slot form are reserved: every call that acquires refuses
// them (and a semaphore's own name of that form), saying what to use
// instead, while Get and ForceRelease reach slot rows by their names.
func TestSlotNamesAreReservedForSemaphores(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	if err := c.migrate(ctx); err != nil {
		t.Fatal(err)
	}
	lead := func(context.Context) error { return nil }
	refused := map[string]func(name string) error{
		"Plan":       nameErr,
		"TryAcquire": func(n string) error { _, err := c.TryAcquire(ctx, n); return err },
		"Acquire":    func(n string) error { _, err := c.Acquire(ctx, n); return err },
		"TryRun":     func(n string) error { return c.TryRun(ctx, n, lead) },
		"Run":        func(n string) error { return c.Run(ctx, n, lead) },
		"NewElector": func(n string) error { _, err := c.NewElector(n, lead, ElectorConfig{}); return err },
		"WithSlots":  func(n string) error { _, err := c.TryAcquire(ctx, n, WithSlots(2)); return err },
	}
	for call, f := range refused {
		for _, name := range []string{"job#0", "job#12", "a#1#0", "é#007"} {
			err := f(name)
			if !isInvalid(err, kindName) || !strings.Contains(err.Error(), "reserved for slot names") {
				t.Errorf("%s(%q): %v, want an invalid lease name saying the name is reserved for slot names", call, name, err)
			}
		}
	}
	if err := nameErr("job#0"); err == nil || !strings.Contains(err.Error(), `"job-0"`) {
		t.Errorf("Plan(job#0): %v, want a suggestion of job-0", err)
	}
	if n := rows(t, c).Count(); n != 0 {
		t.Fatalf("refused names left %d rows", n)
	}
	for _, name := range []string{"job#", "#0", "job#0x", "job#-1", "a#b"} {
		if err := nameErr(name); err != nil {
			t.Errorf("Plan(%q): %v, want nil: not of the slot form", name, err)
		}
	}

	l, err := c.TryAcquire(ctx, "job", WithSlots(2))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Get(ctx, l.Name())
	if err != nil || info.Token != l.Token() || info.Kind != "semaphore" || info.Of != "job" || info.Size != 2 || info.Weight != 1 {
		t.Fatalf("Get(%q) of a held slot: %+v, %v; want kind semaphore of job, size 2, weight 1", l.Name(), info, err)
	}
	if _, err := c.forceRelease(ctx, l.Name()); err != nil {
		t.Fatalf("ForceRelease(%q): %v", l.Name(), err)
	}
	if _, err := c.Get(ctx, l.Name()); !errors.Is(err, ErrNoLease) {
		t.Fatalf("Get(%q) after ForceRelease: %v, want ErrNoLease", l.Name(), err)
	}
}

// An election has one leader: NewElector refuses WithSlots (more than one
// slot) with an invalid argument; WithSlots(1), a plain lease, is accepted.
func TestElectorRefusesWithSlots(t *testing.T) {
	c := testClient(t, Config{})
	lead := func(context.Context) error { return nil }
	_, err := c.NewElector("leader", lead, ElectorConfig{LeaseOptions: []Option{WithSlots(3)}})
	if !isInvalid(err, kindArgument) || !strings.Contains(err.Error(), "one leader") {
		t.Fatalf("NewElector with WithSlots(3): %v, want an invalid argument saying an election has one leader", err)
	}
	if _, err := c.NewElector("leader", lead, ElectorConfig{LeaseOptions: []Option{WithSlots(1)}}); err != nil {
		t.Fatalf("NewElector with WithSlots(1): %v", err)
	}
}
