package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
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
	schema   string                     // with admin: the schema to create (default "chaos")
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
		r.schema = sc.schema
		if r.schema == "" {
			r.schema = "chaos"
		}
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
	if err := admin.Migrate(ctx, c); err != nil {
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

// scan runs one query on a fresh admin connection and scans its row into
// dest; a poll's try, it reports failure instead of failing the test.
func (r *run) scan(query string, args []any, dest ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.base)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, query, args...).Scan(dest...)
}

// patience bounds every wait of the suite for something a working system
// does within seconds (a holder appears, a process exits, a server accepts
// connections): generous on purpose, because a loaded machine (-race, two
// cores) is slow, and the tests assert what happens, not how fast.
// Properties about time are asserted against bounds derived from the
// scenario's configuration instead (see liveness).
const patience = time.Minute

// liveness is how soon after a fault heals some holder must hold each
// name again: the TTL (a lease of a vanished holder expires) plus room for
// a reconnection. The history check uses the same bound by default.
func (r *run) liveness() time.Duration { return r.sc.ttl + 5*time.Second }

// holderOf waits for a live holder process that holds name (per the
// server) and returns it with its token and the row's expiry then.
func (r *run) holderOf(name string) (p *proc, tok int64, expires time.Time) {
	r.t.Helper()
	found := pgtest.Eventually(patience, func() bool {
		var owner string
		err := r.scan(`SELECT owner, token, expires_at FROM `+pgx.Identifier{r.schema, "leases"}.Sanitize()+
			` WHERE name = $1 AND expires_at > now() + interval '300 ms'`, []any{name}, &owner, &tok, &expires)
		if err != nil {
			return false
		}
		for _, lp := range r.live() {
			if lp.owner == owner {
				p = lp
				return true
			}
		}
		return false
	})
	if !found {
		r.t.Fatalf("nobody held %q within %v\n%s", name, patience, r.stderrTails())
	}
	return p, tok, expires
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
	return pgtest.Eventually(timeout, func() bool {
		var last int64
		return r.scan(query, []any{name}, &last) == nil && last > tok
	})
}

// successor waits up to timeout until some holder recorded the acquisition
// of name with a token above tok, and returns the first such acquisition
// (the lowest token), or nil.
func (r *run) successor(name string, tok int64, timeout time.Duration) *Event {
	if !r.watch(timeout, func(e Event) bool { return e.K == KindAcquired && e.Name == name && e.Tok > tok }) {
		return nil
	}
	ev, _ := LoadDir(r.dir)
	var first *Event
	for i, e := range ev {
		if e.K == KindAcquired && e.Name == name && e.Tok > tok && (first == nil || e.Tok < first.Tok) {
			first = &ev[i]
		}
	}
	return first
}

// watch feeds f the holders' recorded events, the ones already recorded
// first, then new ones as they are written, until f returns true (watch
// reports true) or timeout has passed (false).
func (r *run) watch(timeout time.Duration, f func(Event) bool) bool {
	tl := &tail{dir: r.dir, off: map[string]int64{}}
	return pgtest.Eventually(timeout, func() bool {
		for _, e := range tl.next() {
			if f(e) {
				return true
			}
		}
		return false
	})
}

// waitEvent waits until some holder recorded an event matching f and
// returns it, or nil after timeout.
func (r *run) waitEvent(f func(Event) bool, timeout time.Duration) *Event {
	var found *Event
	r.watch(timeout, func(e Event) bool {
		if f(e) {
			found = &e
		}
		return found != nil
	})
	return found
}

// waitBeliefs waits until the holders have recorded n beliefs in all.
func (r *run) waitBeliefs(n int) {
	r.t.Helper()
	c := 0
	if r.watch(patience, func(e Event) bool {
		if e.K == KindBelief {
			c++
		}
		return c >= n
	}) {
		return
	}
	ev, _ := LoadDir(r.dir)
	var errs []string
	for _, e := range ev {
		if e.K == KindError && len(errs) < 5 {
			errs = append(errs, e.Msg)
		}
	}
	r.t.Fatalf("holders made no progress: fewer than %d beliefs in %v\nerrors: %q\n%s", n, patience, errs, r.stderrTails())
}

// progressed waits up to timeout until the holders have come through a
// fault that healed at since (Unix nanoseconds on the holders' clock), and
// reports whether they did: for every name, the server renewed or granted
// its lease after since, and a fenced write of the name committed after
// that. A renewal shows what a fault did to a held lease (it survived, or
// failing renewals will end it): a write alone could precede it.
func (r *run) progressed(since int64, timeout time.Duration) bool {
	leased := map[string]int64{}  // the first renewal or grant after since
	written := map[string]int64{} // the last committed write after since
	return r.watch(timeout, func(e Event) bool {
		if e.T < since {
			return false
		}
		switch {
		case e.K == KindRenewed || e.K == KindAcquired:
			if t, ok := leased[e.Name]; !ok || e.T < t {
				leased[e.Name] = e.T
			}
		case e.K == KindWrite && e.OK:
			written[e.Name] = max(written[e.Name], e.T)
		}
		for _, n := range r.sc.names {
			if t, ok := leased[n]; !ok || written[n] < t {
				return false
			}
		}
		return true
	})
}

// waitProgress waits until the holders have come through a fault that
// healed at since (see progressed): what a scenario waits for before its
// next fault or its end.
func (r *run) waitProgress(since int64) {
	r.t.Helper()
	if !r.progressed(since, patience) {
		r.t.Fatalf("the holders did not renew or acquire, then write, every name within %v after %s; their last errors:\n%s\nthe server's sessions:\n%s\n%s",
			patience, time.Unix(0, since).Format("15:04:05.000000"), r.lastErrors(since, 10), r.activity(), r.stderrTails())
	}
}

// lastErrors lists the last n errors the holders recorded after since.
func (r *run) lastErrors(since int64, n int) string {
	events, _ := LoadDir(r.dir)
	var errs []string
	for _, e := range events {
		if e.K == KindError && e.T >= since {
			errs = append(errs, fmt.Sprintf("  %s pid %d %s: %s", time.Unix(0, e.T).Format("15:04:05.000"), e.Pid, e.Name, e.Msg))
		}
	}
	if len(errs) > n {
		errs = errs[len(errs)-n:]
	}
	return strings.Join(errs, "\n")
}

// tail reads the holders' history files incrementally.
type tail struct {
	dir string
	off map[string]int64 // bytes of each file already read
}

// next returns the complete events appended to the history files since
// its previous call (a torn last line waits for its end).
func (tl *tail) next() []Event {
	files, _ := filepath.Glob(filepath.Join(tl.dir, "*.log"))
	var evs []Event
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		b, err := io.ReadAll(io.NewSectionReader(f, tl.off[name], 1<<62))
		f.Close()
		if err != nil {
			continue
		}
		b = b[:bytes.LastIndexByte(b, '\n')+1]
		tl.off[name] += int64(len(b))
		for _, line := range bytes.Split(b, []byte("\n")) {
			var e Event
			if len(line) > 0 && json.Unmarshal(line, &e) == nil {
				evs = append(evs, e)
			}
		}
	}
	return evs
}
