package chaos

import (
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
)

// startPgBouncer starts PgBouncer in transaction pooling mode in front of
// the server of dsn and returns a DSN through it (pgtest.PgBouncer).
func startPgBouncer(t *testing.T, dsn string) string {
	t.Helper()
	return pgtest.PgBouncer(t, dsn, "transaction")
}

// TestPgBouncerTransactionPooling runs plain-mode holders (notifications
// off: LISTEN needs a session) through PgBouncer in transaction pooling
// mode, killing holders and resetting PgBouncer's server connections.
func TestPgBouncerTransactionPooling(t *testing.T) {
	bouncer := startPgBouncer(t, pgtest.DSN(t))
	r := startRun(t, scenario{holders: 3, names: []string{"a", "b"}, dsn: bouncer, noNotify: true})
	r.waitBeliefs(5)
	for i := range 3 {
		p, _, _ := r.holderOf(r.sc.names[i%2])
		r.kill(p)
		r.spawn()
		r.waitProgress(Now())
	}
	start := Now()
	n := pgtest.TerminateBackends(t, "%") // PgBouncer's server connections and everything else
	r.addFault("terminate-all", start, 0)
	t.Logf("terminated %d backends behind PgBouncer", n)
	r.waitProgress(Now())
	r.finish(Options{Liveness: r.sc.ttl + 7*time.Second}) // waiters poll: no notifications
}
