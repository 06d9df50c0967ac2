//go:build unix

package pgleasegocron

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/jonboulle/clockwork"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/internal/pgtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(replicaEnv) != "" {
		os.Exit(replicaMain())
	}
	pgtest.ExportDatabaseURL = true // for the example
	pgtest.Main(m)
}

// The replicas of the kill tests are this test binary, started with these
// variables.
const (
	replicaEnv = "PGLEASEGOCRON_TEST_REPLICA" // the replica's owner
	modeEnv    = "PGLEASEGOCRON_TEST_MODE"    // "locker" or "elector"
	offsetEnv  = "PGLEASEGOCRON_TEST_OFFSET"  // its scheduler's clock's error
	tableEnv   = "PGLEASEGOCRON_TEST_TABLE"
	logEnv     = "PGLEASEGOCRON_TEST_LOG" // the file each run appends to
	dsnEnv     = "PGLEASEGOCRON_TEST_DSN"
)

// ttl is the leases' TTL in the kill tests: what a killed replica may cost.
const ttl = 2 * time.Second

// offsetClock is the real clock off by d: a scheduler on it fires each
// second d early (or late), as a replica whose clock is off would.
type offsetClock struct {
	clockwork.Clock
	d time.Duration
}

func (c offsetClock) Now() time.Time                  { return time.Now().Add(c.d) }
func (c offsetClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c offsetClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

// replicaMain runs one replica: a gocron scheduler on an offset clock with
// a job every second (a cron job with seconds) that appends "second owner"
// to the log file, the second being the one its scheduler fired for, and
// ends in milliseconds. Its jobs go through a Locker (pglease.WithMinHold)
// or an Elector.
func replicaMain() int {
	owner := os.Getenv(replicaEnv)
	offset, err := time.ParseDuration(os.Getenv(offsetEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	c, err := pglease.Open(ctx, os.Getenv(dsnEnv), pglease.Config{Table: os.Getenv(tableEnv), Owner: owner})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	clock := offsetClock{clockwork.NewRealClock(), offset}
	opts := []gocron.SchedulerOption{gocron.WithClock(clock)}
	switch os.Getenv(modeEnv) {
	case "locker":
		opts = append(opts, gocron.WithDistributedLocker(NewLocker(c, pglease.WithTTL(ttl), pglease.WithMinHold(500*time.Millisecond))))
	case "elector":
		el, err := NewElector(c, "gocron-leader", pglease.ElectorConfig{LeaseOptions: []pglease.Option{pglease.WithTTL(ttl)}})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		done := make(chan struct{})
		go func() { _ = el.Run(ctx); close(done) }()
		defer func() { <-done }()
		opts = append(opts, gocron.WithDistributedElector(el))
	}
	s, err := gocron.NewScheduler(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	logFile, err := os.OpenFile(os.Getenv(logEnv), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_, err = s.NewJob(gocron.CronJob("* * * * * *", true), gocron.NewTask(func() {
		// One write(2) of a short line to an O_APPEND file: lines of
		// several processes never interleave.
		fmt.Fprintf(logFile, "%d %s\n", clock.Now().Round(time.Second).Unix(), owner)
	}), gocron.WithName("every-second"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s.Start()
	<-ctx.Done()
	if err := s.Shutdown(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// Three gocron schedulers on one database, their clocks 0, +150 ms and
// -150 ms off, run a job every second that ends in milliseconds; after 8
// runs the replica that ran the latest is SIGKILLed. No second runs twice,
// and the kill costs at most a few seconds — with the Locker (its lease
// kept 500 ms past a run) and with the Elector.
func TestSIGKILLedReplicaRunsNoSecondTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("two runs of 18 s of ticks (skipped with -short)")
	}
	for _, mode := range []string{"locker", "elector"} {
		t.Run(mode, func(t *testing.T) { killMidRun(t, mode) })
	}
}

func killMidRun(t *testing.T, mode string) {
	table := pgtest.Schema(t) + ".leases"
	logPath := filepath.Join(t.TempDir(), "runs.log")
	procs := map[string]*exec.Cmd{}
	for i, offset := range []string{"0s", "150ms", "-150ms"} {
		owner := fmt.Sprintf("replica-%d", i)
		procs[owner] = pgtest.Child(t, replicaEnv+"="+owner, modeEnv+"="+mode, offsetEnv+"="+offset,
			tableEnv+"="+table, logEnv+"="+logPath, dsnEnv+"="+pgtest.DSN(t))
	}
	type run struct {
		second int64
		owner  string
	}
	readLog := func() []run {
		b, err := os.ReadFile(logPath)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		var runs []run
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			var r run
			if _, err := fmt.Sscan(sc.Text(), &r.second, &r.owner); err == nil {
				runs = append(runs, r)
			}
		}
		return runs
	}
	const total, killAt = 18, 8
	var runs []run
	pgtest.WaitFor(t, 2*pgtest.Patience, fmt.Sprintf("%d runs", killAt), func() bool {
		runs = readLog()
		return len(runs) >= killAt
	})
	victim := runs[len(runs)-1].owner
	killedAt := len(runs)
	killed := time.Now()
	if err := procs[victim].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, 3*pgtest.Patience, fmt.Sprintf("%d runs", total), func() bool {
		runs = readLog()
		return len(runs) >= total
	})
	runs = runs[:total]

	seen := map[int64][]string{}
	for _, r := range runs {
		seen[r.second] = append(seen[r.second], r.owner)
	}
	first, last := runs[0].second, runs[len(runs)-1].second
	doubled, lost := 0, 0
	for s := first; s <= last; s++ {
		switch n := len(seen[s]); {
		case n == 0:
			lost++
		case n > 1:
			doubled += n - 1
			t.Errorf("second %d ran %d times: %v", s, n, seen[s])
		}
	}
	takeover := time.Duration(-1)
	for _, r := range runs[killedAt:] {
		if r.owner != victim {
			takeover = time.Unix(r.second, 0).Sub(killed)
			break
		}
	}
	// A kill costs the seconds until the lease frees (its TTL, plus the
	// 500 ms hold of the locker's last run), and a loaded machine a few
	// more; a lost second beyond that is a failure to look into.
	if maxLost := int(ttl/time.Second) + 4; lost > maxLost {
		t.Errorf("%d seconds without a run (at most %d expected): %v", lost, maxLost, runs)
	}
	t.Logf("gocron %s, 3 schedulers (clocks 0, +150 ms, -150 ms; TTL %v), %s SIGKILLed after %d runs: %d seconds, %d runs, %d doubled, %d lost; next run by another replica %v after the kill",
		mode, ttl, victim, killedAt, last-first+1, len(runs), doubled, lost, takeover.Round(time.Millisecond))
}
