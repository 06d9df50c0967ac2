package pgtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/freeport"
)

// PgBouncer starts PgBouncer with pool_mode mode ("transaction",
// "session") in front of the server of dsn, stopped when the test ends,
// and returns a DSN through it. It skips the test when
// PgBouncer is not installed (CI installs Debian's pgbouncer package).
func PgBouncer(t testing.TB, dsn, mode string) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/local/bin/pgbouncer"} {
			if _, err2 := os.Stat(p); err2 == nil {
				bin, err = p, nil
				break
			}
		}
	}
	if err != nil {
		t.Skip("pgbouncer is not installed (Debian/Ubuntu: apt-get install pgbouncer); skipping the PgBouncer scenario")
	}
	host, port, err := net.SplitHostPort(HostPort(t, dsn))
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "pglease-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	lport, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	users := filepath.Join(dir, "users.txt")
	if err := os.WriteFile(users, []byte(`"postgres" ""`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "pgbouncer.ini")
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
max_client_conn = 500
default_pool_size = 20
logfile = %s
server_reset_query =
ignore_startup_parameters = extra_float_digits
`, host, port, lport, users, mode, filepath.Join(dir, "pgbouncer.log"))
	if err := os.WriteFile(conf, []byte(ini), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, conf)
	cmd.Dir = dir
	if os.Geteuid() == 0 { // PgBouncer refuses to run as root
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Skipf("running as root and no postgres OS user for pgbouncer: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, Pdeathsig: syscall.SIGKILL}
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start pgbouncer: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(lport))
	gone := false
	listening := Eventually(Patience, func() bool {
		select {
		case <-exited:
			gone = true
			return true
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	switch {
	case gone:
		log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
		t.Fatalf("pgbouncer exited: %s\n%s", out.String(), log)
	case !listening:
		t.Fatalf("pgbouncer did not listen on %s within %v", addr, Patience)
	}
	// PgBouncer 1.18 in transaction pooling mode cannot keep named prepared
	// statements: tell pgx to use the unnamed one, as docs/OPERATIONS.md says.
	return fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&default_query_exec_mode=exec", addr)
}
