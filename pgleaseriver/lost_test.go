package pgleaseriver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
	"github.com/pglease/pglease/internal/pgtest"
)

// lostArgs is a job of TestLostLeaseJobIsRetried: on
// its first attempt its lease is force-released, and it returns Outcome.
type lostArgs struct {
	Outcome string `json:"outcome"`
}

func (lostArgs) Kind() string { return "lost" }

// A job whose lease is lost while it runs is retried by River whatever it
// returned: nil, an error, a snooze or a cancel. Each job's lease is
// force-released on its first attempt; the job waits for its context to
// end, then returns its outcome. River records the attempt's error, which
// says the lease was lost, and runs the job again: it completes at its
// second attempt.
func TestLostLeaseJobIsRetried(t *testing.T) {
	ctx := context.Background()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t)
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		t.Fatal(err)
	}
	table := schema + ".leases"
	operator := testClient(t, table, "operator")
	mw, err := New(testClient(t, table, "worker"), Limit{Kind: "lost", Key: ArgsKey("outcome")})
	if err != nil {
		t.Fatal(err)
	}
	outcomes := map[string]error{
		"nil":    nil,
		"error":  errors.New("the job's own error"),
		"snooze": river.JobSnooze(time.Hour),
		"cancel": river.JobCancel(errors.New("the job gives up")),
	}
	ws := river.NewWorkers()
	river.AddWorker(ws, river.WorkFunc(func(ctx context.Context, j *river.Job[lostArgs]) error {
		if j.Attempt > 1 {
			return nil
		}
		l, ok := LeaseOf(ctx)
		if !ok {
			return errors.New("no lease")
		}
		if _, err := admin.ForceRelease(context.Background(), operator, l.Name()); err != nil {
			return err
		}
		if err := l.Renew(context.Background()); !errors.Is(err, pglease.ErrLeaseLost) {
			return fmt.Errorf("Renew after the force-release: %v", err)
		}
		<-ctx.Done()
		return outcomes[j.Args.Outcome]
	}))
	cfg := riverConfig(schema, ws, mw)
	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int64{}
	for outcome := range outcomes {
		res, err := client.Insert(ctx, lostArgs{Outcome: outcome}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids[outcome] = res.Job.ID
	}
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(sctx)
	})

	jobs := map[string]*rivertype.JobRow{}
	done := func() bool {
		for outcome, id := range ids {
			j, err := client.JobGet(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			jobs[outcome] = j
		}
		for _, j := range jobs {
			if j.State != rivertype.JobStateCompleted {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(2 * pgtest.Patience)
	for !done() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	for outcome, j := range jobs {
		var first string
		if len(j.Errors) > 0 {
			first = j.Errors[0].Error
		}
		t.Logf("job returning %s after its lease was lost: state %s, attempt %d, errors %d, first %q", outcome, j.State, j.Attempt, len(j.Errors), first)
		if j.State != rivertype.JobStateCompleted || j.Attempt != 2 || len(j.Errors) != 1 {
			t.Errorf("job returning %s after its lease was lost: state %s at attempt %d with %d errors; want completed at attempt 2, after one error (River retried it)", outcome, j.State, j.Attempt, len(j.Errors))
			continue
		}
		if !strings.Contains(first, `the lease "river:lost:`+outcome+`" was lost`) {
			t.Errorf("job returning %s: the attempt's error does not say the lease was lost: %s", outcome, first)
		}
		if err := outcomes[outcome]; err != nil && !strings.Contains(first, err.Error()) {
			t.Errorf("job returning %s: the attempt's error does not keep what the job returned: %s", outcome, first)
		}
	}
}

// lostError wraps the loss and keeps what the job returned, but never a
// snooze or a cancel where River would find it.
func TestLostErrorHidesSnoozeAndCancel(t *testing.T) {
	cause := fmt.Errorf("lost: %w", pglease.ErrLeaseLost)
	own := errors.New("own")
	for _, tc := range []struct {
		job    error
		wrapsJ bool
	}{
		{nil, false},
		{own, true},
		{river.JobSnooze(time.Minute), false},
		{fmt.Errorf("wrapped: %w", river.JobCancel(own)), false},
	} {
		err := lostError("river:k", 7, cause, tc.job)
		var (
			snooze *rivertype.JobSnoozeError
			cancel *rivertype.JobCancelError
		)
		if !errors.Is(err, pglease.ErrLeaseLost) || errors.As(err, &snooze) || errors.As(err, &cancel) {
			t.Errorf("lostError of %v: %v; want ErrLeaseLost, neither snooze nor cancel", tc.job, err)
		}
		if tc.job != nil && !strings.Contains(err.Error(), tc.job.Error()) {
			t.Errorf("lostError of %v: %v does not keep the job's error", tc.job, err)
		}
		if tc.wrapsJ && !errors.Is(err, tc.job) {
			t.Errorf("lostError of %v: %v does not wrap the job's error", tc.job, err)
		}
	}
}
