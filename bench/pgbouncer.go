package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgBouncer is a PgBouncer in transaction pooling mode in front of the
// bench's server (as internal/chaos/pgbouncer_test.go starts it).
type pgBouncer struct {
	cmd    *exec.Cmd
	dir    string
	addr   string // 127.0.0.1:port
	user   string
	exited chan struct{}
}

// pgBouncerBin finds PgBouncer's binary, or "" when it is not installed.
func pgBouncerBin() string {
	if bin, err := exec.LookPath("pgbouncer"); err == nil {
		return bin
	}
	for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/local/bin/pgbouncer"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// pgBouncerVersion is " 1.18.0" for PgBouncer 1.18.0 (with a leading
// space, to follow its name), or "" when unknown.
func pgBouncerVersion() string {
	bin := pgBouncerBin()
	if bin == "" {
		return ""
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return ""
	}
	first, _, _ := strings.Cut(string(out), "\n")
	if v, ok := strings.CutPrefix(strings.TrimSpace(first), "PgBouncer "); ok {
		return " " + v
	}
	return ""
}

// errNoPgBouncer reports that PgBouncer is not installed.
var errNoPgBouncer = errors.New("pgbouncer is not installed (Debian/Ubuntu: apt-get install pgbouncer)")

// pgBouncerIni is PgBouncer's configuration: transaction pooling against
// host:port, trust authentication, listening on 127.0.0.1:listen, with
// admin the user of its admin console.
func pgBouncerIni(host, port string, listen int, admin, dir string, poolSize int) string {
	return fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
admin_users = %s
stats_users = %s
pool_mode = transaction
max_client_conn = 5000
default_pool_size = %d
logfile = %s
server_reset_query =
ignore_startup_parameters = extra_float_digits
`, host, port, listen, filepath.Join(dir, "users.txt"), admin, admin, poolSize, filepath.Join(dir, "pgbouncer.log"))
}

// startPgBouncer starts PgBouncer (default_pool_size poolSize) in front of
// the server of dsn.
func startPgBouncer(ctx context.Context, dsn string, poolSize int) (*pgBouncer, error) {
	bin := pgBouncerBin()
	if bin == "" {
		return nil, errNoPgBouncer
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pglease-bench-pgbouncer-")
	if err != nil {
		return nil, err
	}
	b := &pgBouncer{dir: dir, user: cfg.User, exited: make(chan struct{})}
	fail := func(err error) (*pgBouncer, error) {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		return fail(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	b.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if err := os.WriteFile(filepath.Join(dir, "users.txt"), []byte(strconv.Quote(cfg.User)+` ""`+"\n"), 0o644); err != nil {
		return fail(err)
	}
	conf := filepath.Join(dir, "pgbouncer.ini")
	ini := pgBouncerIni(cfg.Host, strconv.Itoa(int(cfg.Port)), port, cfg.User, dir, poolSize)
	if err := os.WriteFile(conf, []byte(ini), 0o644); err != nil {
		return fail(err)
	}
	cmd := exec.Command(bin, conf)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if os.Geteuid() == 0 { // PgBouncer refuses to run as root
		u, err := user.Lookup("postgres")
		if err != nil {
			return fail(fmt.Errorf("running as root and no postgres OS user for pgbouncer: %w", err))
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return fail(fmt.Errorf("start pgbouncer: %w", err))
	}
	b.cmd = cmd
	go func() { _ = cmd.Wait(); close(b.exited) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-b.exited:
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			return fail(fmt.Errorf("pgbouncer exited: %s %s", out.String(), log))
		default:
		}
		c, err := net.DialTimeout("tcp", b.addr, time.Second)
		if err == nil {
			c.Close()
			return b, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			b.stop()
			return nil, fmt.Errorf("pgbouncer did not listen on %s within 10 s", b.addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dsn is a DSN of database db through PgBouncer. PgBouncer 1.18 in
// transaction pooling mode cannot keep named prepared statements: pgx
// uses the unnamed one, as docs/OPERATIONS.md says.
func (b *pgBouncer) dsn(db string) string {
	return fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable&default_query_exec_mode=exec", url.User(b.user).String(), b.addr, url.PathEscape(db))
}

// stop ends PgBouncer and removes its directory.
func (b *pgBouncer) stop() {
	if b == nil || b.cmd == nil {
		return
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(5 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.exited
	}
	os.RemoveAll(b.dir)
}

// pgbPools is what PgBouncer's SHOW POOLS says of one database: client
// connections (active and waiting for a server connection) and server
// connections (all states).
type pgbPools struct {
	clients, servers int
}

// pools reads SHOW POOLS on the admin console and sums the rows of db.
func (b *pgBouncer) pools(ctx context.Context, db string) (pgbPools, error) {
	var p pgbPools
	cfg, err := pgx.ParseConfig(fmt.Sprintf("postgres://%s@%s/pgbouncer?sslmode=disable", url.User(b.user).String(), b.addr))
	if err != nil {
		return p, err
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return p, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, "SHOW POOLS")
	if err != nil {
		return p, err
	}
	defer rows.Close()
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return p, err
		}
		row := map[string]any{}
		for i, f := range rows.FieldDescriptions() {
			row[f.Name] = vals[i]
		}
		if row["database"] != db {
			continue
		}
		p.clients += poolCount(row, "cl_active", "cl_waiting", "cl_active_cancel_req", "cl_waiting_cancel_req")
		p.servers += poolCount(row, "sv_active", "sv_idle", "sv_used", "sv_tested", "sv_login", "sv_active_cancel", "sv_being_canceled")
	}
	return p, rows.Err()
}

// poolCount sums the integer columns of a SHOW POOLS row that exist (they
// vary with PgBouncer's version).
func poolCount(row map[string]any, cols ...string) int {
	n := 0
	for _, c := range cols {
		switch v := row[c].(type) {
		case int64:
			n += int(v)
		case int32:
			n += int(v)
		case string:
			k, _ := strconv.Atoi(v)
			n += k
		}
	}
	return n
}
