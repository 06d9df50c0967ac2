package chaos

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/pgcluster"
	"github.com/pglease/pglease/internal/pgtest"
)

// haPair starts a throwaway primary and a streaming standby and returns
// them with a multi-host DSN that follows the primary
// (target_session_attrs=read-write).
func haPair(t *testing.T, opt pgcluster.StandbyOptions) (primary, standby *pgcluster.Cluster, dsn string) {
	t.Helper()
	if _, err := pgcluster.FindBinaries(); err != nil {
		t.Skip(err)
	}
	ctx := ctxT(t, 2*time.Minute)
	primary = startPrimary(ctx, t)
	standby, err := primary.AddStandby(ctx, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.Close() })
	dsn = fmt.Sprintf("postgres://postgres@%s:%d,%s:%d/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		primary.Host(), primary.Port(), standby.Host(), standby.Port())
	return primary, standby, dsn
}

// failover kills the primary (SIGKILL of the postmaster and its children:
// a crash, not a clean switchover) and promotes the standby.
func failover(t *testing.T, r *run, primary, standby *pgcluster.Cluster) {
	t.Helper()
	failoverThen(t, r, primary, standby, func() {})
}

// failoverThen is failover, running beforePromote between the primary's
// crash and the standby's promotion (the standby still a hot standby).
func failoverThen(t *testing.T, r *run, primary, standby *pgcluster.Cluster, beforePromote func()) {
	t.Helper()
	start := Now()
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	beforePromote()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	r.addFault("failover", start, 0)
	t.Logf("failover took %v", time.Duration(Now()-start).Round(time.Millisecond))
}

// TestFailoverSyncReplication: with a synchronous standby every granted
// lease and every token is on the standby before the grant is reported, so
// a crash of the primary and promotion of the standby while leases are
// held loses nothing: no overlap, tokens still increase. The promoted
// standby holds none of the old primary's session locks, so session-bound
// leases fall back to the rows' expiry.
func TestFailoverSyncReplication(t *testing.T) {
	bothModes(t, func(t *testing.T, fast bool) {
		primary, standby, dsn := haPair(t, pgcluster.StandbyOptions{Sync: true})
		r := startRun(t, scenario{holders: 3, names: []string{"a", "b"}, dsn: dsn, admin: dsn, fast: fast})
		r.waitBeliefs(20)
		failover(t, r, primary, standby)
		r.waitProgress(Now())
		rep := r.finish(Options{})
		if rep.Sections < 4 {
			t.Errorf("only %d sections: no progress across the failover?", rep.Sections)
		}
	})
}

// TestFailoverAsyncReplication measures what asynchronous replication
// loses. Replication runs through a proxy that is blackholed for lagWindow
// before the primary crashes, standing in for replication lag: every lease
// granted and every token drawn in that window is unknown to the promoted
// standby. The test reports what was lost and which of the properties
// that [Check] verifies broke; it fails only if nothing was lost (the
// measurement did not work).
func TestFailoverAsyncReplication(t *testing.T) {
	if _, err := pgcluster.FindBinaries(); err != nil {
		t.Skip(err)
	}
	ctx := ctxT(t, 2*time.Minute)
	primary := startPrimary(ctx, t)
	repl := pgtest.NewProxy(t, fmt.Sprintf("%s:%d", primary.Host(), primary.Port()))
	standby, err := primary.AddStandby(ctx, pgcluster.StandbyOptions{PrimaryAddr: repl.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.Close() })
	dsn := fmt.Sprintf("postgres://postgres@%s:%d,%s:%d/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		primary.Host(), primary.Port(), standby.Host(), standby.Port())

	r := startRun(t, scenario{holders: 3, names: []string{"a", "b"}, dsn: dsn, admin: dsn,
		csMin: 50 * time.Millisecond, csMax: 150 * time.Millisecond})
	r.waitBeliefs(20)

	// Natural lag on this machine, for the record.
	var lag string
	if conn, err := pgx.Connect(ctx, primary.DSN("")); err == nil {
		_ = conn.QueryRow(ctx, `SELECT coalesce(max(replay_lag)::text, 'n/a') FROM pg_stat_replication`).Scan(&lag)
		conn.Close(ctx)
	}
	const lagWindow = 1500 * time.Millisecond
	repl.Blackhole(true)
	time.Sleep(lagWindow) // the fault itself: leases and tokens the standby will not know
	seqAtCrash := maxToken(t, primary.DSN(""), r.schema)
	// What the standby knows is read before its promotion: once promoted,
	// the holders draw new tokens on it at once, and a read after that
	// would count them (a clean-clone CI run failed so: 35 on the primary,
	// 37 "known" to the standby).
	var seqAfterPromote int64
	failoverThen(t, r, primary, standby, func() { seqAfterPromote = maxToken(t, standby.DSN(""), r.schema) })
	// Progress after the promotion is reported, not required: what the
	// failover lost may stall a name.
	progressed := r.progressed(Now(), patience)

	events, _ := LoadDir(r.dir)
	granted := map[int64]bool{}
	for _, e := range events {
		if e.K == KindAcquired && e.Tok > seqAfterPromote && e.Tok <= seqAtCrash {
			granted[e.Tok] = true
		}
	}
	// Check, but report instead of failing: these violations are the
	// documented price of asynchronous replication.
	r.stopAll()
	writes := r.writes()
	rep := Check(events, writes, r.faults, Options{Names: r.sc.names, StaleTolerance: r.sc.ttl / 5})
	t.Logf("async failover: natural replay lag %s; replication blackholed %v before the crash", lag, lagWindow)
	t.Logf("tokens drawn on the old primary: up to %d; the promoted standby's tables know tokens up to %d",
		seqAtCrash, seqAfterPromote)
	t.Logf("acquisitions granted in the lag window and lost by the failover: %d", len(granted))
	t.Logf("every name written again after the promotion: %v", progressed)
	t.Logf("history after the async failover: %s", rep)
	if seqAtCrash <= seqAfterPromote {
		t.Errorf("nothing was lost: the lag window did not work (tokens %d on the primary, %d on the standby)", seqAtCrash, seqAfterPromote)
	}
}

// maxToken is the highest token recorded in the fence and lease tables of
// the server at dsn (0 if it cannot be read).
func maxToken(t *testing.T, dsn, schema string) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Logf("maxToken: %v", err)
		return 0
	}
	defer conn.Close(ctx)
	var n int64
	s := pgx.Identifier{schema}.Sanitize()
	err = conn.QueryRow(ctx, `SELECT greatest((SELECT coalesce(max(token), 0) FROM `+s+`.leases),
		(SELECT coalesce(max(last_token), 0) FROM `+s+`.fence),
		(SELECT coalesce(max(token), 0) FROM `+s+`.writes))`).Scan(&n)
	if err != nil {
		t.Logf("maxToken: %v", err)
	}
	return n
}

// startPrimary starts a throwaway cluster configured to stream WAL to a
// standby.
func startPrimary(ctx context.Context, t *testing.T) *pgcluster.Cluster {
	t.Helper()
	primary, err := pgcluster.Start(ctx, pgcluster.Options{Logf: t.Logf, Settings: map[string]string{
		"wal_level": "replica", "max_wal_senders": "5", "wal_keep_size": "256MB",
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Close() })
	return primary
}
