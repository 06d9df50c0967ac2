package pglease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
	"github.com/pglease/pglease/internal/store"
)

// stallSession occupies c's session loop with an operation that waits
// until the returned function is called, so that operations queue up
// behind it.
func stallSession(t *testing.T, c *Client) (resume func()) {
	t.Helper()
	s, err := c.session()
	if err != nil {
		t.Fatal(err)
	}
	entered, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- s.do(context.Background(), time.Minute, func(ctx context.Context, _ store.Querier, _ *sessState) error {
			close(entered)
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	pgtest.Receive(t, entered, "the session loop to run the stalling operation")
	var once sync.Once
	resume = func() {
		once.Do(func() {
			close(release)
			if err := pgtest.Receive(t, done, "the stalling operation to end"); err != nil {
				t.Errorf("stalling operation: %v", err)
			}
		})
	}
	t.Cleanup(resume)
	return resume
}

// queuedAcquisitions returns the names of the acquisitions queued on c's
// session, in order.
func queuedAcquisitions(c *Client) []string {
	c.conn.sess.Load().mu.Lock()
	defer c.conn.sess.Load().mu.Unlock()
	var names []string
	for _, op := range c.conn.sess.Load().ops {
		if op.acquire != nil {
			names = append(names, op.acquire.args.Name)
		}
	}
	return names
}

// batchLog records the batches a client's session runs.
type batchLog struct {
	mu    sync.Mutex
	sizes []int
	errs  []error
}

func logBatches(t *testing.T) *batchLog {
	b := &batchLog{}
	hook := func(size int, err error) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.sizes = append(b.sizes, size)
		b.errs = append(b.errs, err)
	}
	testHookBatch.Store(&hook)
	t.Cleanup(func() { testHookBatch.Store(nil) })
	return b
}

func (b *batchLog) get() ([]int, []error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.sizes...), append([]error(nil), b.errs...)
}

// tryAcquireQueued starts a fast-failover TryAcquire of each name, in
// order, each once the previous one is queued on the stalled session, and
// returns their outcomes, delivered once the session resumes.
func tryAcquireQueued(t *testing.T, ctx context.Context, c *Client, names []string) []chan acquired {
	t.Helper()
	out := make([]chan acquired, len(names))
	for i, name := range names {
		out[i] = make(chan acquired, 1)
		go func() {
			l, err := c.TryAcquire(ctx, name, WithFastFailover(), WithTTL(time.Minute))
			out[i] <- acquired{l, err}
		}()
		pgtest.WaitFor(t, patience, fmt.Sprintf("the acquisition of %q to queue", name), func() bool {
			return len(queuedAcquisitions(c)) == i+1
		})
	}
	return out
}

type acquired struct {
	l   *Lease
	err error
}

// sessionLocks counts the session advisory locks that backend pid holds
// besides its session and client locks: none, however many leases it
// holds (a lease is bound by the session lock alone).
func sessionLocks(t *testing.T, pid int32) int {
	t.Helper()
	// Less the client and session locks and the bell, which the session
	// holds for as long as it lives.
	return pgtest.Value[int](t, `SELECT count(*)::int FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND granted AND pid = $1`, pid) - 3
}

// Fast-failover acquisitions queued on a client's session run as one
// batch, one transaction (every row has the same acquisition time, which
// is the transaction's start), and each gets its own result: a valid
// session-bound lease with a token of its own, or the holder of a name
// held elsewhere.
func TestConcurrentFastFailoverAcquisitionsAreBatched(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	other := testClient(t, Config{Table: c.cfg.Table, Owner: "other"})
	h, err := other.TryAcquire(ctx, "held", WithFastFailover(), WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	if err := c.prepare(ctx); err != nil {
		t.Fatal(err)
	}
	batches := logBatches(t)
	resume := stallSession(t, c)
	const n = 20
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("b-%02d", i)
	}
	names[n/2] = "held"
	results := tryAcquireQueued(t, ctx, c, names)
	resume()
	tokens := map[int64]string{}
	var leases []*Lease
	for i, ch := range results {
		r := pgtest.Receive(t, ch, "an acquisition's result")
		if names[i] == "held" {
			var he *HeldError
			if !errors.As(r.err, &he) || he.Holder.Token != h.Token() || !he.Holder.FastFailover {
				t.Errorf("held: %v, want the session-bound holder %d", r.err, h.Token())
			}
			continue
		}
		if r.err != nil {
			t.Fatalf("%s: %v", names[i], r.err)
		}
		l := r.l
		leases = append(leases, l)
		if causeOf(l.Context()) != nil || !l.session || l.epoch != c.conn.sess.Load().currentEpoch() {
			t.Errorf("%s: err %v, session-bound %v, epoch %d", l.Name(), causeOf(l.Context()), l.session, l.epoch)
		}
		if prev, dup := tokens[l.Token()]; dup {
			t.Errorf("%s and %s share token %d", prev, l.Name(), l.Token())
		}
		tokens[l.Token()] = l.Name()
	}
	if sizes, errs := batches.get(); len(sizes) != 1 || sizes[0] != n || errs[0] != nil {
		t.Fatalf("batches %v (errors %v), want one of %d", sizes, errs, n)
	}
	var stamps, pids int
	var pid int32
	pgtest.QueryRow(t, `SELECT count(DISTINCT "acquired_at")::int, count(DISTINCT "session_pid")::int, max("session_pid")
		FROM `+rows(t, c).Name()+` WHERE "name" LIKE 'b-%'`, nil, &stamps, &pids, &pid)
	if stamps != 1 || pids != 1 {
		t.Fatalf("%d acquisition times, %d sessions: want one transaction on one session", stamps, pids)
	}
	if got := sessionLocks(t, pid); got != 0 {
		t.Fatalf("the session holds %d advisory locks besides its own three, want none", got)
	}
	for _, l := range leases {
		if err := l.Renew(ctx); err != nil {
			t.Fatalf("renew %s: %v", l.Name(), err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// When one statement of a batch fails (a lock timeout on a row that a
// guarded transaction has locked: a fast-failover holder's, which an
// attempt must lock to see whether its session ended; a plain live row
// it only reads), the batch is rolled back, the session
// locks its statements took are given back, and its acquisitions run one
// by one: each gets the result it would have had alone, and no session
// lock is left over.
func TestFailedBatchRunsItsAcquisitionsAlone(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	holder := testClient(t, Config{Table: c.cfg.Table, Owner: "holder"})
	b, err := holder.TryAcquire(ctx, "busy", WithTTL(time.Minute), WithFastFailover())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx)
	tx, err := pgtest.Pool(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if err := b.Guard(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if err := c.prepare(ctx); err != nil {
		t.Fatal(err)
	}
	batches := logBatches(t)
	resume := stallSession(t, c)
	names := []string{"f-0", "f-1", "busy", "f-2", "f-3"}
	results := tryAcquireQueued(t, ctx, c, names)
	resume()
	var leases []*Lease
	for i, ch := range results {
		r := pgtest.Receive(t, ch, "an acquisition's result")
		if names[i] == "busy" {
			if !errors.Is(r.err, ErrNotAcquired) {
				t.Errorf("busy: %v, want ErrNotAcquired", r.err)
			}
			continue
		}
		if r.err != nil {
			t.Fatalf("%s: %v", names[i], r.err)
		}
		if !r.l.session || causeOf(r.l.Context()) != nil {
			t.Errorf("%s: session-bound %v, err %v", names[i], r.l.session, causeOf(r.l.Context()))
		}
		leases = append(leases, r.l)
	}
	sizes, errs := batches.get()
	if len(sizes) != 1 || sizes[0] != len(names) || store.Classify(errs[0]) != store.KindLockTimeout {
		t.Fatalf("batches %v (errors %v), want one of %d that failed with a lock timeout", sizes, errs, len(names))
	}
	var pid int32
	pgtest.QueryRow(t, `SELECT max("session_pid") FROM `+rows(t, c).Name()+` WHERE "name" LIKE 'f-%'`, nil, &pid)
	if got := sessionLocks(t, pid); got != 0 {
		t.Fatalf("the session holds %d advisory locks besides its own three, want none (a failed batch leaves nothing)", got)
	}
	if r, _ := rows(t, c).Get("busy"); r.Owner != "holder" || r.Token != b.Token() {
		t.Fatalf("busy's row: %+v", r)
	}
	for _, l := range leases {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
