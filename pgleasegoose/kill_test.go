//go:build unix

package pgleasegoose

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
	"github.com/pglease/pglease/internal/pgtest"
)

// The pods of TestSIGKILLedPodMigratesNothingTwice are this test binary,
// started with these variables.
const (
	podEnv      = "PGLEASEGOOSE_TEST_POD" // the pod's name: its owner and application_name
	gooseDSNEnv = "PGLEASEGOOSE_TEST_GOOSE_DSN"
	leaseDSNEnv = "PGLEASEGOOSE_TEST_LEASE_DSN"
	tableEnv    = "PGLEASEGOOSE_TEST_TABLE"
	ttlEnv      = "PGLEASEGOOSE_TEST_TTL"
	ffEnv       = "PGLEASEGOOSE_TEST_FF"
	ctxEnv      = "PGLEASEGOOSE_TEST_CONTEXT" // Up gets the Locker's Context
)

// slowStep is how long each even migration sleeps: the window in which a
// pod is killed.
const slowStep = 1500 * time.Millisecond

// podMain is one pod: goose Up with a Locker, its Store (and its Context
// when ctxEnv is set), printing
// "locked <unix ns>" when it holds the lease, "done <migrations applied>"
// at the end, or "lost" when Up failed with an error wrapping
// pglease.ErrLeaseLost.
func podMain() int {
	pod := os.Getenv(podEnv)
	ttl, err := time.ParseDuration(os.Getenv(ttlEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := context.Background()
	c, err := pglease.Open(ctx, os.Getenv(leaseDSNEnv), pglease.Config{Table: os.Getenv(tableEnv), Owner: pod})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	opts := []pglease.Option{pglease.WithTTL(ttl)}
	if os.Getenv(ffEnv) != "" {
		opts = append(opts, pglease.WithFastFailover())
	}
	db, err := sql.Open("pgx", os.Getenv(gooseDSNEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer db.Close()
	locker := New(c, "goose", opts...)
	store, err := locker.Store(database.DialectPostgres, "")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	p, err := goose.NewProvider(goose.DialectCustom, db, migrations(slowStep), goose.WithStore(store),
		goose.WithSessionLocker(announcing{locker}), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if os.Getenv(ctxEnv) != "" {
		var cancel context.CancelFunc
		ctx, cancel = locker.Context(ctx)
		defer cancel()
	}
	results, err := p.Up(ctx)
	if err != nil {
		if errors.Is(err, pglease.ErrLeaseLost) {
			fmt.Println("lost")
		}
		fmt.Fprintln(os.Stderr, pod+":", err)
		return 1
	}
	fmt.Printf("done %d\n", len(results))
	return 0
}

// announcing prints when its Locker has locked.
type announcing struct{ *Locker }

func (a announcing) SessionLock(ctx context.Context, conn *sql.Conn) error {
	err := a.Locker.SessionLock(ctx, conn)
	if err == nil {
		fmt.Printf("locked %d\n", time.Now().UnixNano())
	}
	return err
}

type pod struct {
	name   string
	cmd    *exec.Cmd
	stderr bytes.Buffer // what it wrote, read once it exited
	mu     sync.Mutex
	locked []time.Time
	done   bool
	lost   bool
	exited chan error
}

// startPod starts the pod name running podMain, on leases of table, its
// goose connection on gooseDSN, with extraEnv added to its environment.
func startPod(t *testing.T, name, table, gooseDSN string, ttl time.Duration, ff bool, extraEnv ...string) *pod {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	env := []string{podEnv + "=" + name, leaseDSNEnv + "=" + pgtest.DSN(t), tableEnv + "=" + table,
		gooseDSNEnv + "=" + withParams(t, gooseDSN, map[string]string{"application_name": name}), ttlEnv + "=" + ttl.String()}
	if ff {
		env = append(env, ffEnv+"=1")
	}
	cmd.Env = append(append(os.Environ(), env...), extraEnv...)
	p := &pod{name: name, cmd: cmd, exited: make(chan error, 1)}
	cmd.Stderr = &p.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			p.mu.Lock()
			switch {
			case len(f) == 2 && f[0] == "locked":
				ns, _ := strconv.ParseInt(f[1], 10, 64)
				p.locked = append(p.locked, time.Unix(0, ns))
			case len(f) == 2 && f[0] == "done":
				p.done = true
			case len(f) == 1 && f[0] == "lost":
				p.lost = true
			}
			p.mu.Unlock()
		}
		p.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
	})
	return p
}

func (p *pod) lockedAfter(t time.Time) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, at := range p.locked {
		if at.After(t) {
			return at, true
		}
	}
	return time.Time{}, false
}

// Three pods run goose Up on one database at once; the pod that holds the
// lease is SIGKILLed in the middle of a migration. Every migration is
// applied once, the killed pod's half-run migration is rolled back, and
// another pod takes over: at the lease's TTL, or at once with fast
// failover.
func TestSIGKILLedPodMigratesNothingTwice(t *testing.T) {
	for _, tc := range []struct {
		name string
		ttl  time.Duration
		ff   bool
	}{
		{"ttl", 2 * time.Second, false},
		// A TTL far longer than the test's patience: only the end of the
		// killed pod's session can free the lease in time.
		{"fast-failover", time.Minute, true},
	} {
		t.Run(tc.name, func(t *testing.T) { sigkillMidMigration(t, tc.ttl, tc.ff) })
	}
}

func sigkillMidMigration(t *testing.T, ttl time.Duration, ff bool) {
	schema := pgtest.Schema(t)
	table := schema + ".leases"
	prefix := "goosepod-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	gooseDSN := withParams(t, pgtest.DSN(t), map[string]string{
		"search_path": schema,
		// The killed pod's backend ends its transaction as soon as it
		// notices, not after its pg_sleep (see the package's failure model).
		"client_connection_check_interval": "100",
	})
	pods := map[string]*pod{}
	for i := range 3 {
		name := fmt.Sprintf("%s-%d", prefix, i)
		pods[name] = startPod(t, name, table, gooseDSN, ttl, ff)
	}

	// The victim: the pod whose migration sleeps.
	var victim string
	pgtest.WaitFor(t, 2*pgtest.Patience, "a pod in the middle of a slow migration", func() bool {
		rows := pgtest.Value[[]string](t, `SELECT coalesce(array_agg(application_name), '{}') FROM pg_stat_activity
 WHERE state = 'active' AND query LIKE '%pg_sleep%' AND application_name LIKE $1 || '-%'`, prefix)
		if len(rows) > 0 {
			victim = rows[0]
			return true
		}
		return false
	})
	killed := time.Now()
	if err := pods[victim].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}

	// Another pod takes the lease over.
	var takeover time.Duration
	pgtest.WaitFor(t, 2*pgtest.Patience, "another pod to take the lease", func() bool {
		for name, p := range pods {
			if at, ok := p.lockedAfter(killed); ok && name != victim {
				takeover = at.Sub(killed)
				return true
			}
		}
		return false
	})
	for name, p := range pods {
		select {
		case err := <-p.exited:
			if name != victim && err != nil {
				t.Errorf("pod %s: %v; its stderr:\n%s", name, err, p.stderr.String())
			}
		case <-time.After(2 * pgtest.Patience):
			t.Fatalf("pod %s did not finish", name)
		}
	}

	// Every migration once, none by the victim after it was killed; goose
	// agrees.
	type run struct {
		version int
		pod     string
	}
	var runs []run
	for _, r := range pgtest.Value[[]string](t, fmt.Sprintf(`SELECT coalesce(array_agg(version || ' ' || pod ORDER BY version), '{}') FROM %q.runs`, schema)) {
		f := strings.Fields(r)
		v, _ := strconv.Atoi(f[0])
		runs = append(runs, run{v, f[1]})
	}
	count := map[int]int{}
	for _, r := range runs {
		count[r.version]++
	}
	doubled, lost := 0, 0
	for v := 1; v <= migrationCount; v++ {
		switch n := count[v]; {
		case n == 0:
			lost++
			t.Errorf("migration %d never applied", v)
		case n > 1:
			doubled += n - 1
			t.Errorf("migration %d applied %d times: %v", v, n, runs)
		}
	}
	versions := pgtest.Value[int64](t, fmt.Sprintf(`SELECT count(DISTINCT version_id) FROM %q.goose_db_version WHERE version_id > 0`, schema))
	if versions != migrationCount {
		t.Errorf("goose's version table has %d versions, want %d", versions, migrationCount)
	}
	if ff && takeover >= ttl/2 {
		t.Errorf("fast failover: takeover took %v, not less than half the TTL (%v): the killed pod's session did not free the lease", takeover, ttl)
	}
	t.Logf("goose, 3 pods, the migrating one SIGKILLed mid-migration (TTL %v, fast failover %v): %d migrations, %d runs, %d doubled, %d lost; takeover %v after the kill",
		ttl, ff, migrationCount, len(runs), doubled, lost, takeover.Round(time.Millisecond))
}

// A pod whose lease is force-released in the middle of a migration, while
// a second pod waits for the lease: the second pod gets it and applies
// what is left, and the first stops. The migration it was running is
// rolled back (the Store's guard fails in its transaction), it starts no
// other, and its Up fails with an error wrapping pglease.ErrLeaseLost.
// goose's version table ends with each version once. The first pod
// stops at the Store's guard, or at once with the Locker's Context.
func TestForceReleasedPodStopsMigrating(t *testing.T) {
	t.Run("store", func(t *testing.T) { forceReleaseMidMigration(t) })
	t.Run("store and context", func(t *testing.T) { forceReleaseMidMigration(t, ctxEnv+"=1") })
}

func forceReleaseMidMigration(t *testing.T, env ...string) {
	schema := pgtest.Schema(t)
	table := schema + ".leases"
	prefix := "goosefr-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	gooseDSN := withParams(t, pgtest.DSN(t), map[string]string{"search_path": schema})
	const ttl = 3 * time.Second

	first := startPod(t, prefix+"-a", table, gooseDSN, ttl, false, env...)
	pgtest.WaitFor(t, 2*pgtest.Patience, "the first pod to lock", func() bool {
		_, ok := first.lockedAfter(time.Time{})
		return ok
	})
	second := startPod(t, prefix+"-b", table, gooseDSN, ttl, false, env...)
	// The first pod in its slow migration 2, the second waiting.
	pgtest.WaitFor(t, 2*pgtest.Patience, "the first pod in the middle of a slow migration", func() bool {
		return pgtest.Value[int64](t, `SELECT count(*) FROM pg_stat_activity
 WHERE state = 'active' AND query LIKE '%pg_sleep%' AND application_name = $1`, first.name) > 0
	})
	ctx := context.Background()
	released := time.Now()
	if _, err := admin.ForceRelease(ctx, testClient(t, table, "operator"), "goose"); err != nil {
		t.Fatal(err)
	}

	for _, p := range []*pod{first, second} {
		select {
		case err := <-p.exited:
			t.Logf("pod %s exited (%v); stderr:\n%s", p.name, err, p.stderr.String())
			if p == second && err != nil {
				t.Errorf("the second pod failed: %v", err)
			}
			if p == first && err == nil {
				t.Errorf("the first pod's Up succeeded after its lease was force-released")
			}
		case <-time.After(2 * pgtest.Patience):
			t.Fatalf("pod %s did not finish", p.name)
		}
	}
	if _, ok := second.lockedAfter(released); !ok {
		t.Error("the second pod did not lock after the release")
	}
	if !first.lost {
		t.Error("the first pod's Up error does not wrap pglease.ErrLeaseLost")
	}
	if !strings.Contains(first.stderr.String(), `the lease "goose" was lost`) {
		t.Errorf("the first pod's error does not say the lease was lost: %s", first.stderr.String())
	}

	versions := pgtest.Value[[]int64](t, fmt.Sprintf(`SELECT coalesce(array_agg(version_id ORDER BY id), '{}') FROM %q.goose_db_version WHERE version_id > 0`, schema))
	count := map[int64]int{}
	for _, v := range versions {
		count[v]++
	}
	for v := int64(1); v <= migrationCount; v++ {
		if count[v] != 1 {
			t.Errorf("goose's version table lists version %d %d times: %v", v, count[v], versions)
		}
	}
	// The migrations' own record: each committed once, and none by the
	// first pod after the release.
	runs := pgtest.Value[[]string](t, fmt.Sprintf(`SELECT coalesce(array_agg(version || ' ' || pod ORDER BY at), '{}') FROM %q.runs`, schema))
	ran := map[string]int{}
	byFirst := 0
	for _, r := range runs {
		f := strings.Fields(r)
		ran[f[0]]++
		if f[1] == first.name && f[0] != "1" {
			byFirst++
		}
	}
	for v := 1; v <= migrationCount; v++ {
		if n := ran[strconv.Itoa(v)]; n != 1 {
			t.Errorf("migration %d committed %d times: %v", v, n, runs)
		}
	}
	if byFirst > 0 {
		t.Errorf("the first pod committed %d migrations after migration 1 (its lease was released in migration 2): %v", byFirst, runs)
	}
	t.Logf("goose, the migrating pod's lease force-released mid-migration 2: version table %v; runs %v", versions, runs)
}
