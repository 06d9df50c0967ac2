package pglease

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
	"github.com/pglease/pglease/internal/store"
)

// The options each call takes, as the documentation states them: the
// columns (one option each, with a valid value) and, per row of calls,
// the columns it refuses. Every other cell is allowed.
var (
	ruleColumns = []struct {
		name string
		opt  Option
	}{
		{"WithTTL", WithTTL(20 * time.Second)},
		{"WithMinHold", WithMinHold(time.Second)},
		{"WithMaxHold", WithMaxHold(time.Minute)},
		{"WithMetadata", WithMetadata(map[string]any{"job": "rules"})},
		{"WithFastFailover", WithFastFailover()},
		{"WithSlots", WithSlots(3)},
		{"WithShared", WithShared()},
		{"WithQuota", WithQuota(5, 2)},
	}
	ruleRefusals = map[string][]string{
		"Acquire":    nil,                                                          // and TryAcquire, Run, TryRun
		"AcquireAll": {"WithFastFailover", "WithSlots", "WithShared", "WithQuota"}, // and TryAcquireAll
		"NewElector": {"WithSlots", "WithShared", "WithQuota"},
	}
)

// ruleCall is a public call that takes options, in the row of rules it
// belongs to. call acquires with opts under names starting with prefix
// and releases what it got; it returns the call's error.
type ruleCall struct {
	name, row string
	call      func(ctx context.Context, c *Client, prefix string, opts []Option) error
}

var ruleCalls = []ruleCall{
	{"Acquire", "Acquire", func(ctx context.Context, c *Client, prefix string, opts []Option) error {
		l, err := c.Acquire(ctx, prefix, opts...)
		if err == nil {
			err = l.Release(ctx)
		}
		return err
	}},
	{"TryAcquire", "Acquire", func(ctx context.Context, c *Client, prefix string, opts []Option) error {
		l, err := c.TryAcquire(ctx, prefix, opts...)
		if err == nil {
			err = l.Release(ctx)
		}
		return err
	}},
	{"Run", "Acquire", func(ctx context.Context, c *Client, prefix string, opts []Option) error {
		return c.Run(ctx, prefix, ran, opts...)
	}},
	{"TryRun", "Acquire", func(ctx context.Context, c *Client, prefix string, opts []Option) error {
		return c.TryRun(ctx, prefix, ran, opts...)
	}},
	{"AcquireAll", "AcquireAll", func(ctx context.Context, c *Client, prefix string, opts []Option) error {
		s, err := c.AcquireAll(ctx, []string{prefix + "-a", prefix + "-b"}, opts...)
		if err == nil {
			err = s.Release(ctx)
		}
		return err
	}},
	{"TryAcquireAll", "AcquireAll", func(ctx context.Context, c *Client, prefix string, opts []Option) error {
		s, err := c.TryAcquireAll(ctx, []string{prefix + "-a", prefix + "-b"}, opts...)
		if err == nil {
			err = s.Release(ctx)
		}
		return err
	}},
	{"NewElector", "NewElector", func(ctx context.Context, c *Client, prefix string, opts []Option) error {
		elected := make(chan struct{})
		e, err := c.NewElector(prefix, func(ctx context.Context) error {
			close(elected)
			<-ctx.Done()
			return nil
		}, ElectorConfig{LeaseOptions: opts})
		if err != nil {
			return err
		}
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- e.Run(rctx) }()
		select {
		case <-elected:
		case err := <-done:
			stop()
			return errors.Join(errors.New("Run returned before it was elected"), err)
		case <-time.After(patience):
			stop()
			<-done
			return errors.New("not elected")
		}
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	}},
}

// ran is a Run's function: the lease was acquired.
func ran(context.Context) error { return nil }

// Every cell of the call × option rules, walked through the public calls:
// a refused option is an *InvalidError of kind "argument" naming it,
// returned before anything is written (no row of the lease or waiters
// table); an allowed one is accepted (the lease, the set or the elected
// term is had, and released). Two kinds (WithShared, WithSlots,
// WithQuota) together are refused by every call.
func TestCallOptionRules(t *testing.T) {
	ctx := testCtx(t)
	c := testClient(t, Config{})
	if err := c.migrate(ctx); err != nil {
		t.Fatal(err)
	}
	written := func(prefix string) (rows, waiters int) {
		t.Helper()
		rows = pgtest.Value[int](t, `SELECT count(*) FROM `+c.st.Names.QualifiedTable()+
			` WHERE starts_with("name", $1) OR starts_with("semaphore", $1)`, prefix)
		waiters = pgtest.Value[int](t, `SELECT count(*) FROM `+c.st.Names.QualifiedWaiters()+` WHERE starts_with("name", $1)`, prefix)
		return rows, waiters
	}
	type cell struct {
		option string
		opts   []Option
		refuse bool
		says   string // what the refusal's message says
	}
	for _, call := range ruleCalls {
		var cells []cell
		for _, col := range ruleColumns {
			cells = append(cells, cell{col.name, []Option{col.opt}, slices.Contains(ruleRefusals[call.row], col.name), col.name})
		}
		cells = append(cells, cell{"WithShared+WithSlots", []Option{WithShared(), WithSlots(2)}, true, "do not combine"},
			cell{"WithQuota+WithShared", []Option{WithQuota(3, 1), WithShared()}, true, "do not combine"},
			cell{"WithSlots+WithQuota", []Option{WithSlots(2), WithQuota(3, 1)}, true, "do not combine"})
		for _, cl := range cells {
			t.Run(call.name+"/"+cl.option, func(t *testing.T) {
				prefix := strings.ToLower(call.name + "-" + strings.ReplaceAll(cl.option, "+", "-"))
				err := call.call(ctx, c, prefix, cl.opts)
				if !cl.refuse {
					if err != nil {
						t.Fatalf("%s with %s: %v, want it accepted", call.name, cl.option, err)
					}
					return
				}
				var ie *InvalidError
				if !errors.As(err, &ie) || ie.Kind != kindArgument || !strings.HasPrefix(err.Error(), "pglease: invalid argument: ") ||
					!strings.Contains(err.Error(), cl.says) {
					t.Fatalf("%s with %s: %v, want an *InvalidError of kind %q saying %q", call.name, cl.option, err, kindArgument, cl.says)
				}
				if rows, waiters := written(prefix); rows != 0 || waiters != 0 {
					t.Fatalf("%s with %s was refused after writing %d lease row(s) and %d waiter row(s)", call.name, cl.option, rows, waiters)
				}
			})
		}
	}
}

// The rules that checkOptions applies (optionRules) are the documented
// ones TestCallOptionRules walks: the same columns in the same order, the
// same refused cells, and a reason for each.
func TestOptionRulesAsDocumented(t *testing.T) {
	if len(ruleColumns) != int(numOptionIDs) {
		t.Fatalf("%d columns of rules, the test walks %d", numOptionIDs, len(ruleColumns))
	}
	for i, col := range ruleColumns {
		if optionNames[i] != col.name {
			t.Fatalf("column %d is %s, the test walks %s there", i, optionNames[i], col.name)
		}
	}
	rows := map[entry]string{entryAcquire: "Acquire", entrySet: "AcquireAll", entryElector: "NewElector"}
	if len(rows) != int(numEntries) {
		t.Fatalf("%d rows of rules, the test knows %d", numEntries, len(rows))
	}
	for e, row := range rows {
		for i, why := range optionRules[e].cells {
			want := slices.Contains(ruleRefusals[row], optionNames[i])
			if refused := why != allowed; refused != want {
				t.Errorf("%s with %s: refused %v (%q), documented %v", row, optionNames[i], refused, why, want)
			}
		}
	}
}

// A kind is named the same way wherever it is met: what an acquisition
// asks for and what the store reports as refusing it.
func TestKindNames(t *testing.T) {
	for _, tc := range []struct {
		got  leaseKind
		want string
	}{
		{leaseOptions{}.kind(), "plain lease"},
		{leaseOptions{slots: 1}.kind(), "plain lease"},
		{leaseOptions{slots: 3}.kind(), "semaphore of 3 slots"},
		{leaseOptions{shared: true}.kind(), "shared lease"},
		{clashKind(store.Clash{Kind: store.RowPlain}), "plain lease"},
		{clashKind(store.Clash{Kind: store.RowShared}), "shared lease"},
		{clashKind(store.Clash{Kind: store.RowSemaphore, Size: 3}), "semaphore of 3 slots"},
		{leaseOptions{quota: 10, weight: 3}.kind(), "quota of 10 units"},
		{clashKind(store.Clash{Kind: store.RowQuota, Size: 10}), "quota of 10 units"},
		{clashKind(store.Clash{Kind: "later", Size: 4}), "later of 4 units"},
		{leaseKind{word: "quota", size: 10, unit: "units"}, "quota of 10 units"},
	} {
		if tc.got.String() != tc.want {
			t.Errorf("%+v is %q, want %q", tc.got, tc.got, tc.want)
		}
	}
	err := &KindError{Name: "pool", Want: "plain lease", Have: "semaphore of 3 slots"}
	if got, want := err.Error(), `pglease: "pool" is held as a semaphore of 3 slots, and this client asked for a plain lease: use the same kind of lease (WithSlots, WithShared, WithQuota) on every client of a name, or wait until its leases are released`; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
}

// What each kind of lease decides for the acquisition engine: the rows it
// contends for, its units, how a wait of it queues, whether its leases
// keep their local slot, and its name in a *KindError; and which kind each
// call and its options resolve to.
func TestKindsDecide(t *testing.T) {
	for _, tc := range []struct {
		kind  string
		e     entry
		o     leaseOptions
		want  kind
		rows  []string
		units int
		queue queueMode
		keeps bool
		words string
	}{
		{"plain", entryAcquire, leaseOptions{}, kindPlain{}, []string{"job"}, 1, queues, true, "plain lease"},
		{"plain, WithSlots(1)", entryAcquire, leaseOptions{slots: 1}, kindPlain{}, []string{"job"}, 1, queues, true, "plain lease"},
		{"plain, an elector's", entryElector, leaseOptions{}, kindPlain{}, []string{"job"}, 1, queues, true, "plain lease"},
		{"slot", entryAcquire, leaseOptions{slots: 3}, kindSlot{}, []string{"job#0", "job#1", "job#2"}, 3, unqueued, true, "semaphore of 3 slots"},
		{"shared", entryAcquire, leaseOptions{shared: true}, kindShared{}, []string{"job"}, 1, listed, false, "shared lease"},
		{"quota", entryAcquire, leaseOptions{quota: 10, weight: 3}, kindQuota{}, []string{"job"}, 1, listed, false, "quota of 10 units"},
		{"set", entrySet, leaseOptions{}, kindSet{}, []string{"job"}, 1, unqueued, true, "plain lease"},
	} {
		k := kindOf(tc.e, &tc.o)
		if k != tc.want {
			t.Errorf("%s: kind %T, want %T", tc.kind, k, tc.want)
			continue
		}
		rows := k.rows("job", &tc.o)
		if !slices.Equal(rows, tc.rows) {
			t.Errorf("%s: rows %q, want %q", tc.kind, rows, tc.rows)
		}
		units := k.units(rows)
		var flat []string
		for _, u := range units {
			flat = append(flat, u...)
		}
		slices.Sort(flat)
		if len(units) != tc.units || !slices.Equal(flat, tc.rows) {
			t.Errorf("%s: units %q of rows %q, want %d units covering each row once", tc.kind, units, rows, tc.units)
		}
		if q := k.queue(); q != tc.queue {
			t.Errorf("%s: queue mode %d, want %d", tc.kind, q, tc.queue)
		}
		if keeps := k.keepsLocalSlot(); keeps != tc.keeps {
			t.Errorf("%s: keeps its local slot %v, want %v", tc.kind, keeps, tc.keeps)
		}
		if w := k.words(&tc.o).String(); w != tc.words || tc.e == entryAcquire && tc.o.kind().String() != tc.words {
			t.Errorf("%s: named %q (options: %q), want %q", tc.kind, w, tc.o.kind(), tc.words)
		}
	}
	// A set's names are attempted together, by one statement.
	if units := (kindSet{}).units([]string{"a", "b"}); len(units) != 1 || !slices.Equal(units[0], []string{"a", "b"}) {
		t.Errorf("a set's units %q, want one of both names", units)
	}
}
