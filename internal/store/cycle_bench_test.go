package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// The single-statement lease of the bench module's upsert reference (peer
// ref): a token from a sequence, an upsert that takes a free or expired
// row, and a delete scoped by token that commits without waiting for its
// WAL flush. It keeps none of pglease's guarantees beyond mutual exclusion
// (no token order under races, no queue, no session binding); it is the
// floor an acquire + release cycle on a lease table can reach.
const (
	refSchema = `CREATE SEQUENCE ref_token;
CREATE TABLE ref (name text PRIMARY KEY, owner text NOT NULL, token bigint NOT NULL, expires_at timestamptz NOT NULL)`
	refAcquire = `INSERT INTO ref AS l (name, owner, token, expires_at)
VALUES ($1, $2, nextval('ref_token'), now() + $3::bigint * interval '1 millisecond')
ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, token = excluded.token, expires_at = excluded.expires_at
 WHERE l.expires_at <= now()
RETURNING token`
	refRelease = `WITH del AS (DELETE FROM ref WHERE name = $1 AND token = $2 RETURNING 1)
SELECT count(*), set_config('synchronous_commit', 'off', true) FROM del`
)

// BenchmarkCycleAgainstUpsert times, alternately in every iteration, one
// round trip (SELECT 1), the upsert reference's acquire + release, and the
// store's Acquire + Release (an uncontended, unqueued plain lease; distinct
// names), on one pool. It reports each in microseconds and the ratios
// pglease/ref and pglease/roundtrip, which machine noise moves far less
// than the times: a loop of acquire → release on one name can go no faster
// than one such cycle, so this ratio bounds what a contention loop of
// pglease can reach against the reference (bench/, scenario S2).
func BenchmarkCycleAgainstUpsert(b *testing.B) {
	ctx := context.Background()
	pool := pgtest.Pool(b)
	s, err := New(pgtest.Schema(b) + ".leases")
	if err != nil {
		b.Fatal(err)
	}
	db := Pgx(pool)
	if err := s.EnsureSchema(ctx, db); err != nil {
		b.Fatal(err)
	}
	conn, err := pool.Acquire(ctx) // one connection, so that search_path holds
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET search_path TO "+pgtest.Schema(b)); err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Exec(ctx, refSchema); err != nil {
		b.Fatal(err)
	}
	q := Pgx(conn.Conn())
	var rt, ref, cycle time.Duration
	for i := 0; b.Loop(); i++ {
		name := fmt.Sprintf("n-%d", i%1024)

		t0 := time.Now()
		var one int
		if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
			b.Fatal(err)
		}

		t1 := time.Now()
		var token, n int64
		var setting string
		if err := conn.QueryRow(ctx, refAcquire, name, "me", 30_000).Scan(&token); err != nil {
			b.Fatal(err)
		}
		if err := conn.QueryRow(ctx, refRelease, name, token).Scan(&n, &setting); err != nil || n != 1 {
			b.Fatalf("reference release: %v (%d rows)", err, n)
		}

		t2 := time.Now()
		r, err := s.Acquire(ctx, q, AcquireArgs{Name: name, Owner: "me", TTL: 30 * time.Second,
			Metadata: []byte("{}"), Client: "0123456789abcdef", FairAfter: FairAfter})
		if err != nil || !r.Acquired {
			b.Fatalf("Acquire: %v (acquired %v)", err, r.Acquired)
		}
		if rel, err := s.Release(ctx, q, name, r.Token); err != nil || !rel.Released {
			b.Fatalf("Release: %v (ours %v)", err, rel.Released)
		}
		t3 := time.Now()

		rt += t1.Sub(t0)
		ref += t2.Sub(t1)
		cycle += t3.Sub(t2)
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(b.N) }
	b.ReportMetric(us(rt), "roundtrip-µs")
	b.ReportMetric(us(ref), "ref-µs")
	b.ReportMetric(us(cycle), "pglease-µs")
	b.ReportMetric(float64(cycle)/float64(ref), "pglease/ref")
	b.ReportMetric(float64(cycle)/float64(rt), "pglease/roundtrip")
}
