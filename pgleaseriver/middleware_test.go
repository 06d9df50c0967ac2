package pgleaseriver

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"

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

func TestNewRefusesBadLimits(t *testing.T) {
	for _, limits := range [][]Limit{
		{{}},
		{{Kind: "a"}, {Kind: "a"}},
		{{Kind: "a", Slots: -1}},
	} {
		if _, err := New(nil, limits...); err == nil {
			t.Errorf("New(%+v) succeeded", limits)
		}
	}
}

func TestArgsKey(t *testing.T) {
	key := ArgsKey("account")
	for args, want := range map[string]string{`{"account":"acme"}`: "acme", `{"account":42}`: "42", `{"account":1.5,"x":1}`: "1.5"} {
		got, err := key(&rivertype.JobRow{EncodedArgs: []byte(args)})
		if err != nil || got != want {
			t.Errorf("ArgsKey of %s: %q, %v; want %q", args, got, err, want)
		}
	}
	for _, args := range []string{`{}`, `{"account":null}`, `{"account":[1]}`, `not json`} {
		if got, err := key(&rivertype.JobRow{EncodedArgs: []byte(args)}); err == nil {
			t.Errorf("ArgsKey of %s: %q, no error", args, got)
		}
	}
}

// A job of a limit runs under its lease (LeaseOf); a job that finds the
// limit reached is snoozed, not run; keys limit apart; other kinds run
// freely; a lease lost while the job runs makes Work fail.
func TestWork(t *testing.T) {
	table := pgtest.Schema(t) + ".leases"
	ctx := context.Background()
	a, err := New(testClient(t, table, "a"), Limit{Kind: "mutex"}, Limit{Kind: "keyed", Key: ArgsKey("k")},
		Limit{Kind: "pair", Slots: 2, Snooze: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(testClient(t, table, "b"), Limit{Kind: "mutex"}, Limit{Kind: "keyed", Key: ArgsKey("k")},
		Limit{Kind: "pair", Slots: 2, Snooze: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	job := func(kind, args string) *rivertype.JobRow {
		return &rivertype.JobRow{ID: 1, Kind: kind, EncodedArgs: []byte(args)}
	}
	// within runs fn while m works job, and returns what Work returned.
	within := func(m *Middleware, j *rivertype.JobRow, fn func(ctx context.Context) error) error {
		return m.Work(ctx, j, fn)
	}
	snoozed := func(err error, d time.Duration) bool {
		var se *rivertype.JobSnoozeError
		return errors.As(err, &se) && se.Duration == d
	}
	ran := false
	err = within(a, job("mutex", `{}`), func(ctx context.Context) error {
		l, ok := LeaseOf(ctx)
		if !ok || l.Name() != LeasePrefix+"mutex" || l.Token() <= 0 {
			t.Errorf("LeaseOf: %v %v", l, ok)
		}
		if err := within(b, job("mutex", `{}`), func(context.Context) error { ran = true; return nil }); !snoozed(err, DefaultSnooze) {
			t.Errorf("a second mutex job: %v; want a snooze of %v", err, DefaultSnooze)
		}
		// Another key, another kind: they run.
		if err := within(b, job("keyed", `{"k":"x"}`), func(context.Context) error {
			return within(a, job("keyed", `{"k":"y"}`), func(context.Context) error { return nil })
		}); err != nil {
			t.Errorf("two keys: %v", err)
		}
		if err := within(b, job("free", `{}`), func(ctx context.Context) error {
			if _, ok := LeaseOf(ctx); ok {
				t.Error("a job of no limit has a lease")
			}
			return nil
		}); err != nil {
			t.Errorf("a job of no limit: %v", err)
		}
		return nil
	})
	if err != nil || ran {
		t.Fatalf("mutex: %v (second job ran: %v)", err, ran)
	}
	// Two slots: a third job is snoozed by its own Snooze.
	err = within(a, job("pair", `{}`), func(context.Context) error {
		return within(b, job("pair", `{}`), func(context.Context) error {
			if err := within(b, job("pair", `{}`), func(context.Context) error { return nil }); !snoozed(err, 50*time.Millisecond) {
				t.Errorf("a third job of two slots: %v; want a snooze of 50ms", err)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	// A lease lost while the job runs: its context ends, and Work fails.
	operator := testClient(t, table, "operator")
	err = within(a, job("mutex", `{}`), func(ctx context.Context) error {
		l, _ := LeaseOf(ctx)
		if _, err := admin.ForceRelease(context.Background(), operator, l.Name()); err != nil {
			t.Fatal(err)
		}
		_ = l.Renew(context.Background())
		select {
		case <-ctx.Done():
		case <-time.After(pgtest.Patience):
			t.Error("the job's context did not end with its lease")
		}
		return nil
	})
	if !errors.Is(err, pglease.ErrLeaseLost) {
		t.Fatalf("Work with a lost lease: %v; want ErrLeaseLost", err)
	}
}

// Any kind and key River accepts work: a key in the form of a slot's name
// ("order#12"), a key longer than a lease name may be, each limits its
// jobs apart under a lease of its own (LeaseName, pglease.FitName); a
// key that made a valid name keeps it. Snooze: SnoozeNow makes a job that
// finds its limit reached available again at once, 0 is DefaultSnooze.
func TestWorkTakesEveryKeyRiverAccepts(t *testing.T) {
	table := pgtest.Schema(t) + ".leases"
	ctx := context.Background()
	limits := []Limit{{Kind: "keyed", Key: ArgsKey("k"), Snooze: SnoozeNow}, {Kind: "pool", Key: ArgsKey("k"), Slots: 3}}
	a, err := New(testClient(t, table, "a"), limits...)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(testClient(t, table, "b"), limits...)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("k", 300)
	for _, kind := range []string{"keyed", "pool"} {
		for _, key := range []string{"order#12", "order#13", long, long + "2", "plain"} {
			j := &rivertype.JobRow{ID: 7, Kind: kind, EncodedArgs: []byte(`{"k":"` + key + `"}`)}
			ran := false
			err := a.Work(ctx, j, func(ctx context.Context) error {
				ran = true
				l, _ := LeaseOf(ctx)
				if want := LeaseName(kind, key, true, map[string]int{"keyed": 0, "pool": 3}[kind]); l == nil || !strings.HasPrefix(l.Name(), want) {
					t.Errorf("%s %q runs under %v, want %s", kind, key, l, want)
				}
				if kind == "keyed" {
					var se *rivertype.JobSnoozeError
					if err := b.Work(ctx, j, func(context.Context) error { return nil }); !errors.As(err, &se) || se.Duration != 0 {
						t.Errorf("a second job of key %q: %v; want a snooze of 0 (SnoozeNow)", key, err)
					}
				}
				return nil
			})
			if err != nil || !ran {
				t.Errorf("%s job of key %q: ran %v, %v", kind, key, ran, err)
			}
		}
	}
	if got := LeaseName("keyed", "plain", true, 0); got != LeasePrefix+"keyed:plain" {
		t.Errorf("LeaseName of a valid key: %q, want it verbatim", got)
	}
	if got := snooze(0); got != DefaultSnooze {
		t.Errorf("Snooze 0 snoozes %v, want DefaultSnooze", got)
	}
}
