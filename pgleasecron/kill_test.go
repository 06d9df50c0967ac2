//go:build unix

package pgleasecron

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/robfig/cron/v3"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/internal/pgtest"
)

// The replica processes of TestSIGKILLedReplicaLosesNoTick are this test
// binary, started with these variables.
const (
	replicaEnv = "PGLEASECRON_TEST_REPLICA" // the replica's owner
	skewEnv    = "PGLEASECRON_TEST_SKEW"    // its clock's error
	tableEnv   = "PGLEASECRON_TEST_TABLE"
	logEnv     = "PGLEASECRON_TEST_LOG" // the file each run appends to
	dsnEnv     = "PGLEASECRON_TEST_DSN"
	robfigEnv  = "PGLEASECRON_TEST_ROBFIG" // set: robfig's Cron fires the job, through Wrap
)

// replicaMain runs one replica: a job @every 1s, whose runs append "tick
// owner" to the log file and take 300 ms, so that a SIGKILL may land in a
// run. The lease is session-bound: a killed runner's lease is taken over at
// once. With robfigEnv, robfig's Cron fires the job every second through
// Wrap, each firing delayed by up to 400 ms (replicas whose firings
// disagree by a few hundred milliseconds).
func replicaMain() int {
	owner := os.Getenv(replicaEnv)
	skew, err := time.ParseDuration(os.Getenv(skewEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv(dsnEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pool.Close()
	s, err := New(pool, Config{
		Config: pglease.Config{Table: os.Getenv(tableEnv), Owner: owner, TTL: 3 * time.Second},
		Clock:  func() time.Time { return time.Now().Add(skew) },
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	logFile, err := os.OpenFile(os.Getenv(logEnv), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fn := func(ctx context.Context) error {
		tick, _ := TickOf(ctx)
		// One write(2) of a short line to an O_APPEND file: lines of
		// several processes never interleave.
		if _, err := fmt.Fprintf(logFile, "%s %s\n", tick.At.Format(time.RFC3339Nano), owner); err != nil {
			return err
		}
		sleep(ctx, 300*time.Millisecond)
		return nil
	}
	if os.Getenv(robfigEnv) != "" {
		wrap, err := s.Wrap("every-second", "@every 1s", LeaseOptions(pglease.WithFastFailover()))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		splay := func(j cron.Job) cron.Job {
			return cron.FuncJob(func() {
				time.Sleep(rand.N(400 * time.Millisecond))
				j.Run()
			})
		}
		c := cron.New(cron.WithSeconds())
		if _, err := c.AddJob("* * * * * *", cron.NewChain(splay, wrap).Then(contextJob(fn))); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		c.Start()
		<-ctx.Done()
		<-c.Stop().Done()
		return 0
	}
	if err := s.Add("every-second", "@every 1s", fn, LeaseOptions(pglease.WithFastFailover())); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := s.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// contextJob is a robfig job that wants the tick's context.
type contextJob func(context.Context) error

func (f contextJob) Run()                                 { _ = f(context.Background()) }
func (f contextJob) RunContext(ctx context.Context) error { return f(ctx) }

// Three replica processes, two with clocks 2 s off, run a job @every 1s for
// 30 ticks; the replica that ran the latest tick is SIGKILLed half-way.
// Every tick from the first to the last runs exactly once.
func TestSIGKILLedReplicaLosesNoTick(t *testing.T) {
	if testing.Short() {
		t.Skip("30 s of ticks (skipped with -short)")
	}
	killReplicaMidRun(t, false, 30, 15)
}

// The same with robfig's Cron firing the job on each replica through
// Wrap, each firing up to 400 ms late (the splay of gocron's lockers'
// double runs), for 16 ticks, the kill after 8.
func TestSIGKILLedRobfigReplicaLosesNoTick(t *testing.T) {
	if testing.Short() {
		t.Skip("16 s of ticks (skipped with -short)")
	}
	killReplicaMidRun(t, true, 16, 8)
}

func killReplicaMidRun(t *testing.T, robfig bool, total, killAt int) {
	table := tableIn(t)
	logPath := filepath.Join(t.TempDir(), "runs.log")
	procs := map[string]*exec.Cmd{}
	for i, skew := range []string{"0s", "2s", "-2s"} {
		owner := fmt.Sprintf("replica-%d", i)
		env := []string{replicaEnv + "=" + owner, skewEnv + "=" + skew, tableEnv + "=" + table,
			logEnv + "=" + logPath, dsnEnv + "=" + pgtest.DSN(t)}
		if robfig {
			env = append(env, robfigEnv+"=1")
		}
		procs[owner] = pgtest.Child(t, env...)
	}
	readLog := func() []string {
		b, err := os.ReadFile(logPath)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		var lines []string
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		return lines
	}
	var lines []string
	pgtest.WaitFor(t, 2*pgtest.Patience, fmt.Sprintf("%d runs", killAt), func() bool {
		lines = readLog()
		return len(lines) >= killAt
	})
	victim := strings.Fields(lines[len(lines)-1])[1]
	killedAt := len(lines)
	killed := time.Now()
	if err := procs[victim].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGKILLed %s after %d runs (tick %s)", victim, len(lines), strings.Fields(lines[len(lines)-1])[0])
	pgtest.WaitFor(t, 2*pgtest.Patience, fmt.Sprintf("%d runs", total), func() bool {
		lines = readLog()
		return len(lines) >= total
	})

	// Each tick of the log once, the ticks a second apart.
	seen := map[int64]int{} // by tick, in ns since the epoch
	var ticks []time.Time
	for _, l := range lines[:total] {
		at, err := time.Parse(time.RFC3339Nano, strings.Fields(l)[0])
		if err != nil {
			t.Fatal(err)
		}
		if seen[at.UnixNano()] == 0 {
			ticks = append(ticks, at)
		}
		seen[at.UnixNano()]++
	}
	doubled, lost := 0, 0
	for i, at := range ticks {
		if n := seen[at.UnixNano()]; n > 1 {
			doubled += n - 1
			t.Errorf("tick %s ran %d times", at, n)
		}
		if i > 0 {
			if gap := at.Sub(ticks[i-1]); gap != time.Second {
				lost += int(gap/time.Second) - 1
				t.Errorf("tick %s follows %s", at, ticks[i-1])
			}
		}
	}
	expected := int(ticks[len(ticks)-1].Sub(ticks[0])/time.Second) + 1
	// The first tick after the kill, run by another replica.
	takeover := "none"
	for _, l := range lines[killedAt:total] {
		f := strings.Fields(l)
		if at, err := time.Parse(time.RFC3339Nano, f[0]); err == nil && f[1] != victim && at.After(killed.Add(-time.Second)) {
			takeover = fmt.Sprintf("tick %s by %s, %v after the kill", at.Format("15:04:05"), f[1], at.Sub(killed).Round(time.Millisecond))
			break
		}
	}
	how := "library"
	if robfig {
		how = "robfig/cron through Wrap, firings splayed by up to 400 ms"
	}
	t.Logf("%s, 3 replicas (clocks 0, +2 s, -2 s), one SIGKILLed: %d ticks expected, %d run, %d doubled, %d lost; next run: %s",
		how, expected, len(ticks), doubled, lost, takeover)

	// The table agrees: one row per tick, none claimed early.
	for _, r := range newRunHistory(t, table).runs("every-second") {
		if r.ClaimedAt.Before(r.Tick) {
			t.Errorf("tick %s claimed at %s, before its instant by the server's clock", r.Tick, r.ClaimedAt)
		}
		if seen[r.Tick.UnixNano()] == 0 && r.Tick.Before(ticks[len(ticks)-1]) && r.Tick.After(ticks[0]) {
			t.Errorf("tick %s has a row (%s) but never ran", r.Tick, r.Status)
		}
		if r.Status != StatusSucceeded && r.Status != StatusRunning {
			t.Logf("tick %s: %s by %s: %s", r.Tick.Format(time.RFC3339), r.Status, r.Replica, r.Error)
		}
	}
}
