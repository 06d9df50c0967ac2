package chaos

// Ending a run and judging it: stopping the processes, checking the
// history, and what a failure report shows.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

func (r *run) kill(p *proc) {
	start := Now()
	p.killed = true
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	r.addFault("sigkill", start, p.pid())
}

// stopAll stops every holder: SIGCONT (in case it is paused), SIGTERM,
// and SIGKILL if it has not exited after patience.
func (r *run) stopAll() {
	procs := r.live()
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.Now().Add(patience)
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
			r.t.Errorf("holder %d did not stop within %v of SIGTERM:\n%s", p.id, patience, tail)
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

// finish stops the holders and checks the history: a violation fails the
// test.
func (r *run) finish(opt Options) Report {
	r.t.Helper()
	rep, _ := r.check(opt)
	r.judge(rep)
	return rep
}

// judge fails the test if rep shows a violation or no critical section,
// and saves the history for the external checker (PGLEASE_HISTORY_DIR).
func (r *run) judge(rep Report) {
	r.t.Helper()
	r.saveHistory()
	if !rep.OK() {
		r.t.Errorf("the history violates the lease properties:\n%s\n%s", rep, r.stderrTails())
	}
	if rep.Sections == 0 {
		r.t.Errorf("no critical sections recorded\n%s", r.stderrTails())
	}
}

// check stops the holders and checks the history; it returns the report
// and the events without judging them.
func (r *run) check(opt Options) (Report, []Event) {
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
	return rep, events
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
