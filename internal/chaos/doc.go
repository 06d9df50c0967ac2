// Package chaos is pglease's fault-injection suite: it runs lease holders as
// real separate processes (the test binary re-executed), injects faults
// (SIGKILL, SIGSTOP/SIGCONT, network partitions through a TCP proxy,
// pg_terminate_backend, server restarts, statement timeouts, a saturated
// pool, PgBouncer, a minimal-privilege role, a database failover to a
// streaming standby) and checks the recorded history of critical sections
// with [Check]: no two holders' critical sections of one name overlap
// (except inside the documented window of a fast-failover session that the
// server ended), tokens increase in the order sections start and are never
// handed out twice, no holder believes in a lease past its local deadline,
// the fenced writes of each name carry non-decreasing tokens, and every
// name is held again within the TTL plus a few seconds after each fault
// heals.
//
// Every holder appends one JSON line per event to a file of its own with
// write(2), so a SIGKILL loses at most the event being written. All holders
// run on one machine and stamp events with the wall clock in nanoseconds,
// which is shared by every process (the tests never step it); Go's monotonic
// clock readings cannot be compared across processes.
//
// Run the CI suite with
//
//	go test -race ./internal/chaos/
//
// the high-availability suite on a real Patroni cluster (TestPatroni; its
// short variant runs in the suite above when Patroni and etcd are
// installed) with
//
//	make ha
//
// and the soak (at least 10,000 critical sections with faults) with
//
//	PGLEASE_SOAK=1 go test -run TestSoak -timeout 30m -v ./internal/chaos/
//
// See docs/FAILURE-MODES.md for what each fault proves, and docs/HA.md for
// the Patroni suite's results.
package chaos
