//go:build unix

package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pglease/pglease/pgleasetest"
)

var demoFlags = []flagSpec{
	{name: "workers", kind: stringFlag, arg: "N", usage: "number of competing workers, 4 to 9 (default 4)"},
	{name: "hold", kind: durationFlag, arg: "DURATION", usage: "how long each job runs (default 1s)"},
}

const (
	demoJobCmd = "__demo-job"
	demoLease  = "nightly-report"
	demoTTL    = 5 * time.Second
	// demoGoneWatch is how long the demo watches for a killed holder's
	// job to be gone.
	demoGoneWatch = 5 * time.Second
)

// demoTimeout bounds a demo of n workers whose jobs take hold: each turn
// at most the job and a takeover by expiry, and the cluster's start.
func demoTimeout(n int, hold time.Duration) time.Duration {
	return 30*time.Second + time.Duration(n)*(hold+demoTTL)
}

// demoEvent is a line of a worker's output or its exit.
type demoEvent struct {
	worker int
	kind   string // start, end, exit, stderr, gone
	at     time.Time
	token  string
	pid    int
	text   string
	ok     bool // exit: status 0; gone: seen gone
}

type demoWorker struct {
	id   int
	cmd  *exec.Cmd
	done bool
}

func (e *env) cmdDemo(ctx context.Context, args []string) int {
	fs, code, done := e.parse("demo", args)
	if done {
		return code
	}
	if err := noArgs(fs); err != nil {
		return e.usage("demo", err)
	}
	n := demoMinWorkers
	if fs.isSet("workers") {
		v, err := strconv.Atoi(fs.str("workers"))
		if err != nil || v < demoMinWorkers || v > 9 {
			return e.usage("demo", usagef("invalid --workers %s: a number from %d to 9", quoteArg(fs.str("workers")), demoMinWorkers))
		}
		n = v
	}
	hold := fs.duration("hold", time.Second)
	if hold < 100*time.Millisecond || hold > 10*time.Second {
		return e.usage("demo", usagef("invalid --hold %s: between 100ms and 10s", fs.str("hold")))
	}
	if _, err := pgleasetest.FindBinaries(); err != nil {
		msg := err.Error()
		if !errors.Is(err, pgleasetest.ErrNoBinaries) {
			msg += "; install the PostgreSQL server (Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql)"
		}
		fmt.Fprintln(e.stderr, msg)
		return exitError
	}
	self, err := os.Executable()
	if err != nil {
		return e.fail(err)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, demoTimeout(n, hold))
	defer cancel()

	misses, code := e.runDemo(ctx, self, n, hold)
	if code != exitOK {
		return code
	}
	if len(misses) == 0 {
		fmt.Fprintf(e.stdout, "every figure keeps what pglease promises: failovers and hand-offs under %s, tokens increasing, one holder at a time\n", demoFailoverPromise)
		return exitOK
	}
	for _, m := range misses {
		fmt.Fprintf(e.stdout, "MISSED: %s. Please report this: %s\n", m, demoReportURL)
	}
	return exitError
}

// runDemo runs the demo on a cluster of its own and prints its timeline
// and its figures; it returns what missed pglease's promises.
func (e *env) runDemo(ctx context.Context, self string, n int, hold time.Duration) (misses []string, code int) {
	out := e.stdout
	began := time.Now()
	fmt.Fprintf(out, "pglease demo: %d workers compete for one job, the lease %q. Each runs\n", n, demoLease)
	fmt.Fprintf(out, "  pglease run %s --wait --fast-failover --ttl %s --owner worker-N -- <a job that takes %s>\n", demoLease, demoTTL, hold)
	fmt.Fprintf(out, "The first holder is killed with SIGKILL mid-job; a waiter takes over, finishes\n")
	fmt.Fprintf(out, "and hands the lease on; the next holder is killed too; the rest finish in turn.\n\n")
	fmt.Fprintf(out, "starting a throwaway PostgreSQL cluster... ")
	cluster, err := pgleasetest.Start(ctx, pgleasetest.Options{})
	if err != nil {
		fmt.Fprintln(out)
		if ctx.Err() != nil {
			fmt.Fprintln(e.stderr, "pglease demo: interrupted")
			return nil, 130
		}
		return nil, e.fail(err)
	}
	dir := filepath.Dir(cluster.DataDir())
	defer func() {
		err := cluster.Close()
		if err != nil {
			fmt.Fprintf(e.stderr, "pglease demo: stopping PostgreSQL: %v\n", err)
		}
		fmt.Fprintf(out, "cleaned up: workers gone, PostgreSQL stopped, %s removed (%.1fs in all)\n", dir, time.Since(began).Seconds())
	}()
	fmt.Fprintf(out, "ready on 127.0.0.1:%d in %s (%.1fs)\n\n", cluster.Port(), dir, time.Since(began).Seconds())

	d := &demo{out: out, events: make(chan demoEvent, 64), hold: hold}
	dsn := cluster.DSN("")
	for i := 1; i <= n; i++ {
		w := &demoWorker{id: i}
		w.cmd = exec.Command(self, "run", demoLease, "--wait", "--fast-failover", "--ttl", demoTTL.String(),
			"--owner", fmt.Sprintf("worker-%d", i), "--dsn", dsn, "--", self, demoJobCmd, hold.String())
		w.cmd.Env = withoutConnectionVars()
		// Own process group: Ctrl-C reaches the demo only, which then stops
		// the workers itself.
		w.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		setPdeathsig(w.cmd.SysProcAttr)
		if err := d.start(w); err != nil {
			d.stopAll()
			return nil, e.fail(err)
		}
		d.workers = append(d.workers, w)
	}
	d.t0 = time.Now()
	d.printf(d.t0, "demo", "%d workers started; one gets the lease, the others wait", n)
	run, code := d.loop(ctx)
	if code != exitOK {
		d.stopAll()
	}
	if run == nil {
		return nil, code
	}
	summary, misses := run.report()
	fmt.Fprintln(out)
	for _, s := range summary {
		fmt.Fprintln(out, s)
	}
	return misses, exitOK
}

type demo struct {
	out     io.Writer
	events  chan demoEvent
	workers []*demoWorker
	t0      time.Time
	hold    time.Duration
}

// start starts a worker and the goroutines that turn its output into events.
func (d *demo) start(w *demoWorker) error {
	stdout, err := w.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stderr, err := w.cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := w.cmd.Start(); err != nil {
		return err
	}
	lines := make(chan struct{}, 2)
	scan := func(r io.Reader, fromStderr bool) {
		defer func() { lines <- struct{}{} }()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ev := demoEvent{worker: w.id, at: time.Now(), text: sc.Text()}
			f := strings.Fields(sc.Text())
			switch {
			case fromStderr:
				ev.kind = "stderr"
			case len(f) >= 4 && f[0] == "start":
				ev.kind, ev.token = "start", f[3]
				ev.at = unixNano(f[1], ev.at)
				ev.pid, _ = strconv.Atoi(f[2])
			case len(f) >= 2 && f[0] == "end":
				ev.kind, ev.at = "end", unixNano(f[1], ev.at)
			default:
				ev.kind = "stderr"
			}
			d.events <- ev
		}
	}
	go scan(stdout, false)
	go scan(stderr, true)
	go func() {
		<-lines
		<-lines
		_ = w.cmd.Wait()
		ev := demoEvent{worker: w.id, kind: "exit", at: time.Now(), ok: w.cmd.ProcessState.Success(),
			text: fmt.Sprintf("pglease exited with status %d", w.cmd.ProcessState.ExitCode())}
		if ws, ok := w.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			ev.text = "pglease died of " + signalName(ws.Signal())
		}
		d.events <- ev
	}()
	return nil
}

func unixNano(s string, def time.Time) time.Time {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return def
	}
	return time.Unix(0, n)
}

func (d *demo) printf(at time.Time, who, format string, args ...any) {
	fmt.Fprintf(d.out, "  %+8.3fs  %-8s  %s\n", at.Sub(d.t0).Seconds(), who, fmt.Sprintf(format, args...))
}

// loop prints the timeline until every worker has exited and every killed
// holder's job was seen gone (or given up on), and returns what it saw:
// exitOK, exitError when it timed out (with what it saw until then, and
// workers that may still run) or 130 when interrupted (nothing).
func (d *demo) loop(ctx context.Context) (*demoRun, int) {
	run := &demoRun{workers: len(d.workers)}
	var (
		running = len(d.workers)
		watches int             // killed holders' jobs not yet seen gone
		tenure  = map[int]int{} // worker → index of its turn in run.tenures
		victim  int             // index of the turn the kill timer ends
		killT   <-chan time.Time
	)
	for running > 0 || watches > 0 {
		select {
		case <-ctx.Done():
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				fmt.Fprintln(d.out, "interrupted: stopping the workers")
				return nil, 130
			}
			// What it saw says what missed; the workers still run.
			fmt.Fprintln(d.out, "pglease demo: timed out: stopping the workers")
			run.problems = append(run.problems, "the demo timed out before every worker had run its job")
			return run, exitError
		case <-killT:
			killT = nil
			t := &run.tenures[victim]
			w := d.workers[t.worker-1]
			if !t.end.IsZero() || w.done {
				d.printf(time.Now(), "demo", "worker-%d's job already ended: too late to SIGKILL it mid-job", t.worker)
				continue
			}
			t.end, t.killed, t.gone = time.Now(), true, -1
			_ = w.cmd.Process.Signal(syscall.SIGKILL)
			d.printf(t.end, "demo", "SIGKILL worker-%d's pglease (pid %d) while it holds token %s", t.worker, w.cmd.Process.Pid, t.token)
			watches++
			go d.watchGone(ctx, t.worker, t.pid)
		case ev := <-d.events:
			who := fmt.Sprintf("worker-%d", ev.worker)
			switch ev.kind {
			case "start":
				note := ""
				if k := len(run.tenures); k > 0 {
					switch p := run.tenures[k-1]; {
					case p.killed:
						note = fmt.Sprintf("  failover %s after the kill", ms(ev.at.Sub(p.end)))
					case !p.end.IsZero():
						note = fmt.Sprintf("  hand-off gap %s", ms(ev.at.Sub(p.end)))
					}
				}
				tenure[ev.worker] = len(run.tenures)
				run.tenures = append(run.tenures, demoTenure{worker: ev.worker, token: ev.token, pid: ev.pid, start: ev.at})
				d.printf(ev.at, who, "acquired  token %-3s job pid %d started%s", ev.token, ev.pid, note)
				if demoKilled(len(run.tenures)) {
					victim = len(run.tenures) - 1
					killT = time.After(d.hold * 2 / 5)
				}
			case "end":
				i, ok := tenure[ev.worker]
				switch {
				case !ok:
					d.printf(ev.at, who, "%s", ev.text)
				case run.tenures[i].killed:
					d.printf(ev.at, who, "its job ended although its pglease was killed")
				default:
					run.tenures[i].end = ev.at
					d.printf(ev.at, who, "job done; pglease releases the lease")
				}
			case "gone":
				watches--
				t := &run.tenures[tenure[ev.worker]]
				if !ev.ok {
					d.printf(ev.at, who, "its job's process group is still there %s after the kill", ms(ev.at.Sub(t.end)))
					continue
				}
				t.gone = ev.at.Sub(t.end)
				d.printf(ev.at, who, "its job's whole process group is gone %s after the kill", ms(t.gone))
			case "exit":
				running--
				d.workers[ev.worker-1].done = true
				d.printf(ev.at, who, "%s", ev.text)
				if i, ok := tenure[ev.worker]; !ev.ok && !(ok && run.tenures[i].killed) {
					run.problems = append(run.problems, fmt.Sprintf("%s: %s; each worker should run its job once and exit with status 0", who, ev.text))
				}
			case "stderr":
				d.printf(ev.at, who, "%s", ev.text)
			}
		}
	}
	return run, exitOK
}

// watchGone reports when the process group pgid, a killed holder's job, is
// gone, or that it is not after demoGoneWatch.
func (d *demo) watchGone(ctx context.Context, worker, pgid int) {
	ev := demoEvent{worker: worker, kind: "gone"}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	giveUp := time.NewTimer(demoGoneWatch)
	defer giveUp.Stop()
watch:
	for {
		if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
			ev.ok = true
			break
		}
		select {
		case <-tick.C:
		case <-giveUp.C:
			break watch
		case <-ctx.Done():
			return
		}
	}
	ev.at = time.Now()
	select {
	case d.events <- ev:
	case <-ctx.Done():
	}
}

// stopAll stops the workers that are still running: SIGTERM (pglease
// forwards it to the job and releases), SIGKILL after 3 seconds.
func (d *demo) stopAll() {
	for _, w := range d.workers {
		if !w.done {
			_ = w.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.After(3 * time.Second)
	for {
		alive := 0
		for _, w := range d.workers {
			if !w.done {
				alive++
			}
		}
		if alive == 0 {
			return
		}
		select {
		case ev := <-d.events:
			if ev.kind == "exit" {
				d.workers[ev.worker-1].done = true
			}
		case <-deadline:
			for _, w := range d.workers {
				if !w.done {
					_ = w.cmd.Process.Kill()
				}
			}
			deadline = time.After(10 * time.Second)
		}
	}
}

// demoJob is the job the demo's workers run: it reports its start (with
// its token) and end on stdout.
func demoJob(ctx context.Context, args []string, stdout io.Writer) int {
	hold := time.Second
	if len(args) > 0 {
		if d, err := time.ParseDuration(args[0]); err == nil {
			hold = d
		}
	}
	fmt.Fprintf(stdout, "start %d %d %s %s\n", time.Now().UnixNano(), os.Getpid(), os.Getenv("PGLEASE_TOKEN"), os.Getenv("PGLEASE_OWNER"))
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	select {
	case <-time.After(hold):
	case <-ctx.Done():
		return 143
	}
	fmt.Fprintf(stdout, "end %d\n", time.Now().UnixNano())
	return exitOK
}
