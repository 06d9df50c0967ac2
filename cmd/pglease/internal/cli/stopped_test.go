//go:build unix

package cli_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// holderKind starts a pglease that holds lease "stopjob" (pglease run) or
// "cron:stopjob" (a pglease cron job) with a 2 s TTL, running a command
// that writes its pid to pidFile and sleeps; it returns the process and
// the lease's name.
type holderKind struct {
	name  string
	lease string
	start func(t *testing.T, env []string, table, pidFile string) *proc
}

var holderKinds = []holderKind{
	{"run", "stopjob", func(t *testing.T, env []string, table, pidFile string) *proc {
		return start(t, env, "run", "stopjob", "--ttl", "2s", "--table", table, "--",
			"sh", "-c", "echo $$ > "+pidFile+"; exec sleep 300")
	}},
	{"cron", "cron:stopjob", func(t *testing.T, env []string, table, pidFile string) *proc {
		crontab := writeCrontab(t, "stopjob @every 1s -- echo $$ >> "+pidFile+"; exec sleep 300")
		return start(t, env, "cron", crontab, "--table", table, "--ttl", "2s")
	}},
}

// firstInt reads the first number of a file once it has a whole line.
func firstInt(t *testing.T, path string) int {
	t.Helper()
	var n int
	waitFor(t, "a number in "+filepath.Base(path), func() bool {
		b, err := os.ReadFile(path)
		line, _, whole := strings.Cut(string(b), "\n")
		if err != nil || !whole {
			return false
		}
		_, err = fmt.Sscanf(line, "%d", &n)
		return err == nil
	})
	return n
}

// A pglease that is stopped, or starved of CPU, never lets its command
// outlive the lease: the supervisor ends the command at the lease's
// deadline by itself, so the next holder, which gets the lease once the
// row expires, never runs beside it. The successor is a pglease run of the
// same lease that checks, first thing, whether the old command lives.
func TestStoppedPgleaseNeverLetsTheCommandOutliveTheLease(t *testing.T) {
	t.Parallel()
	for _, kind := range holderKinds {
		for _, how := range []string{"SIGSTOP", "starved"} {
			t.Run(kind.name+"/"+how, func(t *testing.T) {
				t.Parallel()
				env, table := tableEnv(t)
				dir := t.TempDir()
				pidFile, verdict := filepath.Join(dir, "pid"), filepath.Join(dir, "verdict")
				holder := kind.start(t, env, table, pidFile)
				old := firstInt(t, pidFile)

				stopped := time.Now()
				holder.signal(syscall.SIGSTOP)
				starving := make(chan struct{})
				starved := make(chan struct{})
				if how == "starved" {
					// Stopped 2.5 s, running 30 ms, over and over: a
					// renewal may get through now and then, but pglease
					// is never running when the lease's deadline comes.
					go func() {
						defer close(starved)
						for {
							select {
							case <-starving:
								return
							case <-time.After(2500 * time.Millisecond):
							}
							_ = holder.cmd.Process.Signal(syscall.SIGCONT)
							time.Sleep(30 * time.Millisecond)
							_ = holder.cmd.Process.Signal(syscall.SIGSTOP)
						}
					}()
				} else {
					close(starved)
				}
				check := fmt.Sprintf("if kill -0 %d 2>/dev/null; then echo overlap; else echo alone; fi > %s", old, verdict)
				code, _, stderr := run(t, env, "run", kind.lease, "--wait", "--ttl", "2s", "--table", table, "--", "sh", "-c", check)
				took := time.Since(stopped)
				close(starving)
				<-starved
				holder.signal(syscall.SIGCONT)
				if code != 0 {
					t.Fatalf("the successor exited %d: %s", code, stderr)
				}
				b, err := os.ReadFile(verdict)
				if err != nil {
					t.Fatal(err)
				}
				if got := strings.TrimSpace(string(b)); got != "alone" {
					t.Fatalf("the successor ran while the stopped holder's command (pid %d) lived: %s", old, got)
				}
				t.Logf("the successor ran alone %s after the holder was stopped", took.Round(time.Millisecond))

				if kind.name == "run" {
					if code := holder.wait(); code != 76 {
						t.Fatalf("the resumed holder exited %d, want 76 (lease lost): %s", code, holder.stderr)
					}
				} else {
					holder.signal(syscall.SIGTERM)
					holder.wait()
				}
				if !strings.Contains(holder.stderr.String(), "no renewal of lease") {
					t.Errorf("stderr does not say why the command was ended: %s", holder.stderr)
				}
			})
		}
	}
}

// Job control (Ctrl-Z's SIGTSTP, SIGTTIN, SIGTTOU) does not stop pglease:
// it says so and keeps renewing, so its command stays within the lease.
func TestJobControlDoesNotStopPglease(t *testing.T) {
	t.Parallel()
	for _, kind := range holderKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			env, table := tableEnv(t)
			pidFile := filepath.Join(t.TempDir(), "pid")
			holder := kind.start(t, env, table, pidFile)
			cmdPid := firstInt(t, pidFile)
			for _, sig := range []syscall.Signal{syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU} {
				holder.signal(sig)
				want := "ignoring " + map[syscall.Signal]string{syscall.SIGTSTP: "SIGTSTP", syscall.SIGTTIN: "SIGTTIN", syscall.SIGTTOU: "SIGTTOU"}[sig]
				waitFor(t, "pglease to say "+want, func() bool { return strings.Contains(holder.stderr.String(), want) })
				if s := procState(holder.cmd.Process.Pid); s == 'T' || s == 't' {
					t.Fatalf("pglease was stopped by %v", sig)
				}
			}
			// Renewals go on: the row's expiry moves past the time when
			// the lease would have expired unrenewed, a TTL later.
			since := time.Now().Add(4 * time.Second)
			waitFor(t, "a renewal a TTL after the signals", func() bool {
				return pgtest.Value[bool](t, "SELECT expires_at > $2 FROM "+table+" WHERE name = $1", kind.lease, since)
			})
			if code, _, stderr := run(t, env, "run", kind.lease, "--ttl", "2s", "--table", table, "--", "true"); code != 75 {
				t.Fatalf("another run got the lease (exit %d): %s", code, stderr)
			}
			if !alive(cmdPid) {
				t.Fatal("the command died")
			}
		})
	}
}

// procState is the state letter of /proc/PID/stat, or 0.
func procState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) {
		return b[i+2]
	}
	return 0
}
