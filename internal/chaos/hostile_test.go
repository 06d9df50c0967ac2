package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/admin"
	"github.com/pglease/pglease/internal/pgtest"
)

// unreachableDSN points at a port nothing listens on.
const unreachableDSN = "postgres://u@127.0.0.1:1/db?sslmode=disable&connect_timeout=2"

// countingServer listens on a local port that speaks no protocol and
// returns a DSN for it and a function counting the connections it
// accepted: a client that validates its input before connecting never
// reaches it.
func countingServer(t *testing.T) (dsn string, connections func() int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return "postgres://u@" + ln.Addr().String() + "/db?sslmode=disable&connect_timeout=2", func() int { return int(n.Load()) }
}

var hostileNames = map[string]string{
	"empty":        "",
	"256 bytes":    strings.Repeat("x", 256),
	"1000 bytes":   strings.Repeat("é", 500),
	"invalid utf8": "job-\xff\xfe",
	"lone surrog.": "a\xed\xa0\x80b",
	"NUL":          "a\x00b",
	"only NUL":     "\x00",
}

func TestHostileNamesAreRejectedBeforeAnythingIsSent(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	table := pgtest.Schema(t) + ".leases"
	c, err := pglease.Open(ctx, pgtest.DSN(t), pglease.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := admin.Migrate(ctx, c); err != nil {
		t.Fatal(err)
	}
	for what, name := range hostileNames {
		t.Run(what, func(t *testing.T) {
			if _, err := (pglease.Config{}).Plan(name); !isInvalid(err, "lease name") {
				t.Errorf("Config.Plan: %v", err)
			}
			_, err := c.TryAcquire(ctx, name)
			if !isInvalid(err, "lease name") {
				t.Errorf("TryAcquire: %v, want an invalid lease name", err)
			}
			if err != nil && strings.ContainsRune(err.Error(), 0) {
				t.Errorf("error message carries a NUL byte: %q", err)
			}
			actx, cancel := context.WithTimeout(ctx, time.Second)
			_, err = c.Acquire(actx, name)
			cancel()
			if !isInvalid(err, "lease name") {
				t.Errorf("Acquire: %v, want an invalid lease name", err)
			}
			if _, err := c.Get(ctx, name); !isInvalid(err, "lease name") {
				t.Errorf("Get: %v, want an invalid lease name", err)
			}
			if _, err := admin.ForceRelease(ctx, c, name); !isInvalid(err, "lease name") {
				t.Errorf("ForceRelease: %v, want an invalid lease name", err)
			}
		})
	}
	// The longest valid names work, in bytes, not runes.
	for _, name := range []string{strings.Repeat("x", 255), strings.Repeat("é", 127) + "x", "😀", "a b;'\"--"} {
		l, err := c.TryAcquire(ctx, name)
		if err != nil {
			t.Errorf("TryAcquire(%d bytes): %v", len(name), err)
			continue
		}
		if info, err := c.Get(ctx, name); err != nil || info.Name != name {
			t.Errorf("Get(%q) = %q, %v", name, info.Name, err)
		}
		_ = l.Release(ctx)
	}
	leases, err := admin.List(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(leases) != 0 {
		t.Errorf("%d rows left after rejected and released names", len(leases))
	}
}

func TestHostileTTLs(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	table := pgtest.Schema(t) + ".leases"
	bad := []time.Duration{0, -time.Second, -1, 999 * time.Millisecond, 101 * 365 * 24 * time.Hour, 1<<63 - 1, -1 << 63}
	for _, ttl := range bad {
		if ttl == 0 {
			continue // Config.TTL 0 means the default
		}
		_, err := pglease.Open(ctx, unreachableDSN, pglease.Config{Table: table, TTL: ttl})
		if !isInvalid(err, "TTL") {
			t.Errorf("Open with Config.TTL %v: %v, want an invalid TTL (before connecting)", ttl, err)
		}
	}
	c, err := pglease.Open(ctx, pgtest.DSN(t), pglease.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, ttl := range bad {
		if _, err := c.TryAcquire(ctx, "job", pglease.WithTTL(ttl)); !isInvalid(err, "TTL") {
			t.Errorf("WithTTL(%v): %v, want an invalid TTL", ttl, err)
		}
		if ttl >= 0 && ttl <= 100*365*24*time.Hour {
			continue // a valid minimum hold
		}
		if _, err := c.TryAcquire(ctx, "job", pglease.WithMinHold(ttl)); !isInvalid(err, "argument") {
			t.Errorf("WithMinHold(%v): %v, want an invalid argument", ttl, err)
		}
	}
	if _, err := pglease.Open(ctx, unreachableDSN, pglease.Config{Table: table, SafetyMargin: -time.Second}); !isInvalid(err, "argument") {
		t.Errorf("negative SafetyMargin: %v", err)
	}
	// The largest TTL accepted round-trips through the server's interval
	// arithmetic without overflow.
	big := 100 * 365 * 24 * time.Hour
	l, err := c.TryAcquire(ctx, "big", pglease.WithTTL(big))
	if err != nil {
		t.Fatalf("WithTTL(100 years): %v", err)
	}
	info, err := c.Get(ctx, "big")
	if err != nil || info.TTL != big || info.Remaining < big-time.Hour {
		t.Errorf("100-year lease: TTL %v remaining %v, %v", info.TTL, info.Remaining, err)
	}
	_ = l.Release(ctx)
	if rows, err := admin.List(ctx, c); err != nil || len(rows) != 0 {
		t.Errorf("rows left: %d, %v", len(rows), err)
	}
}

var hostileTables = []string{
	`a"b`, `leases"; DROP TABLE x; --`, `x;drop table y`, `ünïcode`, `Leases`, `a.b.c`, `.t`, `s.`, `.`,
	strings.Repeat("t", 64), `t-1`, `t t`, `"t"`, `s.t;--`, "t\x00", `1abc`, `s."t"`, `public.Leases`, " t", "t\n",
}

func TestHostileIdentifiersAreRejectedBeforeConnecting(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	dsn, connections := countingServer(t)
	for _, table := range hostileTables {
		if _, err := admin.DDL(table); !isInvalid(err, "identifier") {
			t.Errorf("DDL(%q): %v, want an invalid identifier", table, err)
		}
		_, err := pglease.Open(ctx, dsn, pglease.Config{Table: table})
		if !isInvalid(err, "identifier") {
			t.Errorf("Open(Table %q): %v, want an invalid identifier", table, err)
		}
		if n := connections(); n > 0 {
			t.Fatalf("Open(Table %q) connected (%d connections so far) before refusing the table name", table, n)
		}
		if _, err := pglease.NewFromPool(pgtest.Pool(t), pglease.Config{Table: table}); !isInvalid(err, "identifier") {
			t.Errorf("NewFromPool(Table %q): %v, want an invalid identifier", table, err)
		}
	}
	// Edge cases that are valid.
	for _, table := range []string{"_", strings.Repeat("t", 63), "s_1.t_2", "select.from"} {
		ddl, err := admin.DDL(table)
		if err != nil {
			t.Errorf("DDL(%q): %v", table, err)
			continue
		}
		for _, part := range strings.Split(table, ".") {
			if !strings.Contains(ddl, `"`+part+`"`) {
				t.Errorf("DDL(%q) does not quote %q:\n%s", table, part, ddl)
			}
		}
	}
	// Reserved words work as quoted identifiers on a real server.
	schema := pgtest.Schema(t)
	c, err := pglease.Open(ctx, pgtest.DSN(t), pglease.Config{Table: schema + ".select"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatalf("table named select: %v", err)
	}
	_ = l.Release(ctx)
}

// TestExistingTableOfAnotherShape: a table with the lease table's name
// but another layout gets a clear ErrSchema naming the mismatch, and
// nothing is altered: no column, no comment, no sequence, no rows.
func TestExistingTableOfAnotherShape(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	for _, tc := range []struct{ name, ddl, mention string }{
		{"missing columns", `CREATE TABLE %[1]s.leases (name text PRIMARY KEY, holder text, until timestamptz)`, `"owner"`},
		{"wrong type with sequence", `CREATE TABLE %[1]s.leases (name text PRIMARY KEY, owner text NOT NULL, token integer NOT NULL,
			acquired_at timestamptz NOT NULL, renewed_at timestamptz NOT NULL, expires_at timestamptz NOT NULL,
			hold_until timestamptz NOT NULL, ttl interval NOT NULL, session_pid integer, metadata jsonb NOT NULL DEFAULT '{}');
			CREATE SEQUENCE %[1]s.leases_token_seq`, `"token"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			schema := pgtest.Schema(t)
			s := pgx.Identifier{schema}.Sanitize()
			adminExec(t, pgtest.DSN(t), fmt.Sprintf(tc.ddl, s)+`; COMMENT ON TABLE `+s+`.leases IS 'the app''s own table'`)
			before := catalogSnapshot(t, schema)
			c, err := pglease.Open(ctx, pgtest.DSN(t), pglease.Config{Table: schema + ".leases"})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			err = admin.Migrate(ctx, c)
			if !errors.Is(err, pglease.ErrSchema) {
				t.Fatalf("Migrate: %v, want ErrSchema", err)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("error does not name the mismatch %s: %v", tc.mention, err)
			}
			if _, err := c.TryAcquire(ctx, "job"); !errors.Is(err, pglease.ErrSchema) {
				t.Errorf("TryAcquire: %v, want ErrSchema", err)
			}
			if after := catalogSnapshot(t, schema); after != before {
				t.Errorf("the schema was altered although the error says nothing was changed:\nbefore: %s\nafter:  %s", before, after)
			}
		})
	}
}

// catalogSnapshot describes every relation, column and table comment of a
// schema.
func catalogSnapshot(t *testing.T, schema string) string {
	ctx := ctxT(t, 10*time.Second)
	conn, err := pgx.Connect(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var s string
	err = conn.QueryRow(ctx, `SELECT coalesce(string_agg(format('%s(%s)[%s]{%s}', c.relname, c.relkind,
			coalesce(obj_description(c.oid, 'pg_class'), ''),
			(SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ',' ORDER BY a.attnum)
			   FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)), '; ' ORDER BY c.relname), '')
		FROM pg_class c WHERE c.relnamespace = $1::regnamespace`, schema).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestUnreachableDSN(t *testing.T) {
	ctx := ctxT(t, patience)
	const pw = "s3cr3t-Horse-Battery"
	for _, dsn := range []string{
		"postgres://app:" + pw + "@127.0.0.1:1/db?sslmode=disable&connect_timeout=2",
		"host=127.0.0.1 port=1 user=app password=" + pw + " dbname=db sslmode=disable connect_timeout=2",
		"postgres://app:" + pw + "@127.0.0.1:notaport/db",
		"host=127.0.0.1 port=1 user=app password='" + pw + "' sslmode=bogus",
		"postgres://app:" + pw + "@[::1/db",
	} {
		start := time.Now()
		_, err := pglease.Open(ctx, dsn, pglease.Config{})
		took := time.Since(start)
		if err == nil {
			t.Errorf("Open(%q) succeeded", dsn)
			continue
		}
		// Open gives up by itself (connect_timeout, a refused connection,
		// a DSN it cannot parse), not when the caller's context ends.
		if ctx.Err() != nil {
			t.Fatalf("Open(%q) returned only when the test's context ended: %v", dsn, err)
		}
		if strings.Contains(err.Error(), pw) {
			t.Errorf("error echoes the password: %v", err)
		}
		if !strings.HasPrefix(err.Error(), "pglease: ") {
			t.Errorf("error lacks the pglease: prefix: %v", err)
		}
		t.Logf("after %v: %v", took.Round(time.Millisecond), err)
	}
}

// TestWrongPassword adds a scram-sha-256 rule for one role to the shared
// cluster's pg_hba.conf (everything else stays trust) and checks that a
// wrong password gives a clear error that does not echo it.
func TestWrongPassword(t *testing.T) {
	cl := pgtest.RequireCluster(t)
	ctx := ctxT(t, time.Minute)
	base := pgtest.DSN(t)
	role := fmt.Sprintf("chaos_pw_%d", os.Getpid())
	adminExec(t, base, `DROP ROLE IF EXISTS `+role)
	adminExec(t, base, `SET password_encryption = 'scram-sha-256'; CREATE ROLE `+role+` LOGIN PASSWORD 'right-Pass-1234'`)
	t.Cleanup(func() { adminExec(t, base, `DROP ROLE IF EXISTS `+role) })
	hba := filepath.Join(cl.DataDir(), "pg_hba.conf")
	orig, err := os.ReadFile(hba)
	if err != nil {
		t.Fatal(err)
	}
	rule := fmt.Sprintf("host all %s 127.0.0.1/32 scram-sha-256\n", role)
	if err := os.WriteFile(hba, append([]byte(rule), orig...), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = os.WriteFile(hba, orig, 0o600)
		adminExec(t, base, `SELECT pg_reload_conf()`)
	})
	adminExec(t, base, `SELECT pg_reload_conf()`)

	const wrong = "wrong-Pass-5678"
	dsn := strings.Replace(base, "postgres@", role+":"+wrong+"@", 1)
	// The reload is asynchronous: until the server has read the new rule,
	// trust still lets the role in.
	if !pgtest.Eventually(patience, func() bool {
		var c *pglease.Client
		c, err = pglease.Open(ctx, dsn, pglease.Config{})
		if err == nil {
			c.Close()
		}
		return err != nil
	}) {
		t.Fatalf("Open with a wrong password still succeeded %v after the reload", patience)
	}
	if strings.Contains(err.Error(), wrong) {
		t.Errorf("error echoes the password: %v", err)
	}
	if !strings.Contains(err.Error(), "password authentication failed") {
		t.Errorf("error does not say what failed: %v", err)
	}
	if pglease.IsRetryable(err) {
		t.Errorf("a wrong password is reported as retryable: %v", err)
	}
	t.Logf("%v", err)
	c, err := pglease.Open(ctx, strings.Replace(base, "postgres@", role+":right-Pass-1234@", 1), pglease.Config{})
	if err != nil {
		t.Fatalf("Open with the right password: %v", err)
	}
	c.Close()
}
