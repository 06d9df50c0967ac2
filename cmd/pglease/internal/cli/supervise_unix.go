//go:build unix

package cli

// The command runs under a small supervisor: pglease re-executes itself as
// "pglease __supervise", which starts the command in a process group of its
// own and is the only process that waits for it.
//
//	pglease run ──(ctrl pipe)──▶ pglease __supervise ──▶ COMMAND's process group
//	            ◀─(status pipe)─
//
// The three live in three process groups: pglease's own (shared with
// whatever started it), the supervisor's and COMMAND's. A signal to
// pglease's group (a shell's job control, supervisord's killasgroup, kill
// -9 -PGID) therefore reaches only pglease, never the helper that must
// clean up after it.
//
// pglease holds the only write end of the ctrl pipe. When pglease dies, even
// by SIGKILL, the kernel closes it and the supervisor reads EOF at once and
// SIGKILLs the whole group, grandchildren included (a parent-death signal
// would reach only the direct child). On Linux the supervisor is also a
// child subreaper, so orphaned members of the group are re-parented to it
// and reaped: "the group is gone" then means every member is dead and
// reaped. The supervisor exits only when the group is gone, so pglease
// releases the lease exactly then.
//
// When the supervisor dies alone (say SIGKILL to its pid), pglease sees its
// status pipe close before the supervisor reported the group gone. It then
// terminates COMMAND's group itself (SIGTERM, SIGKILL after the grace,
// sooner if the lease demands it) and keeps holding and renewing the lease
// until the group is gone; only then does it release it and exit 125. The
// supervisor reports the group's id as soon as COMMAND has started; on
// Linux COMMAND also gets SIGKILL as a parent-death signal, which covers the
// instant between its start and that report.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

const supported = true

// forwarded are the signals passed on to the command; received while
// waiting they end the wait with exit status 128+signal.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

const superviseCmd = "__supervise"

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
	err    error         // why the command could not run, if it could not
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
	args := append([]string{superviseCmd, c.grace.String(), c.path}, c.argv...)
	cmd := exec.Command(self, args...)
	cmd.Stdout, cmd.Stderr = e.stdout, e.stderr
	if c.stdin {
		cmd.Stdin = os.Stdin
	}
	cmd.Env = c.env
	cmd.ExtraFiles = []*os.File{ctrlR, statW} // fds 3 and 4
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
	s := &supervisor{cmd: cmd, ctrl: ctrlW, grace: c.grace, stderr: e.stderr, done: make(chan struct{}), code: exitRunFailure}
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
		case "survived":
			survived = true
		}
	}
	statR.Close()
	err := s.cmd.Wait()
	s.gone.Store(true)
	if got && !survived && s.cmd.ProcessState.Exited() {
		return // the supervisor saw the group gone
	}
	pgid := int(s.pgid.Load())
	if !got {
		s.code = exitRunFailure
		s.err = fmt.Errorf("the supervisor of the command died (%v)", err)
	}
	if pgid == 0 || !groupAlive(pgid) {
		return
	}
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

// supervise is the supervisor process: args are GRACE PATH ARGV0 [ARG...].
func supervise(args []string, stderr io.Writer) int {
	if len(args) < 3 {
		fmt.Fprintln(stderr, "pglease: __supervise is internal to pglease run and cron")
		return exitUsage
	}
	grace, err := time.ParseDuration(args[0])
	ctrl, stat := os.NewFile(3, "ctrl"), os.NewFile(4, "status")
	if err != nil || ctrl == nil || stat == nil {
		fmt.Fprintln(stderr, "pglease: __supervise is internal to pglease run and cron")
		return exitUsage
	}
	syscall.CloseOnExec(3)
	syscall.CloseOnExec(4)
	becomeSubreaper()
	// pglease forwards what the command should get; the supervisor itself
	// ends only when the group is gone (or by SIGKILL).
	signal.Notify(make(chan os.Signal, 1), forwarded...)

	attr := &syscall.SysProcAttr{Setpgid: true}
	setPdeathsig(attr) // until pglease knows the group, see above
	cmd := &exec.Cmd{Path: args[1], Args: args[2:], Env: os.Environ(),
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, SysProcAttr: attr}
	if err := cmd.Start(); err != nil {
		code := exitNoExec
		if errors.Is(err, fs.ErrNotExist) {
			code = exitNotFound
		}
		fmt.Fprintf(stat, "error %d %s\n", code, strings.ReplaceAll(err.Error(), "\n", " "))
		return code
	}
	pgid := cmd.Process.Pid
	fmt.Fprintf(stat, "pid %d\n", pgid)

	var orphaned atomic.Bool
	go func() {
		r := bufio.NewReader(ctrl)
		for {
			b, err := r.ReadByte()
			if err != nil { // pglease is gone: so is the lease
				orphaned.Store(true)
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				return
			}
			switch b {
			case 'T':
				_ = syscall.Kill(-pgid, syscall.SIGTERM)
			case 'K':
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			case 's':
				if n, err := r.ReadByte(); err == nil {
					_ = cmd.Process.Signal(syscall.Signal(n))
				}
			}
		}
	}()
	_ = cmd.Wait()
	code := exitStatus(cmd.ProcessState)
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		fmt.Fprintf(stat, "signal %d\n", int(ws.Signal()))
	}
	fmt.Fprintf(stat, "exit %d\n", code)
	if orphaned.Load() {
		grace = 0
	}
	if !endGroup(pgid, grace, 10*time.Second) {
		// pglease keeps holding the lease until the group is gone.
		fmt.Fprintln(stat, "survived")
		fmt.Fprintf(stderr, "pglease: processes of the command's group %d survived SIGKILL for 10s\n", pgid)
	}
	return code
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
func endGroup(pgid int, grace, patience time.Duration) bool {
	reapOrphans()
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
		reapOrphans()
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

// reapOrphans reaps exited descendants re-parented to this process.
func reapOrphans() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
