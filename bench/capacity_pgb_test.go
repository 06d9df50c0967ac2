package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestFirstHandoff(t *testing.T) {
	ev := func(got bool, name string, at int64) capEvent { return capEvent{got: got, name: name, at: at} }
	events := []capEvent{
		ev(true, "n0", 900),   // before the release
		ev(false, "n0", 1200), // a release, not an acquisition
		ev(true, "n1", 1010),  // another name
		ev(true, "n0", 1500),
		ev(true, "n0", 1300),
	}
	if got := firstHandoff(events, "n0", 1000); got != 300 {
		t.Errorf("firstHandoff = %v, want 300ns", got)
	}
	if got := firstHandoff(events, "n2", 1000); got != 0 {
		t.Errorf("firstHandoff of a name never acquired = %v, want 0", got)
	}
	// An acquisition stamped at the release itself still counts.
	if got := firstHandoff([]capEvent{ev(true, "n0", 1000)}, "n0", 1000); got <= 0 {
		t.Errorf("firstHandoff at t0 = %v, want > 0", got)
	}
}

func TestDursMean(t *testing.T) {
	if got := (durs{1 * time.Second, 2 * time.Second, 6 * time.Second}).mean(); got != 3*time.Second {
		t.Errorf("mean = %v, want 3s", got)
	}
	if got := durs(nil).mean(); got != 0 {
		t.Errorf("mean of nothing = %v", got)
	}
}

func TestPoolCount(t *testing.T) {
	row := map[string]any{"database": "bench", "cl_active": int64(7), "cl_waiting": int32(2), "sv_idle": "3", "sv_active": int64(1), "maxwait": int64(99)}
	if got := poolCount(row, "cl_active", "cl_waiting", "cl_active_cancel_req"); got != 9 {
		t.Errorf("clients = %d, want 9", got)
	}
	if got := poolCount(row, "sv_active", "sv_idle", "sv_used"); got != 4 {
		t.Errorf("servers = %d, want 4", got)
	}
}

func TestPgBouncerIni(t *testing.T) {
	ini := pgBouncerIni("127.0.0.1", "5432", 6543, "postgres", "/tmp/x", 20)
	for _, want := range []string{"* = host=127.0.0.1 port=5432", "listen_port = 6543", "pool_mode = transaction", "default_pool_size = 20", "admin_users = postgres", "auth_file = /tmp/x/users.txt"} {
		if !strings.Contains(ini, want) {
			t.Errorf("ini lacks %q:\n%s", want, ini)
		}
	}
	b := &pgBouncer{addr: "127.0.0.1:6543", user: "postgres"}
	if got, want := b.dsn("bench"), "postgres://postgres@127.0.0.1:6543/bench?sslmode=disable&default_query_exec_mode=exec"; got != want {
		t.Errorf("dsn = %q, want %q", got, want)
	}
}

func TestCapConfigOnly(t *testing.T) {
	cc := capConfigSized(false).only(map[string]bool{"pgbouncer": true})
	if len(cc.leaseNs)+len(cc.leaseFFNs)+len(cc.clientNs)+len(cc.waits) != 0 || len(cc.pgbs) == 0 {
		t.Errorf("only pgbouncer kept %+v", cc)
	}
	// The direct comparison row needs its connections (3 per client at most).
	if got := cc.maxConnsNeeded(); got < 300 {
		t.Errorf("maxConnsNeeded = %d, want at least 3 × 100", got)
	}
	if all := capConfigSized(true).only(nil); len(all.leaseNs) == 0 || len(all.pgbs) == 0 {
		t.Errorf("no parts selected kept %+v", all)
	}
}

func TestCapPgbMarkdown(t *testing.T) {
	const sec = time.Second
	r := synthetic()
	r.pgbVer = " 1.18.0"
	bg := window(10*sec, 0, 0, 0, 5) // 5 connections before the waiters
	ok := func(c capPgbCase, stmts int64, cpu time.Duration, conns int, wake ...time.Duration) capPgbRow {
		x := capPgbRow{capPgbCase: c, holderTTL: 30 * sec, base: capSnap{c: counters{conns: bg.conns}}, d: window(10*sec, stmts, stmts, cpu, conns)}
		x.wake = durs(wake).sorted()
		return x
	}
	pgb := ok(capPgbCase{100, 4, true}, 205, 600*time.Millisecond, 25, 4*sec, 1*sec, 2500*time.Millisecond, 3*sec)
	pgb.pgb, pgb.pgbCPU = pgbPools{clients: 200, servers: 20}, 300*time.Millisecond
	direct := ok(capPgbCase{100, 4, false}, 3, 0, 305, 5*time.Millisecond, 7*time.Millisecond)
	failed := capPgbRow{capPgbCase: capPgbCase{10, 2, true}, err: errors.New("boom")}
	partly := ok(capPgbCase{10, 2, true}, 21, 0, 12, 2*sec)
	partly.err = errors.New("round 1: no waiter acquired within 20s")
	r.pgbs = []capPgbRow{pgb, direct, failed, partly}
	md := r.markdown()
	for _, want := range []string{
		"### Waiters behind PgBouncer (transaction pooling)",
		"through PgBouncer 1.18.0 in transaction pooling mode (default_pool_size 20",
		// 205 statements in 10 s; 100 ÷ 5 s + 3 ÷ 30 s expected; 0.6 s of
		// CPU less 1% idle = 5%; 25 − 5 connections; PgBouncer 3%;
		// wake-ups: mean 2.625 s.
		"| PgBouncer | 100 | 4 | 20.5 | 20.1 | 5.0 | 20 | 200 | 20 | 3.0 | 4 | 2625 | 2500 | 4000 | 4000 |",
		// 3 statements in 10 s; CPU below what the counters resolve.
		"| direct | 100 | 4 | 0.30 | 20.1 | – | 300 | – | – | – | 2 | 6.0 | 5.0 | 7.0 | 7.0 |",
		"| PgBouncer | 10 | 2 | | | | | | | | | | | | error: boom |",
		"PgBouncer, 10 waiters: error: round 1: no waiter acquired within 20s",
		"PgBouncer beyond the waiters above",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	if strings.Contains(md, "NaN") || strings.Contains(md, "Inf") || strings.Contains(md, "%!") {
		t.Errorf("markdown has a bad number or verb:\n%s", md)
	}

	r.pgbs, r.pgbSkipped = nil, errNoPgBouncer
	if md := r.markdown(); !strings.Contains(md, "Skipped: ") || !strings.Contains(md, "not installed") {
		t.Errorf("skipped rows not explained:\n%s", md)
	}
	r.pgbSkipped = nil
	if md := r.markdown(); strings.Contains(md, "behind PgBouncer (transaction") || !strings.Contains(md, "replication and synchronous standbys, PgBouncer, ") {
		t.Errorf("markdown without PgBouncer rows mentions them")
	}
}
