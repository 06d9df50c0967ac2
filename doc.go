// Package pglease turns a PostgreSQL database into a distributed lock
// manager: named leases with a time-to-live, mutual exclusion across
// processes and hosts, fencing tokens, leader election helpers and "run this
// job on exactly one instance". Open a [Client], acquire a name, work under
// the lease's context, release it (the package's Example, which runs):
//
//	client, err := pglease.Open(ctx, os.Getenv("DATABASE_URL"), pglease.Config{})
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer client.Close()
//	lease, err := client.Acquire(ctx, "example-report", pglease.WithTTL(30*time.Second))
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer lease.Release(ctx)
//	// Work under lease.Context(): it ends the moment the lease is lost.
//	work := lease.Context()
//
// Mechanisms: docs/DESIGN-WAITING.md, DESIGN-KINDS.md, DESIGN-FAST-FAILOVER.md.
//
// # Model
//
// A lease is one row of a table (default "pglease_leases") keyed by name.
// [Client.TryAcquire] inserts the row, or takes it over when it has expired,
// in one round trip, and gives the new holder a fencing token drawn from a
// sequence. The holder's [Client] renews every lease it holds with one
// statement per renewal interval (TTL/3 by default) on a connection of its
// own (see Connections), so renewals never queue behind the application's
// use of a shared pool. [Lease.Release] deletes the row and wakes the first waiting client,
// so [Client.Acquire] wakes at once instead of polling (see Waiting).
//
// # Guarantees
//
//   - Mutual exclusion in time. A holder considers its lease valid only until
//     its local deadline: the moment it sent the last successful acquire or
//     renew statement, plus the TTL, minus a safety margin, measured on its
//     own monotonic clock. The server sets the row's expiry to its now() +
//     TTL, and now() is read after the statement was sent, so the local
//     deadline passes before the row can expire. A slow but successful round
//     trip never extends trust. When the deadline passes without a renewal,
//     the lease's context ([Lease.Context]) ends with the cause
//     [ErrLeaseLost] before any other client can acquire the name, as long
//     as the holder process is not paused (GC, SIGSTOP, VM freeze) for
//     longer than the safety margin.
//   - Fencing. Every acquisition gets a token from a sequence: strictly
//     greater than every token any earlier holder of the name received,
//     across releases, expiry, cleanup and restarts of the database or
//     clients, and across the loss of the table, under the conditions of
//     docs/FAILURE-MODES.md, "A lost table" (a new token sequence starts at
//     the server clock). Renewal never changes the token, so a lost renewal
//     reply is simply retried.
//     [Lease.Guard] checks the token inside the caller's own transaction and
//     locks the row until commit, so a stale holder's write to the same
//     database cannot commit.
//   - One clock. Every expiry, remaining time and heartbeat age is computed in
//     SQL with the server's clock. Client wall clocks are never compared with
//     server timestamps.
//   - Nothing stolen. Renew and release are scoped by (name, token); two
//     clients that share an owner label cannot touch each other's leases.
//     Only admin.ForceRelease takes a lease from its holder, and the
//     holder learns of it at its next renewal.
//   - Within one Client a name is a mutex between goroutines too: there is no
//     silent re-entry.
//   - Bad input (names, TTLs, identifiers) is rejected with a typed error
//     before anything is sent.
//
// They hold for every kind of lease and between kinds: they are the rows'
// rules, checked under the name's lock. Mutual exclusion and fencing do not
// depend on the queue of waiters, which decides only who takes a free lease.
//
// # What is not guaranteed
//
//   - A process paused for longer than the safety margin may resume after
//     its lease was granted to someone else and act before it notices. Its
//     lease's context is already past its deadline when it resumes; use the
//     fencing token or [Lease.Guard] to make the protected resource reject it.
//   - Leases are as durable as the database. With asynchronous replication a
//     failover may lose the last acquisitions and renewals; see
//     docs/FAILURE-MODES.md. A release does not wait for its WAL flush, so a
//     server crash right after it can bring the row back until it expires:
//     that costs availability, never safety. Acquisitions and renewals always
//     wait for it, whatever synchronous_commit a role, a database or the
//     connection sets.
//   - A step of the server's clock (not the clients') changes every
//     expiry at once; keep the server on NTP with slewing.
//
// # Clocks
//
// The server decides expiry with now(); a client only ever gives up early, on
// its monotonic clock. Client wall clocks may be skewed or jump harmlessly.
//
// # Failure handling
//
//   - Transient errors (connection reset, server restart, failover) are
//     retried with bounded, jittered backoff, never past a lease's deadline;
//     others are returned. [IsRetryable] tells them apart.
//   - When renewals keep failing the lease is lost at its local deadline;
//     when a renewal finds the row taken over or force-released, the lease is
//     lost at once. Either way the lease's context ends, and its cause
//     (context.Cause) wraps [ErrLeaseLost].
//   - A holder that is alive but stuck keeps renewing: only a hold limit
//     ([WithMaxHold]) takes the name from it. At the limit, on the holder's
//     monotonic clock from when the acquisition was sent, the lease's context
//     ends with a cause matching [ErrHoldLimit] and [ErrLeaseLost]; only then
//     is its row deleted, by token, so a waiter may take the name at once.
//     The work must stop when the context ends, as on any loss; one too stuck
//     to notice is what fencing tokens are for. A delete that fails leaves
//     the row to expire within the TTL.
//   - A cancelled acquire leaves nothing behind: its statement runs to
//     completion on a detached, bounded context, and if it acquired, the row
//     is released by token at once. So is a reply that arrives after the
//     lease's own deadline. If the connection breaks after the statement
//     committed (the reply is lost), the row carries the client's random id
//     in its metadata: the client frees it by token in the background once no
//     call of its own asks for the name, and its next attempt on the name
//     recognises it as its own. Another client is never affected, even with
//     the same owner label.
//   - [Client.Close] releases every lease, and what its calls in flight are
//     granted: it waits for their statements (a call cut by its context
//     included) instead of cutting them, releases the rows that a statement
//     whose reply was lost may have been granted, and only then stops every
//     goroutine and waits for them. Nothing the server granted to a closed
//     client stays held, a minimum hold ([WithMinHold]) aside. When the
//     database does not answer, Close waits 5 s for the statements in flight,
//     cuts them, and tries its releases for 5 s more; its error then names
//     what it could not release, which expires after its TTL.
//   - An [Elector]'s term ends with its lease (or on [Elector.Resign]), and
//     its lead function is expected to return then; pglease cannot make it.
//     [Elector.Check] and the [Elector] HTTP handler report a lead function
//     still running past the term's end plus a tolerance to a liveness probe,
//     so that the process is restarted. Failing renewals alone do not fail
//     the probe: the term ends and the elector campaigns again.
//
// # Errors
//
// Every error starts with "pglease: " (once) and matches a sentinel of this
// package with errors.Is, is one of its error types (errors.As), or wraps
// the driver's error. Bad input is refused before anything is sent and
// changes nothing: a [Config] when the client is created, a name or an
// [Option] at the call; the error is an *[InvalidError], whose Kind says
// what was refused. A lease held elsewhere is a *[HeldError] matching
// [ErrNotAcquired]; an acquisition whose context ended also matches
// ctx.Err(). A name asked for as another kind of lease than its live leases
// hold is a *[KindError], returned at once. Database errors name what
// pglease was doing and, where the server said why (a missing privilege,
// table or database), what to do about it.
//
// # Kinds of lease
//
//	kind           asked for with             held at once by             tokens
//	plain lease    Acquire, TryAcquire        one holder                  its own
//	semaphore      + WithSlots(n), n ≤ 1000   up to n holders, each in    one per slot
//	                                          a slot "name#i"
//	shared lease   + WithShared               any number of shared        one per holder
//	                                          holders, or one exclusive
//	quota          + WithQuota(n, w)          holders whose units w sum   one per holder
//	                                          to n at most, first in line
//	set            AcquireAll, TryAcquireAll  one holder of 1 to 64       one per name
//	                                          names, all or none
//	fast failover  + WithFastFailover         as the kind it modifies     unchanged
//
// How they combine:
//
//   - "+" marks an option of Acquire and TryAcquire (and Run, TryRun and an
//     [Elector]'s terms). Every kind takes [WithTTL], [WithMinHold],
//     [WithMaxHold] and [WithMetadata]. A name like a slot's, "job#0", is
//     refused. The kinds' options do not combine, and a set refuses them and
//     [WithFastFailover]; [Client.NewElector] refuses them (*[InvalidError]).
//   - A name is one kind at a time, for every client: a plain lease (a set's
//     too), a semaphore of one slot count, shared leases, or a quota of one
//     capacity. The others are refused with a *[KindError], atomically, and
//     nothing is written. Once every lease of the name has ended, another
//     kind may take it.
//   - Set: sets asked for in any order never deadlock, and a waiting set
//     holds nothing. A set does not queue, so against steady single-name
//     waiters it may wait long. Its leases end together: when one is lost,
//     the set releases the others and its context ends with the cause.
//
// # Shared leases and quotas
//
// They are renewed, released, fenced and bound to their sessions as any
// lease is. No waiter is starved: shared attempts wait behind a queued
// exclusive waiter while the shared holders drain (a steady stream of
// exclusive waiters can hold shared ones up, as with sync.RWMutex), and a
// quota serves its waiters first in line first. A client without a session
// of its own ([Config.DisableNotify], a transaction-pooling proxy) cannot
// queue: its wait registers as a polling waiter that holds later attempts
// back the same way, until it gives up or, if its process died, goes stale.
// Goroutines of one client may share a name; an exclusive acquisition waits
// for the client's own shared leases too.
//
// # Waiting
//
// A blocked [Client.Acquire] wakes at a release, at the moment the holder's
// lease would expire, and at a slow fallback poll ([Config.PollInterval], or
// every 20 s for a wait that watches its holder's doorbell); the last two
// never stop. Goroutines of one client queue locally, first come
// first served. Clients queue on the server (admin.Waiters lists the
// queues), and a release wakes the first waiter alone. A new attempt may take
// a free lease ahead of the queue only until the first waiter's turn is 100 ms
// old; then the lease is promised to it, and other attempts get a *[HeldError]
// whose Queued field says so. No waiter is starved: each waits at most about
// its turn plus 100 ms of others' bursts. A waiter whose client died is passed
// over at once; one woken that never acquires holds the others up until its
// registration goes stale (three fallback polls and a second). Waiting and
// holding clients keep no transaction or snapshot open past 25 seconds.
//
// # Connections
//
// A client's statements, renewals, waits, electors, observers and step-down
// requests share one connection: its dedicated session, opened with its
// first acquisition (or wait, or renewal), named "pglease <owner>" in
// pg_stat_activity. A waiting client blocks there on the holder's doorbell
// (behind others in the queue, the doorbell of the waiter directly ahead,
// for a fast-failover name or a client's only wait; or the holder's
// session, should a doorbell fail) while
// the session has nothing else to do; its own statements interrupt that
// wait with a cancel request, which takes no connection slot. A client
// takes more connections only for a second holder it waits on at once, or a
// wait while it listens for notifications for other waits, an observer or a
// holder that hears step-down requests (one per such holder, at most
// sixteen), for the statements it runs while its session connects, and for
// a statement that comes while two others of its statements are on the
// session (a client whose goroutines acquire or release at once: one
// connection would run them one at a time, each waiting for its own WAL
// flush). The pool of [Open] serves a client without such a session
// (database/sql with another driver, a transaction-pooling proxy), and
// serves the client's start: Open's check and the statements it runs while
// its session connects. Once the session runs its statements, the pool's
// connections close (busy ones as they return); others it opens later close
// after 30 s idle. So a fleet of clients electing on one name, or each
// waiting on a name another client holds (whichever way it took it: tried,
// waited, fast-failover or shared), costs one server connection per client
// (docs/BENCHMARKS.md measures a thousand); while it starts, a client holds
// two for the moment its session takes to connect.
//
// # Fast failover
//
// [WithFastFailover] ties a lease to the holder's database session: once the
// session ends (the holder process died), any contender takes the lease over
// at once instead of waiting out the TTL. A waiter learns of it within
// milliseconds, within about 200 ms of the session's end at worst.
//
//   - Only the server incarnation that granted the lease hands it over early:
//     after a restart, a crash recovery or a promotion, the row expires as a
//     plain one does.
//   - It needs a session of its own: behind a transaction- or
//     statement-pooling proxy it is refused with [ErrSessionUnavailable].
//   - A holder whose session connection fails loses those leases at once,
//     with [ErrSessionLost] (which matches [ErrLeaseLost]): stop the work at
//     once. [Lease.SessionFile] lets a supervisor hold the session open until
//     the work's other processes are gone.
//   - Ending a live holder's session (pg_terminate_backend, a proxy's idle
//     timeout) hands the lease over while the holder may still work, until
//     it notices. Fencing tokens ([Lease.Token], [Lease.Guard]) cover this.
//
// # Stepping down and observing
//
// [Client.RequestStepDown] asks a name's holder, in any process, to let go.
// It never ends a lease by itself: an [Elector] that leads ends its term
// (cause [ErrStepDown]) and releases once lead has returned; a plain holder
// watches [Lease.StepDownRequested] and decides, and one that ignores it
// keeps its lease: a request is no substitute for fencing.
//
// [Config.Observer] receives an [Event] for everything that happens to the
// client's leases, in order, on a goroutine of the client's own, so a slow
// observer never delays a renewal. Adapters count held leases exactly from
// the events alone, drops included: [Event] and [Observer] say how. For
// tracing, events carry the context of the call that caused them, and log
// records ([Config.Logger]) are written with slog's context methods.
//
// # Concurrency
//
// [Client], [Lease], [LeaseSet] and [Elector] are safe for concurrent use by
// multiple goroutines; [Elector.Run] may be called once. A name the client
// holds is refused to its TryAcquire and waited for by its Acquire, even in
// the goroutine that holds it. An [Observer] shared by several clients is
// called from each client's goroutine.
package pglease
