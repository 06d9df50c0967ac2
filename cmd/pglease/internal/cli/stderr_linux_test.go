package cli_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pglease/pglease/cmd/pglease/internal/cli"
)

// A lost lease reaches the command whatever becomes of pglease's stderr:
// pglease and its supervisor signal first and write afterwards, and a
// write never blocks them. Three sinks: a pipe that nobody reads and that
// is full before pglease starts, a pipe whose reader is gone (a write
// raises SIGPIPE), and a terminal with tostop in whose background process
// group pglease runs (each of its writes raises SIGTTOU, which pglease and
// its supervisor catch). Three ends of the
// lease: a force-release and --max-hold, which the guard in pglease acts
// on, and pglease stopped by SIGSTOP, after which the supervisor ends the
// command at the lease's deadline. In every case the command gets SIGTERM
// and is gone in time: before a successor runs (--max-hold, stopped), or
// within a bound after the force-release (which lets a successor in at
// once, before the holder can know). With tostop, neither pglease nor its
// supervisor spins.
func TestLossReachesTheCommandWhateverStderrDoes(t *testing.T) {
	t.Parallel()
	for _, sink := range []string{"full-pipe", "closed-pipe", "tostop"} {
		for _, loss := range []string{"force-release", "max-hold", "stopped"} {
			t.Run(sink+"/"+loss, func(t *testing.T) {
				t.Parallel()
				lossWithStderr(t, sink, loss)
			})
		}
	}
}

func lossWithStderr(t *testing.T, sink, loss string) {
	env, table := tableEnv(t)
	dir := t.TempDir()
	pidFile, termFile := filepath.Join(dir, "pid"), filepath.Join(dir, "term")
	args := []string{"run", "quiet", "--ttl", "2s", "--kill-grace", "400ms", "--table", table}
	if loss == "max-hold" {
		args = append(args, "--max-hold", "3s")
	}
	args = append(args, "--", "sh", "-c",
		// The command writes nothing to the sink (its shell would report
		// the sleep killed by SIGTERM), which would stop it at once.
		"exec 2>/dev/null; trap 'echo TERM > "+termFile+"; exit 0' TERM; echo $$ > "+pidFile+"; while :; do sleep 0.05; done")
	// successor runs a pglease run of the lease whose command says
	// whether the holder's command still lives.
	verdict := filepath.Join(dir, "verdict")
	successor := func(cpid int) *proc {
		check := fmt.Sprintf("if kill -0 %d 2>/dev/null; then echo overlap; else echo alone; fi > %s", cpid, verdict)
		return start(t, env, "run", "quiet", "--wait", "--timeout", "20s", "--ttl", "2s", "--table", table, "--", "sh", "-c", check)
	}
	alone := func(p *proc, cpid int) {
		t.Helper()
		if code := p.wait(); code != 0 {
			t.Fatalf("the successor exited %d: %s", code, p.stderr)
		}
		b, err := os.ReadFile(verdict)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(b)); got != "alone" {
			t.Fatalf("the successor ran while the holder's command (pid %d) lived: %s", cpid, got)
		}
	}

	var h *stderrHolder
	switch sink {
	case "full-pipe", "closed-pipe":
		h = startWithPipeStderr(t, env, args, sink == "closed-pipe")
	case "tostop":
		h = startInBackgroundWithTostop(t, env, args)
	}
	cpid := readInt(t, pidFile)
	spid := ppid(cpid) // the supervisor
	if spid <= 1 {
		t.Fatalf("no supervisor found for the command %d", cpid)
	}
	t.Logf("pglease %d, supervisor %d, command %d", h.pid, spid, cpid)
	began := time.Now()
	var next *proc
	if loss == "max-hold" {
		next = successor(cpid)
	}

	if sink == "tostop" {
		// A line that ends nothing: pglease says it ignores SIGTSTP. Its
		// write must not spin (the old code retried it forever, each try
		// raising SIGTTOU again).
		before, signalled := cpuTime(h.pid), time.Now()
		if err := syscall.Kill(h.pid, syscall.SIGTSTP); err != nil {
			t.Fatal(err)
		}
		cli.WaitFor(t, "pglease to say it ignores SIGTSTP", func() bool {
			return strings.Contains(h.output(), "ignoring SIGTSTP") || cpuTime(h.pid)-before > 2*time.Second
		})
		window := time.Now()
		for time.Since(window) < time.Second { // CPU time is measured over a span
			time.Sleep(100 * time.Millisecond)
		}
		used, span := cpuTime(h.pid)-before, time.Since(signalled).Round(time.Millisecond)
		if used > 500*time.Millisecond {
			t.Errorf("pglease used %s of CPU in the %s after one line to a tostop terminal: it spins", used, span)
		}
		t.Logf("pglease used %s of CPU in the %s after its line to a tostop terminal", used, span)
		if !strings.Contains(h.output(), "ignoring SIGTSTP") {
			t.Errorf("the terminal did not get pglease's line: %q", h.output())
		}
	}

	supCPU := sampleCPU(t, spid)
	var lost time.Time
	switch loss {
	case "force-release":
		if code, stdout, stderr := run(t, env, "release", "quiet", "--force", "--table", table); code != 0 {
			t.Fatalf("release --force: exit %d\n%s%s", code, stdout, stderr)
		}
		lost = time.Now()
		// The holder learns of it at its next renewal (every TTL/3) and
		// acts at once: SIGTERM, SIGKILL after the grace. 5 s is room for
		// a loaded machine; with its stderr blocked the old code never
		// ended the command.
		bound := 5 * time.Second
		for alive(cpid) && time.Since(lost) < bound {
			time.Sleep(20 * time.Millisecond)
		}
		if alive(cpid) {
			t.Fatalf("the command (pid %d) still runs %s after its lease was force-released", cpid, bound)
		}
		t.Logf("the command was gone %s after the force-release", time.Since(lost).Round(time.Millisecond))
	case "max-hold":
		// SIGTERM 2.6 s after the acquisition, SIGKILL at 3 s, then the
		// release: the successor, waiting since the command started, runs
		// only then.
		lost = began // the command's start: --max-hold counts from just before it
		alone(next, cpid)
		t.Logf("the successor ran alone %s after the holder's command started (--max-hold 3s)", time.Since(began).Round(time.Millisecond))
	case "stopped":
		if err := syscall.Kill(h.pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		lost = time.Now()
		alone(successor(cpid), cpid)
		t.Logf("the successor ran alone %s after pglease was stopped", time.Since(lost).Round(time.Millisecond))
		if err := syscall.Kill(h.pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(termFile); err != nil {
		t.Errorf("the command did not get SIGTERM: %v\n%s", err, h.output())
	}
	if sink == "tostop" {
		// The supervisor wrote to the terminal from its background group
		// when it ended the command (after the stop), or not at all.
		used := supCPU()
		if used > 500*time.Millisecond {
			t.Errorf("the supervisor used %s of CPU after the loss: it spins", used)
		}
		t.Logf("the supervisor used %s of CPU from before the loss until it exited", used)
	}
	if code := h.wait(t); code != 76 {
		t.Fatalf("pglease exited %d, want 76 (lease lost)\n%s", code, h.output())
	}
	t.Logf("pglease exited 76 %s after the %s", time.Since(lost).Round(time.Millisecond),
		map[string]string{"force-release": "force-release", "max-hold": "command started", "stopped": "stop"}[loss])
	switch sink {
	case "full-pipe":
		if !h.stillFull() {
			t.Error("pglease's stderr was drained during the test: it was never blocked")
		}
	case "tostop":
		want := map[string]string{"force-release": "lease quiet lost", "max-hold": "reached its --max-hold", "stopped": "no renewal of lease quiet"}[loss]
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(h.output(), want) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if !strings.Contains(h.output(), want) {
			t.Errorf("the terminal does not show %q: %q", want, h.output())
		}
	}
}

// pglease cron shares the guard and the supervisor with pglease run, and
// writes more of its own (its start, a line per run, the scheduler's log):
// with its stderr a full pipe nobody reads, a force-released job lease
// still ends the job's command, with SIGTERM, within the bound of the run
// test.
func TestCronLossReachesTheCommandWithStderrFull(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	dir := t.TempDir()
	pidFile, termFile := filepath.Join(dir, "pid"), filepath.Join(dir, "term")
	crontab := writeCrontab(t, "quiet @every 1s -- exec 2>/dev/null; trap 'echo TERM > "+termFile+"; exit 0' TERM; echo $$ >> "+pidFile+"; while :; do sleep 0.05; done")
	h := startWithPipeStderr(t, env, []string{"cron", crontab, "--ttl", "2s", "--kill-grace", "400ms", "--table", table}, false)
	cpid := firstInt(t, pidFile)
	if code, stdout, stderr := run(t, env, "release", "cron:quiet", "--force", "--table", table); code != 0 {
		t.Fatalf("release --force: exit %d\n%s%s", code, stdout, stderr)
	}
	lost := time.Now()
	bound := 5 * time.Second
	for alive(cpid) && time.Since(lost) < bound {
		time.Sleep(20 * time.Millisecond)
	}
	if alive(cpid) {
		t.Fatalf("the job's command (pid %d) still runs %s after its lease was force-released", cpid, bound)
	}
	if _, err := os.Stat(termFile); err != nil {
		t.Errorf("the command did not get SIGTERM: %v", err)
	}
	t.Logf("the command was gone %s after the force-release", time.Since(lost).Round(time.Millisecond))
	if err := syscall.Kill(h.pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := h.wait(t); code != 0 {
		t.Errorf("pglease cron exited %d after SIGTERM, want 0", code)
	}
	if !h.stillFull() {
		t.Error("pglease cron's stderr was drained during the test: it was never blocked")
	}
}

// stderrHolder is a pglease run whose stderr is not the test's.
type stderrHolder struct {
	pid    int
	wait   func(t *testing.T) int // waits for pglease's exit status
	output func() string          // what reached the terminal (tostop)
	full   *os.File               // the full pipe's write end (full-pipe)
}

// startWithPipeStderr starts pglease with args, its stderr a pipe that
// is full before it starts and that nobody reads, or (closed) a pipe
// whose read end is closed.
func startWithPipeStderr(t *testing.T, env, args []string, closed bool) *stderrHolder {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	if closed {
		r.Close()
	}
	rc, err := w.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var werr error
	if err := rc.Control(func(fd uintptr) {
		if closed {
			return
		}
		if _, werr = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, 4096); werr != nil {
			return
		}
		// os.Pipe's ends do not block: write until the pipe is full.
		buf := bytes.Repeat([]byte("x"), 4096)
		for {
			if _, werr = unix.Write(int(fd), buf); werr != nil {
				break
			}
		}
		if errors.Is(werr, unix.EAGAIN) {
			werr = nil
		}
	}); err != nil || werr != nil {
		t.Fatal(err, werr)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(cli.BaseEnv(), env...)
	cmd.Stderr = w // passed as it is, and made blocking again (File.Fd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	h := &stderrHolder{pid: cmd.Process.Pid, full: w, output: func() string { return "" }}
	h.wait = func(t *testing.T) int {
		t.Helper()
		select {
		case <-done:
			return exitStatusOf(cmd.ProcessState)
		case <-time.After(cli.Patience):
			t.Fatalf("pglease still running after %s", cli.Patience)
			return -1
		}
	}
	return h
}

// stillFull reports whether the pipe still has no room for a byte.
func (h *stderrHolder) stillFull() bool {
	fds := []unix.PollFd{{Fd: int32(h.full.Fd()), Events: unix.POLLOUT}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n == 0
}

// startInBackgroundWithTostop starts pglease with args in a background
// process group of a new terminal (a pty) with tostop set: a shell with
// job control leads the terminal's session and starts pglease with "&".
// The test reads the terminal.
func startInBackgroundWithTostop(t *testing.T, env, args []string) *stderrHolder {
	t.Helper()
	master, slave := openPTY(t)
	tio, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tio.Lflag |= unix.TOSTOP
	if err := unix.IoctlSetTermios(int(slave.Fd()), unix.TCSETS, tio); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pidFile, exitFile := filepath.Join(dir, "pglease.pid"), filepath.Join(dir, "pglease.exit")
	// wait returns when the job stops, too (128 + SIGSTOP, SIGTSTP,
	// SIGTTIN or SIGTTOU): then wait again.
	script := `set -m; "$@" & p=$!; echo $p > ` + pidFile + `
while :; do wait $p; c=$?; [ $c -ge 147 ] && [ $c -le 150 ] || break; done
echo $c > ` + exitFile + `.tmp; mv ` + exitFile + `.tmp ` + exitFile + `; exec sleep 300`
	shell := exec.Command("sh", append([]string{"-c", script, "sh", bin}, args...)...)
	shell.Env = append(cli.BaseEnv(), env...)
	shell.Stdin, shell.Stdout, shell.Stderr = slave, slave, slave
	shell.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := shell.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	var (
		mu  sync.Mutex
		out bytes.Buffer
	)
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			mu.Lock()
			out.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	pid := readInt(t, pidFile)
	t.Cleanup(func() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		_ = shell.Process.Kill()
		_ = shell.Wait()
		master.Close()
		<-read
	})
	if pgid, err := syscall.Getpgid(pid); err != nil || pgid != pid {
		t.Fatalf("pglease is not in a process group of its own: %d, %v", pgid, err)
	}
	if fg, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPGRP); err != nil || fg == pid {
		t.Fatalf("pglease is in the terminal's foreground group %d (%v)", fg, err)
	}
	h := &stderrHolder{pid: pid}
	h.output = func() string {
		mu.Lock()
		defer mu.Unlock()
		return out.String()
	}
	h.wait = func(t *testing.T) int {
		t.Helper()
		return readInt(t, exitFile)
	}
	return h
}

// openPTY opens a new pseudo-terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { master.Close() })
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	slave, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slave.Close() })
	return master, slave
}

// sampleCPU follows the CPU time of a process from now until it exits or
// the test ends, and returns the function that says how much it used.
func sampleCPU(t *testing.T, pid int) func() time.Duration {
	var (
		mu   sync.Mutex
		used time.Duration
	)
	before := cpuTime(pid)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if now := cpuTime(pid); now > 0 {
				mu.Lock()
				used = max(used, now-before)
				mu.Unlock()
			} else {
				return // gone
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return func() time.Duration {
		if now := cpuTime(pid); now > 0 {
			mu.Lock()
			used = max(used, now-before)
			mu.Unlock()
		}
		mu.Lock()
		defer mu.Unlock()
		return used
	}
}

// cpuTime is the user and system time a process used, from
// /proc/PID/stat (clock ticks of 10 ms), or 0 once it is gone.
func cpuTime(pid int) time.Duration {
	f := procFields(pid)
	if len(f) < 13 {
		return 0
	}
	// After the comm field: state(0) ppid(1) ... utime(11) stime(12).
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond
}

// ppid is a process's parent, or 0.
func ppid(pid int) int {
	f := procFields(pid)
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// procFields are the fields of /proc/PID/stat after the command name.
func procFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// exitStatusOf is a process's exit status as a shell reports it.
func exitStatusOf(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// What pglease does so that its messages cannot block it (it catches
// SIGPIPE; the thread that writes them blocks SIGTTOU) does not reach
// COMMAND: COMMAND, here grep itself, starts with neither signal ignored
// or blocked. With a tostop terminal, a COMMAND that ignored or blocked
// SIGTTOU would write from the background; one that ignored SIGPIPE would
// not end when its reader does.
func TestRunCommandGetsDefaultSignals(t *testing.T) {
	t.Parallel()
	env, table := tableEnv(t)
	code, stdout, stderr := run(t, env, "run", "signals", "--table", table, "--", "grep", "^Sig", "/proc/self/status")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	seen := 0
	for _, line := range strings.Split(stdout, "\n") {
		k, v, _ := strings.Cut(line, ":")
		if k != "SigIgn" && k != "SigBlk" {
			continue
		}
		seen++
		mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			t.Fatalf("%s: %q", k, v)
		}
		for _, sig := range []syscall.Signal{syscall.SIGPIPE, syscall.SIGTTOU} {
			if mask&(1<<(sig-1)) != 0 {
				t.Errorf("the command has %v in %s: %s", sig, k, strings.TrimSpace(v))
			}
		}
	}
	if seen != 2 {
		t.Fatalf("no SigIgn and SigBlk in the command's output: %q", stdout)
	}
}
