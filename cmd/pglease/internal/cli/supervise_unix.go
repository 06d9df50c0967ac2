//go:build unix

package cli

// The command runs under a small supervisor: pglease re-executes itself as
// "pglease __supervise", which starts the command in a process group of its
// own and is the only process that waits for it.
//
//	pglease run ──(ctrl pipe)──▶ pglease __supervise ──▶ COMMAND's process group
//	            ◀─(status pipe)─        (holds a copy of the lease's session)
//
// The three live in three process groups: pglease's own (shared with
// whatever started it), the supervisor's and COMMAND's. A signal to
// pglease's group (a shell's job control, supervisord's killasgroup, kill
// -9 -PGID) therefore reaches only pglease, never the helper that must
// clean up after it.
//
// The job is COMMAND's process group and, on Linux, every other
// descendant of the supervisor: the supervisor is a child subreaper, so a
// process that leaves the group (setsid, setpgid, a double fork) stays its
// descendant, or is re-parented to it when its parent dies. Signals meant
// for the job go to the group and to each such descendant, and "the job is
// gone" means that every one of them is dead and reaped. The supervisor
// exits only then, so pglease releases the lease only then. Elsewhere
// orphans go to init, and only the group is the job.
//
// The supervisor enforces the lease's deadline itself, so that the job
// never outlives the lease whatever becomes of pglease (stopped by
// SIGSTOP, starved of CPU): pglease passes the local deadline when it
// starts the supervisor and again after every renewal, as an instant of a
// clock both processes read (CLOCK_BOOTTIME on Linux, which also counts a
// suspended machine). When the deadline minus the kill grace passes
// without a newer one, the supervisor sends SIGTERM to the job (unless
// pglease already had it sent), SIGKILL at the deadline, and reports the
// lease lapsed; pglease then exits 76. While the supervisor lives, pglease
// leaves the deadline to it.
//
// pglease holds the only write end of the ctrl pipe. When pglease dies, even
// by SIGKILL, the kernel closes it and the supervisor reads EOF at once and
// SIGKILLs the job (a parent-death signal would reach only the direct
// child). For a session-bound lease, the supervisor also holds a copy of
// the database connection's descriptor ([pglease.Lease.SessionFile]): the
// server ends the session, and a fast-failover waiter takes over, only
// once the supervisor has exited, that is once the job is gone.
//
// When the supervisor dies alone (say SIGKILL to its pid), pglease sees its
// status pipe close before the supervisor reported the job gone. It then
// terminates COMMAND's group itself (SIGTERM, SIGKILL after the grace,
// sooner if the lease demands it) and keeps holding and renewing the lease
// until the group is gone; only then does it release it and exit 125.
// Descendants that had left the group are out of its reach then. The
// supervisor reports the group's id as soon as COMMAND has started; on
// Linux COMMAND also gets SIGKILL as a parent-death signal, which covers the
// instant between its start and that report.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const supported = true

// forwarded are the signals passed on to the command; received while
// waiting they end the wait with exit status 128+signal.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// jobControl are the signals that stop a process by default. pglease and
// its supervisor catch them (so that they are reset for COMMAND, which
// ignoring them would not do): a stopped pglease cannot renew the lease.
var jobControl = []os.Signal{syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU}

const superviseCmd = "__supervise"

// brokenPipe is the signal of a write to a pipe without a reader (see
// surviveBrokenPipe).
var brokenPipe = []os.Signal{syscall.SIGPIPE}

// supervisor is pglease's side of a running supervisor.
type supervisor struct {
	cmd    *exec.Cmd
	ctrl   *os.File
	grace  time.Duration
	stderr io.Writer
	pgid   atomic.Int64  // COMMAND's process group, once reported
	gone   atomic.Bool   // the supervisor exited: pglease signals the group itself
	done   chan struct{} // closed when the command's group is gone
	code   int           // the command's exit status (valid after done)
	signal int           // the signal that killed the command, or 0 (valid after done)
	lapsed bool          // the supervisor ended the job at the lease's deadline (valid after done)
	err    error         // why the command could not run, if it could not

	mu       sync.Mutex
	deadline time.Time // the last deadline sent
}

func startSupervisor(c child, e *env) (*supervisor, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("cannot find the pglease executable to supervise the command: %w", err)
	}
	ctrlR, ctrlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	statR, statW, err := os.Pipe()
	if err != nil {
		ctrlR.Close()
		ctrlW.Close()
		return nil, err
	}
	args := append([]string{superviseCmd, c.grace.String(), strconv.FormatInt(clockAt(c.deadline), 10), c.path}, c.argv...)
	cmd := exec.Command(self, args...)
	cmd.Stdout, cmd.Stderr = e.stdout, e.errOut
	if c.stdin {
		cmd.Stdin = os.Stdin
	}
	cmd.Env = c.env
	cmd.ExtraFiles = []*os.File{ctrlR, statW} // fds 3 and 4
	if c.session != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, c.session) // fd 5
	}
	// A process group of its own: out of reach of signals to pglease's.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// When stdout is not a file (in-process use), a process that escaped
	// the group could hold the copying pipe open forever.
	cmd.WaitDelay = time.Second
	err = cmd.Start()
	ctrlR.Close()
	statW.Close()
	if err != nil {
		ctrlW.Close()
		statR.Close()
		return nil, fmt.Errorf("start the supervisor: %w", err)
	}
	s := &supervisor{cmd: cmd, ctrl: ctrlW, grace: c.grace, stderr: e.stderr, done: make(chan struct{}), code: exitRunFailure, deadline: c.deadline}
	go s.read(statR)
	return s, nil
}

// read follows the status pipe until the supervisor exits and the
// command's group is gone.
func (s *supervisor) read(statR *os.File) {
	defer close(s.done)
	defer s.ctrl.Close()
	sc := bufio.NewScanner(statR)
	got, survived := false, false
	for sc.Scan() {
		kind, rest, _ := strings.Cut(sc.Text(), " ")
		switch kind {
		case "pid":
			n, _ := strconv.Atoi(rest)
			s.pgid.Store(int64(n))
		case "signal":
			s.signal, _ = strconv.Atoi(rest)
		case "exit":
			s.code, _ = strconv.Atoi(rest)
			got = true
		case "error":
			c, msg, _ := strings.Cut(rest, " ")
			s.code, _ = strconv.Atoi(c)
			s.err = errors.New(msg)
			got = true
		case "lapsed":
			s.lapsed = true
		case "survived":
			survived = true
		}
	}
	statR.Close()
	err := s.cmd.Wait()
	s.gone.Store(true)
	if got && !survived && s.cmd.ProcessState.Exited() {
		return // the supervisor saw the job gone
	}
	pgid := int(s.pgid.Load())
	if !got {
		s.code = exitRunFailure
		s.err = fmt.Errorf("the supervisor of the command died (%v)", err)
	}
	if pgid == 0 || !groupAlive(pgid) {
		return
	}
	_ = syscall.Kill(-pgid, syscall.SIGTERM) // before the message: see diagWriter
	fmt.Fprintf(s.stderr, "pglease: the supervisor of the command died (%v) while the command's process group %d lived; terminating the group (SIGTERM, SIGKILL after %s) and holding the lease until it is gone\n", err, pgid, s.grace)
	if !endGroup(pgid, s.grace, 10*time.Second) {
		fmt.Fprintf(s.stderr, "pglease: processes of the command's group %d survive SIGKILL; holding the lease until they are gone\n", pgid)
		endGroup(pgid, 0, -1)
	}
	if got {
		s.err = fmt.Errorf("the supervisor of the command died (%v); the command's group was terminated", err)
		s.code = exitRunFailure
	}
}

func (s *supervisor) send(b ...byte) { _, _ = s.ctrl.Write(b) }

// signalGroup signals the command's group directly; only once the
// supervisor is gone, while the group is known to live.
func (s *supervisor) signalGroup(sig syscall.Signal) {
	if pgid := int(s.pgid.Load()); pgid > 0 {
		_ = syscall.Kill(-pgid, sig)
	}
}

// terminate sends SIGTERM to the command's whole group.
func (s *supervisor) terminate() {
	if s.gone.Load() {
		s.signalGroup(syscall.SIGTERM)
		return
	}
	s.send('T')
}

// kill sends SIGKILL to the command's whole group.
func (s *supervisor) kill() {
	if s.gone.Load() {
		s.signalGroup(syscall.SIGKILL)
		return
	}
	s.send('K')
}

// forward passes a signal on to the command.
func (s *supervisor) forward(sig syscall.Signal) {
	if s.gone.Load() {
		if pid := int(s.pgid.Load()); pid > 0 {
			_ = syscall.Kill(pid, sig)
		}
		return
	}
	s.send('s', byte(sig))
}

// enforcesDeadline reports whether the supervisor enforces the lease's
// deadline: while it lives.
func (s *supervisor) enforcesDeadline() bool { return !s.gone.Load() }

// setDeadline tells the supervisor the lease's new local deadline, if it
// moved.
func (s *supervisor) setDeadline(d time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.Equal(s.deadline) {
		return
	}
	s.deadline = d
	var b [9]byte
	b[0] = 'D'
	binary.BigEndian.PutUint64(b[1:], uint64(clockAt(d)))
	s.send(b[:]...)
}

// clockAt is the instant t on the clock the supervisor reads. The clock is
// read before time.Now, so that a pause between the two can only make the
// result earlier: the supervisor may act early, never late.
func clockAt(t time.Time) int64 {
	base := clockNow()
	return base + int64(time.Until(t))
}

// supervise is the supervisor process: args are GRACE DEADLINE PATH ARGV0
// [ARG...], DEADLINE an instant of clockNow.
func supervise(args []string, stderr io.Writer) int {
	internal := func() int {
		fmt.Fprintln(stderr, "pglease: __supervise is internal to pglease run and cron")
		return exitUsage
	}
	if len(args) < 4 {
		return internal()
	}
	grace, err := time.ParseDuration(args[0])
	deadline, derr := strconv.ParseInt(args[1], 10, 64)
	ctrl, stat := os.NewFile(3, "ctrl"), os.NewFile(4, "status")
	if err != nil || derr != nil || ctrl == nil || stat == nil {
		return internal()
	}
	// fd 5, when open, is a copy of the lease's database session: it is
	// held, never used, until the supervisor exits.
	for fd := 3; fd <= 5; fd++ {
		syscall.CloseOnExec(fd)
	}
	becomeSubreaper()
	// pglease forwards what the command should get; the supervisor itself
	// ends only when the job is gone (or by SIGKILL), and is never
	// stopped by job control.
	signal.Notify(make(chan os.Signal, 1), forwarded...)
	signal.Notify(make(chan os.Signal, 1), jobControl...)
	surviveBrokenPipe()

	st := &statusPipe{w: stat}
	w := &watchdog{deadline: deadline, grace: int64(grace), moved: make(chan struct{}, 1),
		name: os.Getenv("PGLEASE_NAME"), stderr: stderr, st: st}
	if w.due(clockNow()) {
		// pglease was held up between acquiring and starting us.
		st.printf("lapsed")
		st.printf("error %d the lease's deadline passed before the command could start", exitLost)
		fmt.Fprintf(stderr, "pglease: lease %s: its deadline passed before the command could start (pglease was stopped or starved of CPU); not running it\n", quoteArg(w.name))
		return exitLost
	}

	attr := &syscall.SysProcAttr{Setpgid: true}
	setPdeathsig(attr) // until pglease knows the group, see above
	cmd := &exec.Cmd{Path: args[2], Args: args[3:], Env: os.Environ(),
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, SysProcAttr: attr}
	if err := cmd.Start(); err != nil {
		code := exitNoExec
		if errors.Is(err, fs.ErrNotExist) {
			code = exitNotFound
		}
		st.printf("error %d %s", code, strings.ReplaceAll(err.Error(), "\n", " "))
		return code
	}
	j := &job{pgid: cmd.Process.Pid}
	st.printf("pid %d", j.pgid)
	w.job = j
	go w.run()

	var orphaned atomic.Bool
	go func() {
		r := bufio.NewReader(ctrl)
		for {
			b, err := r.ReadByte()
			if err != nil { // pglease is gone: so is the lease
				orphaned.Store(true)
				j.signal(syscall.SIGKILL)
				return
			}
			switch b {
			case 'T':
				j.signal(syscall.SIGTERM)
			case 'K':
				j.signal(syscall.SIGKILL)
			case 's':
				if n, err := r.ReadByte(); err == nil {
					_ = cmd.Process.Signal(syscall.Signal(n))
				}
			case 'D':
				var b [8]byte
				if _, err := io.ReadFull(r, b[:]); err == nil {
					w.set(int64(binary.BigEndian.Uint64(b[:])))
				}
			}
		}
	}()
	_ = cmd.Wait()
	code := exitStatus(cmd.ProcessState)
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		st.printf("signal %d", int(ws.Signal()))
	}
	st.printf("exit %d", code)
	if orphaned.Load() {
		grace = 0
	}
	if !j.end(grace, 10*time.Second) {
		// pglease keeps holding the lease until the job is gone.
		st.printf("survived")
		fmt.Fprintf(stderr, "pglease: processes of the command's job (group %d) survived SIGKILL for 10s\n", j.pgid)
	}
	w.done() // its message queued, for Main to flush
	return code
}

// statusPipe is the supervisor's end of the status pipe, written by more
// than one goroutine.
type statusPipe struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *statusPipe) printf(format string, a ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format+"\n", a...)
}

// job is what the supervisor answers for: COMMAND's process group and,
// where the system can tell (Linux), every other descendant of the
// supervisor.
type job struct {
	pgid       int
	terminated atomic.Bool // SIGTERM was sent
}

// signal sends sig to the whole job.
func (j *job) signal(sig syscall.Signal) {
	if sig == syscall.SIGTERM {
		j.terminated.Store(true)
	}
	_ = syscall.Kill(-j.pgid, sig)
	for _, pid := range escaped(j.pgid) {
		_ = syscall.Kill(pid, sig)
	}
}

// alive reports whether a member of the job can still run.
func (j *job) alive() bool { return groupAlive(j.pgid) || len(escaped(j.pgid)) > 0 }

// end sends SIGTERM to whatever is left of the job, SIGKILL after grace,
// and returns true once the job is gone: every member dead and reaped
// (zombies re-parented to the supervisor included), so that a process
// listing taken after the supervisor exits shows none of them. It returns
// false if the job survived SIGKILL for patience.
func (j *job) end(grace, patience time.Duration) bool {
	if !reapOrphans() && !j.alive() {
		return true
	}
	j.signal(syscall.SIGTERM)
	killAt := time.Now().Add(grace)
	var giveUp time.Time
	pause := time.Millisecond
	for {
		children := reapOrphans()
		if !j.alive() && !children {
			return true
		}
		now := time.Now()
		if !now.Before(killAt) {
			// Again on every round: an escaped process may have forked.
			j.signal(syscall.SIGKILL)
			if giveUp.IsZero() {
				giveUp = now.Add(patience)
			}
		}
		if !giveUp.IsZero() && now.After(giveUp) {
			return false
		}
		time.Sleep(pause)
		pause = min(2*pause, 20*time.Millisecond)
	}
}

// watchdog ends the job when the lease's deadline passes without a newer
// one from pglease (see the top of this file).
type watchdog struct {
	mu       sync.Mutex
	deadline int64 // clockNow instant
	grace    int64
	// lapse is held while the watchdog ends the job and says so: the
	// supervisor, which may see the job gone before the message is
	// queued, exits only after it (see done).
	lapse  sync.Mutex
	moved  chan struct{}
	job    *job
	name   string // the lease's name, for messages
	stderr io.Writer
	st     *statusPipe
}

// done waits until a lapse in progress has been reported.
func (w *watchdog) done() {
	w.lapse.Lock()
	defer w.lapse.Unlock()
}

// set records a new deadline.
func (w *watchdog) set(d int64) {
	w.mu.Lock()
	w.deadline = d
	w.mu.Unlock()
	select {
	case w.moved <- struct{}{}:
	default:
	}
}

// due reports whether SIGTERM is due at now: the deadline minus the grace.
func (w *watchdog) due(now int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return now >= w.deadline-w.grace
}

// run sends SIGTERM at the deadline minus the grace, SIGKILL at the
// deadline; once SIGTERM is sent, a later deadline changes nothing. It
// sleeps at most a second at a time, so that a suspended machine's lost
// time (which the clock counts, the timer may not) is noticed soon.
func (w *watchdog) run() {
	var killAt int64 // once lapsed
	for {
		now := clockNow()
		w.mu.Lock()
		deadline := w.deadline
		w.mu.Unlock()
		if killAt == 0 && now >= deadline-w.grace {
			killAt = deadline
			// Before the signal, so that pglease learns it before the job
			// can be gone: the status pipe holds the few lines of a run
			// and never blocks.
			w.st.printf("lapsed")
			w.lapse.Lock()
			if !w.job.terminated.Load() {
				// The signal first, then the message (see diagWriter).
				w.job.signal(syscall.SIGTERM)
				fmt.Fprintf(w.stderr, "pglease: no renewal of lease %s was confirmed before its deadline (renewals failing, or pglease stopped or starved of CPU); terminating the command (SIGTERM, SIGKILL after %s)\n",
					quoteArg(w.name), time.Duration(w.grace))
			}
			w.lapse.Unlock()
		}
		next := deadline - w.grace
		if killAt != 0 {
			if now >= killAt {
				w.job.signal(syscall.SIGKILL)
				next = now + int64(20*time.Millisecond) // until the supervisor exits
			} else {
				next = killAt
			}
		}
		t := time.NewTimer(min(time.Duration(next-now), time.Second))
		select {
		case <-t.C:
		case <-w.moved:
			t.Stop()
		}
	}
}

// exitStatus is the shell's view of a process's end: its exit code, or
// 128+N when signal N killed it.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// signalNames are the names of the signals a command is commonly killed by.
var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT",
	syscall.SIGILL: "SIGILL", syscall.SIGABRT: "SIGABRT", syscall.SIGBUS: "SIGBUS",
	syscall.SIGFPE: "SIGFPE", syscall.SIGKILL: "SIGKILL", syscall.SIGSEGV: "SIGSEGV",
	syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM", syscall.SIGTERM: "SIGTERM",
	syscall.SIGUSR1: "SIGUSR1", syscall.SIGUSR2: "SIGUSR2", syscall.SIGXCPU: "SIGXCPU",
	syscall.SIGTSTP: "SIGTSTP", syscall.SIGTTIN: "SIGTTIN", syscall.SIGTTOU: "SIGTTOU",
}

// signalName is "SIGKILL" for syscall.SIGKILL, the system's description
// for the rarer signals.
func signalName(s syscall.Signal) string {
	if n, ok := signalNames[s]; ok {
		return n
	}
	return s.String()
}

// endGroup sends SIGTERM to whatever is left of the process group, SIGKILL
// after grace, and returns true once the group is gone; false if it
// survived SIGKILL for patience (negative: wait for as long as it takes).
// pglease uses it when the supervisor died; it reaps nothing, since
// pglease's other children (the supervisors of pglease cron's other jobs)
// are waited for by their own goroutines.
func endGroup(pgid int, grace, patience time.Duration) bool {
	if !groupAlive(pgid) {
		return true
	}
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	killAt := time.Now().Add(grace)
	var giveUp time.Time
	pause := time.Millisecond
	for groupAlive(pgid) {
		now := time.Now()
		if giveUp.IsZero() && !now.Before(killAt) {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			giveUp = now.Add(patience)
		}
		if patience >= 0 && !giveUp.IsZero() && now.After(giveUp) {
			return false
		}
		time.Sleep(pause)
		pause = min(2*pause, 20*time.Millisecond)
	}
	return true
}

// groupAlive reports whether the process group has a member that can
// still run: zombies, dead but not yet reaped by their parent (an init that
// reaps lazily, say), do not count where the system says which members are
// zombies.
func groupAlive(pgid int) bool {
	err := syscall.Kill(-pgid, 0)
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	running, known := groupRunning(pgid)
	return running || !known
}

// reapOrphans reaps exited children, COMMAND's orphaned descendants
// re-parented to the supervisor among them, and reports whether any child
// is left. Only the supervisor calls it, once it has waited for COMMAND,
// its only child of its own.
func reapOrphans() (children bool) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
		case err != nil: // ECHILD: none left
			return false
		case pid == 0: // some left, none exited
			return true
		}
	}
}
