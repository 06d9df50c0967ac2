// Package combination is pglease's combination test: seeded, random
// sequences of modes, topologies and faults against a real server, each
// checked against pglease's guarantees (which hold for every mode mixed
// with every other on one table) and the liveness bounds.
//
// # How a sequence runs
//
// A driver (the test) starts agents, each a pglease.Client in a process of
// its own (the test binary re-executed, as internal/chaos does) behind a
// TCP fault proxy of its own, and sends them calls as JSON lines; they
// answer with what happened, stamped with the machine's wall clock, which
// every process shares. Every sequence works on one fresh, empty schema
// and the names "a", "b", "c" and "d" (mostly fast failover, a
// semaphore or a quota, any mode, shared leases). It begins as a fleet of replicas does:
// every agent opens its client, then all create the table at once, half of
// them spelling it "leases" under a search_path, half "schema.leases".
//
// One sequence in four begins as a rolling upgrade does: two agents of
// the previous release (commit 9bec93e, schema version 10: its own
// combination test binary, built once per run from git archive, kept in
// the temporary directory for later runs, and left out with a log line
// where the history is missing, as in a shallow clone) open their
// clients and create the table at version 10, hold and wait on names; then
// (DoUpgrade) the agents of this version arrive in the other slots and
// migrate the table under them. The old agents go on with every step
// but a shutdown (as those of releases that did not report their Close),
// and make an acquisition in a quota mode as a plain lease, fast failover
// or not (release 9, which these sequences ran until issue 43, knew no
// quota; release 10's agents keep to it): it meets the quota's holders as
// another kind, and that release's *KindError refuses it, as this
// version's refuses a quota beside the old agent's lease (release 9
// read a quota's rows as shared leases, through this version's
// compatibility wrapper, which TestOlderReleaseDuringAnUpgrade still
// runs); now and then, right after the upgrade,
// an agent of this version takes units of a quota and the old agents try
// the name and wait for it in their kinds. A killed old agent is replaced
// by an agent of this version, as a replica restarted after its upgrade
// would be. The checker holds old and new agents alike
// to every property, with what the upgrade documents: an old agent's
// set, a statement of its own, is refused by this version's fence with
// an error that says to upgrade ("an older release, fenced"), and so is
// its single acquisition whose statement was in flight across the
// migration (waiting inside the earlier version's function, whose body
// writes without the fence's mark); a fast-failover lease of an old
// agent is held to the expiry bound (the agents of schema version 8 wrote
// the earlier form of the server incarnation, so their rows were taken
// over at expiry; the bound holds for those of versions 9 and 10 too),
// as is an old agent's wait behind a first waiter that died with the
// holder (release 9 looked again only at its poll there; release 10 takes
// over at once, and the bound only tolerates more).
// PGLEASE_COMBO_UPGRADE=1 makes every sequence an upgrade, =0 none.
//
// Then come the steps ([Step]): acquisitions in every mode (plain, fast
// failover, slots of 2 or 3, fast-failover slots, shared leases plain or
// fast-failover, 1 or 2 units of a quota of 3 plain or fast-failover
// (WithQuota: modes quota3w1, quota3w2, fast-quota3w1, fast-quota3w2),
// now and then with a maximum hold, sets of names with
// AcquireAll and TryAcquireAll; blocking ones with a timeout), releases,
// step-down requests (which the holding agent obeys by releasing), fenced
// writes with Lease.Guard in a transaction of the agent's own to a
// register table (with a lease that is held, or one that has ended),
// reads of the registers, and faults: pg_terminate_backend of an agent's
// client's backends, SIGKILL of an agent (a new process takes its place),
// SIGKILL of a name's holder and of the first waiter for it in another
// process in the same instant (a holder and the first waiter in its queue
// dying together, as when one node ran both; new processes take both
// places),
// a shutdown in the middle of a call (the agent starts a blocking
// acquisition of a name in any mode or of a set and, a moment after its
// statement left, gets SIGTERM: it cuts every call's context and closes
// its client at once, as a service does; a new process takes its place),
// SIGSTOP for longer than the TTL, a network partition through the proxy,
// a connection reset on the client's side only (the proxy resets the
// agent's side and keeps the server's open: its backends live on), a
// slow client (its traffic delayed by the proxy), an operator's reset of
// the server's statistics just before a fast-failover holder's session
// ends, and a server restart. The generator (seeded) works in episodes: a name,
// its holders, one or more waiters in one client or in several, then one
// or two events that free the name (so that the second holder got the
// name by a hand-off, a step-down, a shutdown, a fast-failover take-over
// or an expiry take-over), with other steps between episodes; now and then it mixes
// modes on a name (fast failover or not, another slot count, another
// weight of a quota, a lease on a name beside slots of a semaphore or
// units of a quota of that name, exclusive waiters behind shared
// holders). A quota's episode fills it with holders of either weight, and
// its waiters, of either weight, wait first in line first. A step that frees a name
// waits until a waiter holds it again, or the bound that applies has
// passed.
//
// # What is checked
//
// [Check] reads the history of a sequence and reports:
//
//   - overlap: a name held beyond what it admits at some instant. A plain
//     lease on x (or a set's lease on x), the slot leases x#i of a
//     semaphore x, the shared leases x#i of x and the holders x#i of a
//     quota x are one resource: a plain holder excludes everyone, at most
//     N slot holders hold at once, shared holders admit each other and
//     nobody else, and a quota's holders admit each other and nobody
//     else while their weights sum to at most its capacity. A holder holds from its
//     acquisition's return until it calls Release (or, shutting down,
//     Close), its lease's Done fires (or its local deadline passes, if
//     earlier), or its process is killed.
//     The documented window is allowed: when the server ends a
//     fast-failover holder's session (pg_terminate_backend), its successor
//     may hold before the old holder hears of it.
//   - token order: an acquisition of a row that returned before another
//     was called has the smaller token; no token is granted twice.
//   - stale write: a guarded write committed with a lease that had ended
//     before the write began, or after a newer token of its row was
//     granted; each register's log has non-decreasing tokens.
//   - unexpected error: a call that failed with no cause in the history
//     (the name held, a wait timed out, another slot count, a fault near
//     the call, a lease of another kind on the name — which is what the
//     library must refuse, a quota beside any other kind included —, an
//     ended lease for a guard); opening a client
//     and creating the table included.
//   - lost lease: a lease that ended without a release or a fault near it
//     (one ended by its maximum hold is not lost, but must not end before
//     the hold was due: "early hold limit").
//   - unbound fast-failover lease: a lease acquired with fast failover
//     that is not bound to its holder's session.
//   - left after close: a row of a shut-down agent's client still held
//     once its Close has returned without an error (as the driver reads
//     the table then), be it a lease it held or one a call it cut was
//     granted; a Close that fails without a fault nearby is an unexpected
//     error.
//   - liveness: after each event that freed a name while a live waiter
//     waited for it, the first acquisition of the name went to a waiter,
//     within the bound of the event: a release (a hand-off, or a
//     step-down's release, or the end of a lease at its maximum hold,
//     which deletes its row) 100 ms from the release's return to the
//     waiter's Acquire returning (a waiter may return before the releaser
//     has: zero); a shutdown, 100 ms from Close's return, for the names
//     the client held and those its cut calls asked for (which their
//     statements may have been granted); the end of a fast-failover
//     holder's session (SIGKILL,
//     pg_terminate_backend, a reset on the client's side) 1 s, for every waiter of a single name, a
//     semaphore or a set, plain or fast-failover; a
//     holder that stopped renewing (killed plain holder, SIGSTOP,
//     partition, or a restart for fast-failover leases) TTL +
//     PollInterval from the fault.
//
// A waiter killed by the event's instant is no waiter: its locks and its
// place in the queue free with it, so when a holder and the first waiter
// die together the waiters left are measured, against the bound of the
// holder's death (fast failover's for a fast-failover holder, the expiry
// bound for a plain one). When the first waiter asked for no fast failover,
// it may have taken the name in the moment between the two SIGKILLs (it
// watches the holder's session and acts as soon as that ends; the grant's
// statement runs on after its process died): a plain lease, which lives
// until it expires, about a TTL after the kill, as a killed plain holder's
// does; such a take-over is held to the expiry bound and listed in the
// figures. A freed name is not measured when another fault
// hit a waiter, the server, or the holder (unless the event is the
// holder's SIGKILL: however it got and kept its lease, its death must be
// noticed) from 2 s before the event until the take-over (a woken waiter
// that cannot act holds the others up, as documented; a waiter killed
// after the event too: a release that woke it leaves the others to their
// next look, a known gap), when
// other holders leave no room (for a quota: when the units still held
// and the first waiter's, first in line first, exceed its capacity),
// when a new attempt took it first, or when
// every waiter gave up; the figures count these.
//
// The bounds have slack where the machine, not the specification, needs
// it: the tests run with -race on two shared cores, beside other
// packages' tests, and each time is stamped by a process after its call
// returned, so a scheduling delay in either process adds to the latency:
// 250 ms on the hand-off's 100 ms (hand-offs take a few milliseconds, p99
// about 50 ms there; the slower ones seen, 100-250 ms, were the library's
// own: a semaphore's waiter in the releasing client), 500 ms on fast
// failover's 1 s, 1 s on the expiry bound. The figures logged at the end
// list every measurement over the specification's bound that the slack
// let through.
//
// # Failures, seeds and shrinking
//
// A failing sequence is printed with its seed, its violations and its
// steps. Each kind of violation not yet shrunk in the run is then shrunk:
// the prefix up to the step in which it happened, then chunks of steps
// dropped while it still happens (each try a new run), within a time
// budget; the shortest sequence is printed, also as a Go literal to paste
// into the regression cases (TestRegressions), which run through the
// same driver and checker. A seed replays the generator's choices, which
// also depend on what the run did (who holds what), so a failure's
// printed steps are its reliable replay.
//
// # Running
//
//	go test -run 'TestCombination|TestRegressions' -v ./internal/combination/   # 3 new seeds × 30 steps, and the regressions
//	PGLEASE_COMBO_SEED=123 go test -run TestCombination -v ./internal/combination/
//	PGLEASE_SOAK=1 go test -run TestCombination -timeout 150m -v ./internal/combination/   # 40 seeds × 60 steps (make soak)
//
// PGLEASE_COMBO_SEEDS and PGLEASE_COMBO_STEPS change the number of seeds
// and steps, PGLEASE_COMBO_SHRINK the shrinking budget in seconds (0: no
// shrinking), PGLEASE_COMBO_VERBOSE=1 prints every sequence. The figures
// at the end give the sequences, steps, faults, seeds and violations, the
// openings measured (a quota's apart) and why others were not, the
// refusals between a quota and another kind (with what the previous
// release's agents said, each message once), and the latencies of
// hand-offs and take-overs per topology. With
// PGLEASE_HISTORY_DIR set, every sequence's history is also written for
// the external linearizability checker (the nested module lincheck; see
// internal/linhist).
package combination
