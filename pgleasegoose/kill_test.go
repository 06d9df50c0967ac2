//go:build unix

package pgleasegoose

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/pglease/pglease"
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
)

// slowStep is how long each even migration sleeps: the window in which a
// pod is killed.
const slowStep = 1500 * time.Millisecond

// podMain is one pod: goose Up with a Locker, printing "locked <unix ns>"
// when it holds the lease and "done <migrations applied>" at the end.
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
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations(slowStep),
		goose.WithSessionLocker(announcing{New(c, "goose", opts...)}), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	results, err := p.Up(ctx)
	if err != nil {
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
	mu     sync.Mutex
	locked []time.Time
	done   bool
	exited chan error
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
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		env := []string{podEnv + "=" + name, leaseDSNEnv + "=" + pgtest.DSN(t), tableEnv + "=" + table,
			gooseDSNEnv + "=" + withParams(t, gooseDSN, map[string]string{"application_name": name}), ttlEnv + "=" + ttl.String()}
		if ff {
			env = append(env, ffEnv+"=1")
		}
		cmd.Env = append(os.Environ(), env...)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		p := &pod{name: name, cmd: cmd, exited: make(chan error, 1)}
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
				}
				p.mu.Unlock()
			}
			p.exited <- cmd.Wait()
		}()
		pods[name] = p
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
		})
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
				t.Errorf("pod %s: %v", name, err)
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
