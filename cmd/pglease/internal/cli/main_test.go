//go:build unix

package cli_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
	"github.com/pglease/pglease/cmd/pglease/internal/cli"
	"github.com/pglease/pglease/internal/pgtest"
)

// bin is the pglease binary built once for the black-box tests.
var bin string

func TestMain(m *testing.M) {
	var err error
	bin, err = buildBinary()
	if err != nil {
		fmt.Fprintln(os.Stderr, "building pglease:", err)
		os.Exit(1)
	}
	pgtest.Main(m)
}

// buildBinary builds cmd/pglease into a directory of the temp dir named
// after this checkout, replacing the file atomically, so repeated runs reuse
// one path instead of leaving a binary behind each time.
func buildBinary() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(wd))
	dir := filepath.Join(os.TempDir(), "pglease-clitest-"+hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "pglease")
	tmp := fmt.Sprintf("%s.%d", out, os.Getpid())
	cmd := exec.Command("go", "build", "-o", tmp, "github.com/pglease/pglease/cmd/pglease")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		os.Remove(tmp)
		return "", err
	}
	return out, os.Rename(tmp, out)
}

// proc is a running pglease process.
type proc struct {
	t              *testing.T
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	done           chan struct{}
	code           int
	started        time.Time
	exited         time.Time // when Wait returned, soon after the exit
	elapsed        time.Duration
}

// start starts the binary with args and extra environment variables.
// The process is killed when the test ends.
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return startWith(t, nil, env, args...)
}

// startWith is start with attr as the process's attributes (nil: none).
func startWith(t *testing.T, attr *syscall.SysProcAttr, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(cli.BaseEnv(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.cmd.SysProcAttr = attr
	// A process pglease failed to end may hold its output pipes open:
	// the test fails on what it checks instead of hanging.
	p.cmd.WaitDelay = 10 * time.Second
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := p.cmd.Wait()
		p.exited = time.Now()
		p.elapsed = p.exited.Sub(p.started)
		p.code = p.cmd.ProcessState.ExitCode()
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.code = 128 + int(ws.Signal())
		}
		_ = err
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// wait waits for the process to exit and returns its exit status.
func (p *proc) wait() int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(cli.Patience):
		p.t.Fatalf("pglease %v still running after %s\nstdout: %s\nstderr: %s", p.cmd.Args[1:], cli.Patience, p.stdout, p.stderr)
		return -1
	}
}

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

// run runs the binary to completion.
func run(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := start(t, env, args...)
	code = p.wait()
	return code, p.stdout.String(), p.stderr.String()
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor polls cond until it holds, failing the test after cli.Patience.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	cli.WaitFor(t, what, cond)
}

// alive reports whether a process exists and is not a zombie.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// tableEnv returns the environment selecting the shared test server and a
// fresh schema with the lease table in it, migrated.
func tableEnv(t *testing.T) (env []string, table string) {
	t.Helper()
	table = pgtest.Schema(t) + ".leases"
	migrateTable(t, table)
	return []string{"PGLEASE_DSN=" + pgtest.DSN(t)}, table
}

// noTableEnv is tableEnv without the table: a schema of the test's own,
// empty.
func noTableEnv(t *testing.T) (env []string, table string) {
	t.Helper()
	return []string{"PGLEASE_DSN=" + pgtest.DSN(t)}, pgtest.Schema(t) + ".leases"
}

// missingSchema names a schema that does not exist, dropped when the test
// ends should a command have created it.
func missingSchema(t *testing.T, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano()%1e9)
	t.Cleanup(func() { pgtest.Exec(t, "DROP SCHEMA IF EXISTS "+name+" CASCADE") })
	return name
}

// migrateTable creates table as 'pglease migrate --table' does: run and
// cron create only the default table (TestATableThatDoesNotExistIsNeverCreated).
func migrateTable(t *testing.T, table string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cli.Patience)
	defer cancel()
	c, err := pglease.Open(ctx, pgtest.DSN(t), pglease.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := admin.Migrate(ctx, c); err != nil {
		t.Fatal(err)
	}
}
