package pgleasegocron

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
	"github.com/pglease/pglease/internal/pgtest"
)

func testClient(t *testing.T, table, owner string) *pglease.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pgtest.Patience)
	defer cancel()
	c, err := pglease.Open(ctx, pgtest.DSN(t), pglease.Config{Table: table, Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// A job's lock is its lease: held, the other replicas' Locks fail with
// ErrNotAcquired; kept for the minimum hold past Unlock; a lease lost
// during the run makes Unlock say so.
func TestLocker(t *testing.T) {
	table := pgtest.Schema(t) + ".leases"
	ctx := context.Background()
	a := NewLocker(testClient(t, table, "a"))
	b := NewLocker(testClient(t, table, "b"), pglease.WithMinHold(10*time.Second))
	k, err := a.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Lock(ctx, "job"); !errors.Is(err, pglease.ErrNotAcquired) {
		t.Fatalf("Lock of a held job: %v; want ErrNotAcquired", err)
	}
	if err := k.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	k, err = b.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// b's run ended, but its lease is kept for its minimum hold.
	if _, err := a.Lock(ctx, "job"); !errors.Is(err, pglease.ErrNotAcquired) {
		t.Fatalf("Lock within the previous run's minimum hold: %v; want ErrNotAcquired", err)
	}

	k, err = a.Lock(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	operator := testClient(t, table, "operator")
	if _, err := admin.ForceRelease(ctx, operator, LeasePrefix+"other"); err != nil {
		t.Fatal(err)
	}
	if err := k.(lock).lease.Renew(ctx); !errors.Is(err, pglease.ErrLeaseLost) {
		t.Fatalf("Renew after a forced release: %v", err)
	}
	if err := k.Unlock(ctx); !errors.Is(err, pglease.ErrLeaseLost) {
		t.Fatalf("Unlock of a lost lease: %v; want ErrLeaseLost", err)
	}
}

// One of two electors leads; when it stops, the other does.
func TestElector(t *testing.T) {
	table := pgtest.Schema(t) + ".leases"
	ctx := context.Background()
	var els []*Elector
	var stops []context.CancelFunc
	var dones []chan struct{}
	for _, owner := range []string{"a", "b"} {
		el, err := NewElector(testClient(t, table, owner), "leader", pglease.ElectorConfig{})
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { _ = el.Run(rctx); close(done) }()
		t.Cleanup(func() { stop(); <-done })
		els, stops, dones = append(els, el), append(stops, stop), append(dones, done)
	}
	leader := -1
	pgtest.WaitFor(t, pgtest.Patience, "a leader", func() bool {
		for i, el := range els {
			if el.IsLeader(ctx) == nil {
				leader = i
				return true
			}
		}
		return false
	})
	other := 1 - leader
	if err := els[other].IsLeader(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("IsLeader of the follower: %v; want ErrNotLeader", err)
	}
	stops[leader]()
	<-dones[leader]
	if err := els[leader].IsLeader(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("IsLeader after Run returned: %v", err)
	}
	pgtest.WaitFor(t, pgtest.Patience, "the other elector to lead", func() bool {
		return els[other].IsLeader(ctx) == nil
	})
	if _, err := NewElector(testClient(t, table, "c"), "leader", pglease.ElectorConfig{LeaseOptions: []pglease.Option{pglease.WithSlots(2)}}); !errors.As(err, new(*pglease.InvalidError)) {
		t.Fatalf("NewElector with slots: %v; want an *InvalidError", err)
	}
}

// Any job name gocron accepts runs under the Locker: names in the form of
// a slot name ("shard#1"), longer than a lease name may be, or not UTF-8
// each get a lease of their own (pglease.FitName), and two replicas'
// schedulers run each such job once per tick between them. A name that
// was a valid lease name keeps it as it was.
func TestLockerRunsEveryJobNameGocronAccepts(t *testing.T) {
	table := pgtest.Schema(t) + ".leases"
	ctx := context.Background()
	names := []string{"shard#1", "shard#2", strings.Repeat("n", 300), strings.Repeat("n", 300) + "2", "bad\xffname", "plain"}
	ran := make(chan string, 64)
	var scheds []gocron.Scheduler
	for _, owner := range []string{"a", "b"} {
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(NewLocker(testClient(t, table, owner), pglease.WithTTL(time.Minute), pglease.WithMinHold(30*time.Second))))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			_, err := s.NewJob(gocron.DurationJob(time.Hour), gocron.NewTask(func() { ran <- name }),
				gocron.WithName(name), gocron.WithStartAt(gocron.WithStartImmediately()),
				gocron.WithEventListeners(gocron.AfterLockError(func(_ uuid.UUID, name string, err error) { t.Log("lockerr", name, err) })))
			if err != nil {
				t.Fatal(err)
			}
		}
		scheds = append(scheds, s)
	}
	for _, s := range scheds {
		s.Start()
		t.Cleanup(func() { _ = s.Shutdown() })
	}
	got := map[string]int{}
	for range names {
		select {
		case name := <-ran:
			got[name]++
		case <-time.After(pgtest.Patience):
			t.Fatalf("ran %v; want each of %q once", got, names)
		}
	}
	// Both schedulers fired every job at once: the second firing of each
	// finds its lease held (WithMinHold) and skips.
	pgtest.WaitFor(t, pgtest.Patience, "both schedulers to have fired every job", func() bool {
		n := 0
		for _, s := range scheds {
			for _, j := range s.Jobs() {
				if _, err := j.LastRun(); err == nil {
					n++
				}
			}
		}
		return n == 2*len(names)
	})
	select {
	case name := <-ran:
		got[name]++
	default:
	}
	for _, name := range names {
		if got[name] != 1 {
			t.Errorf("job %q ran %d times, want once", name, got[name])
		}
	}
	infos, err := admin.List(ctx, testClient(t, table, "operator"))
	if err != nil {
		t.Fatal(err)
	}
	leases := map[string]bool{}
	for _, in := range infos {
		leases[in.Name] = true
	}
	if len(leases) != len(names) || !leases[LeasePrefix+"plain"] || leases[LeasePrefix+"shard#1"] {
		t.Errorf("leases %v: want one per job, plain's verbatim", leases)
	}
}

// Replicas that start together run a job that starts immediately once
// between them: the leader's IsLeader waits for the first election
// rather than answering "not the leader" before anyone leads, and the
// others' find the leader and skip.
func TestElectorReplicasStartingTogetherRunTheImmediateJobOnce(t *testing.T) {
	table := pgtest.Schema(t) + ".leases"
	ran := make(chan string, 8)
	var scheds []gocron.Scheduler
	for _, owner := range []string{"a", "b", "c"} {
		el, err := NewElector(testClient(t, table, owner), "leader", pglease.ElectorConfig{})
		if err != nil {
			t.Fatal(err)
		}
		s, err := gocron.NewScheduler(gocron.WithDistributedElector(el))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.NewJob(gocron.DurationJob(time.Hour), gocron.NewTask(func() { ran <- owner }),
			gocron.WithStartAt(gocron.WithStartImmediately())); err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = el.Run(ctx); close(done) }()
		t.Cleanup(func() { stop(); <-done })
		scheds = append(scheds, s)
	}
	for _, s := range scheds {
		s.Start()
		t.Cleanup(func() { _ = s.Shutdown() })
	}
	var first string
	select {
	case first = <-ran:
	case <-time.After(pgtest.Patience):
		t.Fatal("no replica ran the job that starts immediately")
	}
	pgtest.WaitFor(t, pgtest.Patience, "every scheduler to have fired the job", func() bool {
		n := 0
		for _, s := range scheds {
			for _, j := range s.Jobs() {
				if _, err := j.LastRun(); err == nil {
					n++
				}
			}
		}
		return n == len(scheds)
	})
	select {
	case again := <-ran:
		t.Errorf("the job ran on %s and again on %s", first, again)
	default:
	}
}
