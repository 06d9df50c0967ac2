package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/internal/pgtest"
)

func TestMain(m *testing.M) {
	if cfg := os.Getenv(EnvHolder); cfg != "" {
		os.Exit(RunHolder(cfg))
	}
	pgtest.Main(m)
}

// scenario configures one run of holder processes.
type scenario struct {
	holders  int
	names    []string
	ttl      time.Duration
	csMin    time.Duration
	csMax    time.Duration
	fast     bool   // FastFailover leases
	proxy    bool   // every holder behind a proxy of its own
	dsn      string // base DSN for holders (default pgtest.DSN)
	noNotify bool
	prepare  func(t *testing.T, r *run) // after the tables exist, before holders start
	admin    string                     // superuser DSN of another server (default: the shared cluster)
}

// proc is one holder process.
type proc struct {
	id     int
	owner  string
	cmd    *exec.Cmd
	proxy  *pgtest.Proxy
	done   chan struct{}
	err    error // exit status, valid after done
	killed bool  // we SIGKILLed it
	fast   bool  // FastFailover leases
	errLog string
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// run is a running scenario: its tables, holders and injected faults.
type run struct {
	t      *testing.T
	sc     scenario
	dir    string
	schema string
	table  string
	base   string // admin DSN (direct, superuser)

	mu     sync.Mutex
	procs  []*proc
	faults []Fault
	nextID int
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// adminExec runs sql on a short connection as the test superuser.
func adminExec(t testing.TB, dsn, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("exec %q: %v", firstLine(sql), err)
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// startRun creates the scenario's schema, lease table and resource tables,
// and starts its holder processes.
func startRun(t *testing.T, sc scenario) *run {
	t.Helper()
	if sc.ttl == 0 {
		sc.ttl = 2 * time.Second
	}
	if sc.csMax == 0 {
		sc.csMin, sc.csMax = 100*time.Millisecond, 400*time.Millisecond
	}
	if len(sc.names) == 0 {
		sc.names = []string{"job"}
	}
	r := &run{t: t, sc: sc, dir: t.TempDir(), base: sc.admin}
	if r.base == "" {
		r.base = pgtest.DSN(t)
		r.schema = pgtest.Schema(t)
	} else {
		r.schema = "chaos"
		adminExec(t, r.base, "CREATE SCHEMA "+r.schema)
	}
	r.table = r.schema + ".leases"
	if sc.dsn == "" {
		r.sc.dsn = r.base
	}
	ctx := ctxT(t, time.Minute)
	c, err := pglease.Open(ctx, r.base, pglease.Config{Table: r.table})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	adminExec(t, r.base, FenceDDL(r.schema))
	for _, n := range sc.names {
		adminExec(t, r.base, `INSERT INTO `+pgx.Identifier{r.schema, "fence"}.Sanitize()+` (name) VALUES ($1)`, n)
	}
	if sc.prepare != nil {
		sc.prepare(t, r)
	}
	for range sc.holders {
		r.spawn()
	}
	t.Cleanup(r.stopAll)
	return r
}

// bothModes runs body as two subtests: with plain leases and with
// FastFailover (session-bound) leases.
func bothModes(t *testing.T, body func(t *testing.T, fast bool)) {
	t.Run("plain", func(t *testing.T) { body(t, false) })
	t.Run("fast-failover", func(t *testing.T) { body(t, true) })
}

// modeName names a lease mode in logs.
func modeName(fast bool) string {
	if fast {
		return "fast-failover"
	}
	return "plain"
}

// spawn starts one more holder process in the scenario's lease mode.
func (r *run) spawn() *proc { return r.spawnWith(spawnOpt{fast: r.sc.fast}) }

// spawnOpt varies one holder process from its scenario.
type spawnOpt struct {
	fast    bool   // FastFailover leases
	dsn     string // default: the scenario's
	proxyTo string // put the holder behind a proxy of its own to this host:port (default with sc.proxy: the DSN's)
}

// spawnWith starts one more holder process.
func (r *run) spawnWith(o spawnOpt) *proc {
	r.mu.Lock()
	r.nextID++
	id := r.nextID
	r.mu.Unlock()
	p := &proc{id: id, owner: fmt.Sprintf("chaos-h%d-%d", id, os.Getpid()%100000), done: make(chan struct{}), fast: o.fast}
	dsn := r.sc.dsn
	if o.dsn != "" {
		dsn = o.dsn
	}
	if o.proxyTo == "" && r.sc.proxy {
		o.proxyTo = pgtest.HostPort(r.t, dsn)
	}
	if o.proxyTo != "" {
		p.proxy = pgtest.NewProxy(r.t, o.proxyTo)
		dsn = p.proxy.DSN(dsn)
	}
	hc := HolderConfig{
		DSN: dsn, Table: r.table, Fence: r.schema, Names: r.sc.names, Owner: p.owner,
		Log: filepath.Join(r.dir, fmt.Sprintf("h%d.log", id)), TTL: r.sc.ttl,
		CSMin: r.sc.csMin, CSMax: r.sc.csMax, FastFailover: o.fast,
		DisableNotify: r.sc.noNotify, MaxConns: int32(len(r.sc.names) + 2),
	}
	b, _ := json.Marshal(hc)
	p.errLog = filepath.Join(r.dir, fmt.Sprintf("h%d.stderr", id))
	ef, err := os.Create(p.errLog)
	if err != nil {
		r.t.Fatal(err)
	}
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(), EnvHolder+"="+string(b))
	p.cmd.Stdout, p.cmd.Stderr = ef, ef
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		ef.Close()
		r.t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		ef.Close()
		close(p.done)
	}()
	r.mu.Lock()
	r.procs = append(r.procs, p)
	r.mu.Unlock()
	return p
}

// live returns the holder processes still running.
func (r *run) live() []*proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*proc
	for _, p := range r.procs {
		select {
		case <-p.done:
		default:
			out = append(out, p)
		}
	}
	return out
}

// addFault records an injected fault.
func (r *run) addFault(kind string, start int64, pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = append(r.faults, Fault{Kind: kind, Start: start, End: Now(), Pid: pid})
}

// conn opens an admin connection for the test's duration.
func (r *run) conn() *pgx.Conn {
	ctx := ctxT(r.t, 10*time.Second)
	conn, err := pgx.Connect(ctx, r.base)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// holderOf waits up to timeout for a live holder process that holds name
// (per the server) and returns it with its token.
func (r *run) holderOf(name string, timeout time.Duration) (*proc, int64) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		var owner string
		var tok int64
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		conn, err := pgx.Connect(ctx, r.base)
		if err == nil {
			err = conn.QueryRow(ctx, `SELECT owner, token FROM `+pgx.Identifier{r.schema, "leases"}.Sanitize()+
				` WHERE name = $1 AND expires_at > now() + interval '300 ms'`, name).Scan(&owner, &tok)
			conn.Close(ctx)
		}
		cancel()
		if err == nil {
			for _, p := range r.live() {
				if p.owner == owner {
					return p, tok
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.t.Fatalf("nobody held %q within %v", name, timeout)
	return nil, 0
}

// waitWrite waits until a write with a token above tok was committed for
// name, and reports whether it was.
func (r *run) waitWrite(name string, tok int64, timeout time.Duration) bool {
	return r.waitNewer(`SELECT last_token FROM `+pgx.Identifier{r.schema, "fence"}.Sanitize()+` WHERE name = $1`, name, tok, timeout)
}

// waitAcquired waits until the lease row of name carries a token newer
// than tok: someone acquired it (whether or not it has written yet).
func (r *run) waitAcquired(name string, tok int64, timeout time.Duration) bool {
	return r.waitNewer(`SELECT token FROM `+pgx.Identifier{r.schema, "leases"}.Sanitize()+` WHERE name = $1`, name, tok, timeout)
}

func (r *run) waitNewer(query, name string, tok int64, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var last int64
		conn, err := pgx.Connect(ctx, r.base)
		if err == nil {
			err = conn.QueryRow(ctx, query, name).Scan(&last)
			conn.Close(ctx)
		}
		cancel()
		if err == nil && last > tok {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// waitSections waits until the holders have recorded n beliefs in all.
func (r *run) waitBeliefs(n int, timeout time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		ev, _ := LoadDir(r.dir)
		c := 0
		for _, e := range ev {
			if e.K == KindBelief {
				c++
			}
		}
		if c >= n {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	ev, _ := LoadDir(r.dir)
	var errs []string
	for _, e := range ev {
		if e.K == KindError && len(errs) < 5 {
			errs = append(errs, e.Msg)
		}
	}
	r.t.Fatalf("holders made no progress: fewer than %d beliefs in %v\nerrors: %q\n%s", n, timeout, errs, r.stderrTails())
}

func (r *run) kill(p *proc) {
	start := Now()
	p.killed = true
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	r.addFault("sigkill", start, p.pid())
}

// stopAll stops every holder: SIGCONT (in case it is paused), SIGTERM,
// and SIGKILL after a grace period.
func (r *run) stopAll() {
	procs := r.live()
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(time.Until(deadline)):
			// A holder that ignores SIGTERM is a bug: dump its goroutines
			// (SIGQUIT) into its stderr log, report it, then kill it.
			_ = p.cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-p.done:
			case <-time.After(2 * time.Second):
			}
			p.killed = true
			_ = p.cmd.Process.Kill()
			<-p.done
			tail, _ := os.ReadFile(p.errLog)
			r.t.Errorf("holder %d did not stop within 15s of SIGTERM:\n%s", p.id, tail)
		}
	}
}

func (r *run) stderrTails() string {
	var b strings.Builder
	r.mu.Lock()
	procs := append([]*proc(nil), r.procs...)
	r.mu.Unlock()
	for _, p := range procs {
		out, _ := os.ReadFile(p.errLog)
		if len(out) > 3000 {
			out = out[len(out)-3000:]
		}
		if len(out) > 0 {
			fmt.Fprintf(&b, "--- holder %d (%s) stderr:\n%s\n", p.id, p.owner, out)
		}
	}
	return b.String()
}

// finish stops the holders and checks the history.
func (r *run) finish(opt Options) Report {
	r.t.Helper()
	end := Now()
	r.stopAll()
	var problems []string
	for _, p := range r.procs {
		if p.err != nil && !p.killed {
			var ee *exec.ExitError
			if !errors.As(p.err, &ee) || ee.ExitCode() != 0 {
				problems = append(problems, fmt.Sprintf("holder %d exited: %v", p.id, p.err))
			}
		}
	}
	events, err := LoadDir(r.dir)
	if err != nil {
		r.t.Fatal(err)
	}
	writes := r.writes()
	if opt.Names == nil {
		opt.Names = r.sc.names
	}
	if opt.Liveness == 0 {
		opt.Liveness = r.sc.ttl + 5*time.Second
	}
	if opt.StaleTolerance == 0 {
		opt.StaleTolerance = r.sc.ttl / 5
	}
	opt.End = end
	r.mu.Lock()
	faults := append([]Fault(nil), r.faults...)
	if opt.FastPids == nil {
		opt.FastPids = map[int]bool{}
		for _, p := range r.procs {
			if p.fast {
				opt.FastPids[p.pid()] = true
			}
		}
	}
	r.mu.Unlock()
	rep := Check(events, writes, faults, opt)
	for _, e := range events {
		if e.K == KindError && !strings.Contains(e.Msg, "context canceled") {
			problems = append(problems, fmt.Sprintf("pid %d %s: %s", e.Pid, e.Name, e.Msg))
		}
	}
	if len(problems) > 0 {
		if len(problems) > 10 {
			problems = append(problems[:10], fmt.Sprintf("... and %d more", len(problems)-10))
		}
		r.t.Logf("errors seen by holders (not violations by themselves):\n  %s", strings.Join(problems, "\n  "))
	}
	r.t.Logf("history: %s", rep)
	if len(rep.Windows) > 0 {
		r.t.Logf("fast-failover sessions terminated by the server: the old holder's lease ended %s after the successor acquired", windowStats(rep.Windows))
	}
	if !rep.OK() {
		r.t.Errorf("the history violates the lease properties:\n%s\n%s", rep, r.stderrTails())
	}
	if rep.Sections == 0 {
		r.t.Errorf("no critical sections recorded\n%s", r.stderrTails())
	}
	return rep
}

// writes reads the committed fenced writes in commit order.
func (r *run) writes() []Write {
	ctx := ctxT(r.t, 30*time.Second)
	conn, err := pgx.Connect(ctx, r.base)
	if err != nil {
		r.t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT seq, name, token, pid FROM `+pgx.Identifier{r.schema, "writes"}.Sanitize()+` ORDER BY seq`)
	if err != nil {
		r.t.Fatal(err)
	}
	ws, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Write, error) {
		var w Write
		err := row.Scan(&w.Seq, &w.Name, &w.Token, &w.Pid)
		return w, err
	})
	if err != nil {
		r.t.Fatal(err)
	}
	return ws
}

// activity returns the server's view of every other session of the test
// database, with what it waits for and the locks it waits on: the first
// thing to read when a scenario makes no progress.
func (r *run) activity() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.base)
	if err != nil {
		return "activity: " + err.Error()
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `
SELECT a.pid, a.application_name, coalesce(a.state, ''), coalesce(a.wait_event_type || '/' || a.wait_event, ''),
       coalesce(extract(epoch FROM now() - a.state_change)::numeric(10,3)::text, ''),
       coalesce(pg_blocking_pids(a.pid)::text, ''), left(regexp_replace(coalesce(a.query, ''), '\s+', ' ', 'g'), 70)
  FROM pg_stat_activity AS a
 WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.backend_type = 'client backend'
 ORDER BY a.application_name, a.pid`)
	if err != nil {
		return "activity: " + err.Error()
	}
	var b strings.Builder
	for rows.Next() {
		var pid int
		var app, state, wait, since, blockers, query string
		if err := rows.Scan(&pid, &app, &state, &wait, &since, &blockers, &query); err != nil {
			return "activity: " + err.Error()
		}
		fmt.Fprintf(&b, "  pid %d %q %s %s for %ss blocked by %s: %s\n", pid, app, state, wait, since, blockers, query)
	}
	rows.Close()
	for _, q := range []string{
		`SELECT format('  lease %s: owner %s token %s expires in %s', name, owner, token, expires_at - now()) FROM ` + pgx.Identifier{r.schema, "leases"}.Sanitize(),
		`SELECT format('  fence %s: last token %s', name, last_token) FROM ` + pgx.Identifier{r.schema, "fence"}.Sanitize(),
	} {
		rows, err := conn.Query(ctx, q)
		if err != nil {
			return b.String() + "  " + err.Error()
		}
		for rows.Next() {
			var line string
			_ = rows.Scan(&line)
			b.WriteString(line + "\n")
		}
		rows.Close()
	}
	return b.String()
}

// windowStats summarises durations as "p50 X, max Y (n N)".
func windowStats(ds []time.Duration) string {
	if len(ds) == 0 {
		return "n/a (n 0)"
	}
	s := append([]time.Duration(nil), ds...)
	slices.Sort(s)
	return fmt.Sprintf("p50 %v, max %v (n %d)", s[len(s)/2].Round(time.Microsecond), s[len(s)-1].Round(time.Microsecond), len(s))
}
