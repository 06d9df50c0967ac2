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

	"github.com/pglease/pglease/internal/pgcluster"
)

var demoFlags = []flagSpec{
	{name: "workers", kind: stringFlag, arg: "N", usage: "number of competing workers, 3 to 9 (default 3)"},
	{name: "hold", kind: durationFlag, arg: "DURATION", usage: "how long each job runs (default 1s)"},
}

const (
	demoJobCmd  = "__demo-job"
	demoLease   = "nightly-report"
	demoTTL     = "5s"
	demoTimeout = 50 * time.Second
)

// demoEvent is a line of a worker's output or its exit.
type demoEvent struct {
	worker int
	kind   string // start, end, exit, stderr, gone
	at     time.Time
	token  string
	pid    int
	text   string
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
	n := 3
	if fs.isSet("workers") {
		v, err := strconv.Atoi(fs.str("workers"))
		if err != nil || v < 3 || v > 9 {
			return e.usage("demo", usagef("invalid --workers %s: a number from 3 to 9", quoteArg(fs.str("workers"))))
		}
		n = v
	}
	hold := fs.duration("hold", time.Second)
	if hold < 100*time.Millisecond || hold > 10*time.Second {
		return e.usage("demo", usagef("invalid --hold %s: between 100ms and 10s", fs.str("hold")))
	}
	if _, err := pgcluster.FindBinaries(); err != nil {
		msg := err.Error()
		if !errors.Is(err, pgcluster.ErrNoBinaries) {
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
	ctx, cancel := context.WithTimeout(ctx, demoTimeout)
	defer cancel()

	out := e.stdout
	began := time.Now()
	fmt.Fprintf(out, "pglease demo: %d workers compete for one job, the lease %q. Each runs\n", n, demoLease)
	fmt.Fprintf(out, "  pglease run %s --wait --fast-failover --ttl %s --owner worker-N -- <a job that takes %s>\n", demoLease, demoTTL, hold)
	fmt.Fprintf(out, "The first holder finishes its job; the second is killed with SIGKILL mid-job.\n\n")
	fmt.Fprintf(out, "starting a throwaway PostgreSQL cluster... ")
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{})
	if err != nil {
		fmt.Fprintln(out)
		if ctx.Err() != nil {
			fmt.Fprintln(e.stderr, "pglease demo: interrupted")
			return 130
		}
		return e.fail(err)
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
		w.cmd = exec.Command(self, "run", demoLease, "--wait", "--fast-failover", "--ttl", demoTTL,
			"--owner", fmt.Sprintf("worker-%d", i), "--dsn", dsn, "--", self, demoJobCmd, hold.String())
		w.cmd.Env = withoutConnectionVars()
		// Own process group: Ctrl-C reaches the demo only, which then stops
		// the workers itself.
		w.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		setPdeathsig(w.cmd.SysProcAttr)
		if err := d.start(w); err != nil {
			d.stopAll()
			return e.fail(err)
		}
		d.workers = append(d.workers, w)
	}
	d.t0 = time.Now()
	d.printf(d.t0, "demo", "%d workers started; one gets the lease, the others wait", n)
	code = d.loop(ctx)
	if code != exitOK {
		d.stopAll()
	}
	if code == 130 {
		fmt.Fprintln(out, "interrupted: stopping the workers")
	}
	return code
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
		ev := demoEvent{worker: w.id, kind: "exit", at: time.Now(),
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

// loop prints the timeline until every worker has exited.
func (d *demo) loop(ctx context.Context) int {
	var (
		running  = len(d.workers)
		holders  int
		holder   = map[int]demoEvent{} // current job per worker
		lastEnd  time.Time
		killedAt time.Time
		killed   int
		killT    <-chan time.Time
		tokens   []string
		gaps     []time.Duration
		failover time.Duration
	)
	for running > 0 {
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				fmt.Fprintln(d.out, "pglease demo: timed out")
				return exitError
			}
			return 130
		case <-killT:
			killT = nil
			job, ok := holder[killed]
			if !ok {
				continue
			}
			w := d.workers[killed-1]
			killedAt = time.Now()
			_ = w.cmd.Process.Signal(syscall.SIGKILL)
			d.printf(killedAt, "demo", "SIGKILL worker-%d's pglease (pid %d) while it holds token %s", killed, w.cmd.Process.Pid, job.token)
			go func(pgid int) {
				for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
					if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
						break
					}
				}
				d.events <- demoEvent{worker: killed, kind: "gone", at: time.Now()}
			}(job.pid)
		case ev := <-d.events:
			who := fmt.Sprintf("worker-%d", ev.worker)
			switch ev.kind {
			case "start":
				holders++
				holder[ev.worker] = ev
				tokens = append(tokens, ev.token)
				note := ""
				switch {
				case !killedAt.IsZero() && failover == 0:
					failover = ev.at.Sub(killedAt)
					note = fmt.Sprintf("  failover %s after the kill", ms(failover))
				case !lastEnd.IsZero():
					gap := ev.at.Sub(lastEnd)
					gaps = append(gaps, gap)
					note = fmt.Sprintf("  hand-off gap %s", ms(gap))
				}
				d.printf(ev.at, who, "acquired  token %-3s job pid %d started%s", ev.token, ev.pid, note)
				if holders == 2 {
					killed = ev.worker
					killT = time.After(d.hold * 2 / 5)
				}
			case "end":
				lastEnd = ev.at
				delete(holder, ev.worker)
				d.printf(ev.at, who, "job done; pglease releases the lease")
			case "gone":
				d.printf(ev.at, who, "its job's whole process group is gone %s after the kill", ms(ev.at.Sub(killedAt)))
			case "exit":
				running--
				d.workers[ev.worker-1].done = true
				d.printf(ev.at, who, "%s", ev.text)
			case "stderr":
				d.printf(ev.at, who, "%s", ev.text)
			}
		}
	}
	fmt.Fprintln(d.out)
	fmt.Fprintf(d.out, "fencing tokens in order: %s (each holder's is greater than every earlier one)\n", strings.Join(tokens, ", "))
	for _, g := range gaps {
		fmt.Fprintf(d.out, "hand-off gap after a job ended (release + notify + next start): %s\n", ms(g))
	}
	if failover > 0 {
		fmt.Fprintf(d.out, "failover after SIGKILL of the holder (its session ended, a waiter took over): %s\n", ms(failover))
	}
	return exitOK
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

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000)
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
