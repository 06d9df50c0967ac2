// Package pglease turns a PostgreSQL database into a distributed lock
// manager: named leases with a time-to-live, mutual exclusion across
// processes and hosts, fencing tokens, leader election helpers and "run this
// job on exactly one instance".
//
// # Model
//
// A lease is one row of a table (default "pglease_leases") keyed by name.
// [Client.TryAcquire] inserts the row, or takes it over when it has expired,
// in a single statement (after one that takes the name's lock, in the same
// round trip), and gives the new holder a fencing token drawn from a
// sequence. The holder's [Client] renews every lease it holds with one
// statement per renewal interval (TTL/3 by default) on a connection of its
// own, so renewals never queue behind the application's use of a shared
// pool. [Lease.Release] deletes the row and notifies the first waiting
// client with NOTIFY, so [Client.Acquire] wakes at once instead of polling
// (see Waiting).
//
//	          TryAcquire / Acquire
//	free ─────────────────────────────▶ held (token T)
//	 ▲                                    │  renew (same T) every TTL/3
//	 │ Release (name, T)                  │
//	 ├────────────────────────────────────┤
//	 │ expiry: no renewal for TTL         │  takeover by another client
//	 └──── expired ◀──────────────────────┘  (token T' > T)
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
//     [ErrLeaseLost] before any other client can acquire the name, as long as the holder process is
//     not paused (GC, SIGSTOP, VM freeze) for longer than the safety margin.
//   - Fencing. Every acquisition gets a token from a sequence: strictly
//     greater than every token any earlier holder of the name received, across
//     releases, expiry, cleanup and restarts of the database or clients, and
//     across the loss of the table (dropped, or lost in a failover or a
//     restore) as long as the server clock does not run back and the lost
//     table handed out fewer than a million tokens a second on average: a
//     new token sequence starts at the server clock in microseconds (see
//     docs/FAILURE-MODES.md, "A lost table").
//     Renewal never changes the token, so a lost renewal reply is simply
//     retried. [Lease.Guard] checks the token inside the caller's own
//     transaction and locks the row until commit, so a stale holder's write
//     to the same database cannot commit.
//   - One clock. Every expiry, remaining time and heartbeat age is computed in
//     SQL with the server's clock. Client wall clocks are never compared with
//     server timestamps.
//   - Nothing stolen. Renew and release are scoped by (name, token); two
//     clients that share an owner label cannot touch each other's leases.
//     Only [Client.ForceRelease] takes a lease from its holder, and the
//     holder learns of it at its next renewal.
//   - Within one Client a name is a mutex between goroutines too: there is no
//     silent re-entry.
//   - Bad input (names, TTLs, identifiers) is rejected with a typed error
//     before anything is sent.
//
// # What is not guaranteed
//
//   - A process paused for longer than the safety margin may resume after
//     its lease was granted to someone else and act before it notices. Its
//     lease's context is already past its deadline when it resumes; use the
//     fencing token (or [Lease.Guard]) to make the protected resource reject
//     it.
//   - Leases are as durable as the database. With asynchronous replication a
//     failover may lose the last acquisitions; see docs/FAILURE-MODES.md.
//   - A step of the server's clock (not the clients') changes every
//     expiry at once; keep the server on NTP with slewing.
//
// # Clocks
//
// The server decides expiry with now(); a client only ever gives up early,
// on its monotonic clock. Client wall clocks may be skewed or jump without
// effect.
//
// # Failure handling
//
//   - Transient errors (connection reset, server restart, failover) are
//     retried with bounded, jittered backoff, never past a lease's deadline.
//     Errors that cannot be retried are returned; [IsRetryable] tells them
//     apart.
//   - When renewals keep failing the lease is lost at its local deadline;
//     when a renewal finds the row taken over or force-released, the lease is
//     lost at once. Either way the lease's context ends, and its cause
//     (context.Cause) wraps [ErrLeaseLost].
//   - A holder that is alive but stuck keeps renewing: only a hold limit
//     ([WithMaxHold]) takes the name from it. At the limit, on the
//     holder's monotonic clock from when the acquisition was sent, the
//     lease's context ends with a cause matching [ErrHoldLimit] (and
//     [ErrLeaseLost]), and only then is its row deleted, by token, so a
//     waiter may take the name at once. The holder's work must stop when
//     the context ends, as on any loss; one too stuck to notice is what
//     fencing tokens are for. A delete that fails leaves the row to expire
//     within the TTL (nothing renews it any more).
//   - A cancelled acquire leaves nothing behind: its statement runs to
//     completion on a detached, bounded context, and if it acquired, the row
//     is released by token at once. A reply that arrives after the lease's
//     own deadline is treated the same way. If the connection breaks after
//     the statement committed (the reply is lost), the row carries the
//     client's random id (in its metadata): the client frees it by token in
//     the background once no call of its own asks for the name, and the
//     client's next attempt on the name recognises it as its own too.
//     Another client is never affected, even with the same owner label.
//   - [Client.Close] releases every lease, and what its calls in flight are
//     granted: it waits for their statements (a call cut by its context
//     included) instead of cutting them, then releases the rows of this
//     client that a statement whose reply was lost may have been granted,
//     and only then stops every goroutine and waits for them. Nothing the
//     server granted to a closed client stays held (a minimum hold aside,
//     see [WithMinHold]). When the database does not answer, Close waits
//     5 s for the statements in flight, cuts them, and tries its releases
//     for 5 s more; its error then names what it could not release, which
//     expires after its TTL.
//   - An [Elector]'s term ends with its lease (or on [Elector.Resign]), and
//     its lead function is expected to return then; pglease cannot make it.
//     A lead function still running past the term's end plus a tolerance
//     is what [Elector.Check] and the [Elector] HTTP handler report to a
//     liveness probe, so that the process is restarted. Failing renewals
//     alone do not fail the probe: the term ends and the elector campaigns
//     again.
//
// # Errors
//
// Every error starts with "pglease: " (once) and matches a sentinel of
// this package with errors.Is, is one of its error types (errors.As), or
// wraps the driver's error. Bad input is refused before anything is sent
// and changes nothing: a [Config] when the client is created, a name or
// an [Option] at the call; the error is an *[InvalidError], whose Kind
// says what was refused (a lease name, an owner, a TTL, a table or schema
// name, or another argument). A lease held elsewhere is a *[HeldError]
// matching [ErrNotAcquired]; an acquisition whose context ended also
// matches ctx.Err(). A name asked for as another kind of lease than its
// live leases hold (a plain lease, a semaphore of another slot count) is a
// *[SlotsError], returned at once (see Semaphores). Database errors name what pglease was
// doing and, where the server said why (a missing privilege,
// table or database), what to do about it.
//
// # Semaphores
//
// [WithSlots](n) lets up to n holders hold a name at once. Each holder
// holds one slot, the lease "name#i" ([Config.Plan] lists them) with a
// fencing token of its own; a waiter waits for any slot, in the same loop
// as for a name (fast failover included). Lease names never end like a
// slot name (every call that acquires refuses "job#0"; [Client.Get] and
// [Client.ForceRelease] accept it, to reach the slot row).
//
// The slot count is recorded in every slot row, beside the semaphore's
// name, and must be the same for every client of the semaphore: while any
// slot is live (held, or kept for its minimum hold), an acquisition with
// another count fails at once with a *[SlotsError]; nothing is written
// and the live slots are untouched. Without that check, clients with 3
// and 5 slots would together admit 5 holders. A name is one kind of lease:
// a plain lease on the name ([WithSlots](1), a set's too) and the slots of
// a semaphore of that name refuse each other the same way, both ways
// round. The check and the insert are atomic: every acquisition of a name
// (of a semaphore's slots: of the semaphore's name) serializes on a
// transaction-scoped advisory lock of the name, taken first by the
// table's acquisition function (one statement), so that the acquisition
// reads the table only once that lock is held. Once
// every lease of the name has been released or has expired, a client may
// use another kind. [Client.NewElector] refuses WithSlots.
//
// # Waiting
//
// A blocked [Client.Acquire] waits for a wake-up (the holder's doorbell, or
// a notification: see below), for a timer at the moment the holder's lease
// would expire, and for a slow fallback poll ([Config.PollInterval]).
// Within one client the goroutines waiting for a name queue locally, first
// come first served, and only the first of them talks to the server. Between clients they queue on the server: each
// waiting client registers in the table's queue of waiters (the unlogged
// table "<table>_waiters", one row per client and name, written by the
// waiter's own attempts), and a release wakes the first live waiter alone:
// it rings its own doorbell, which the first waiter watches, and notifies
// a channel of that waiter's client (for a waiter that listens). A
// hand-off therefore costs the release, the ring and one acquisition,
// however many clients wait, on this name or others; the other waiters
// sleep until their turn (or their fallback poll).
//
// [Client.Waiters] lists the queue of each name: who waits, first in line
// first, and since when (pglease ls and the console show it too).
//
// Waiters in the queue take their turns in order. A new attempt (a client
// that releases and acquires again at once, a TryAcquire) may take a free
// lease ahead of them, so that contention runs in bursts, each client's
// attempts back to back without a round trip through another process; but
// only until the first waiter's turn is 100 ms old. Its turn begins when
// it is first woken, or rather when the lease then released was acquired,
// if it queued before that (a waiter that queued during a long hold has had
// its turn); a waiter never woken is measured from when it queued. From
// then on the lease is promised to it: every other attempt is refused with
// a *[HeldError] whose Queued field says so, and wakes it. No waiter is
// starved: each waits at most about its turn in the queue plus 100 ms of
// others' bursts. A release wakes the first waiter the first time and,
// once the lease is promised to it, again; not at the releases in between,
// where a waiter woken in vain (the releasing client took the name again
// first) looks again by itself once its promise holds.
//
// The first waiter does not listen for that notification, unless its client
// listens already for something else: the server signals every listening
// backend of the database at every NOTIFY, whatever its channel, so a
// release would cost more with every client that waits anywhere. It watches
// the holder's doorbell instead. Every client's dedicated session holds one
// of sixteen bell locks (advisory locks keyed by the client id); a release
// that wakes the first waiter rings the bell: the session takes the next
// bell and frees the one it held. The waiting client watches the holder's
// bell on a connection of its own, one per holder client however many of its
// names it waits for, blocked on a shared lock of the bell held; the server
// grants it at the ring, and wakes that connection and no other backend. The
// watcher wakes its waits, looks which bell the holder holds now and blocks
// on it; a watcher left without waits blocks no more, and keeps its
// connection for 30 s, so that clients taking turns do not reconnect at
// every turn. A bell is also freed when the holder's session ends, so the
// watcher wakes its waits then too (a fast-failover lease is taken over at
// once).
//
// A statement that blocks holds a snapshot for as long as it blocks, and
// an old snapshot keeps VACUUM from removing any row deleted since, in the
// whole database, and keeps CREATE INDEX CONCURRENTLY on any table
// waiting. So no statement of a watcher (of a bell, or of a holder's
// session: see Fast failover) blocks longer than 20 s, the lock_timeout
// of its connection: one that times out found the bell still held (or the
// session alive) and blocks again at once, waking nobody. No ring is
// missed in between: the watcher blocks on the bell's state, not on an
// event, and a bell freed meanwhile is granted to the next statement at
// once. While clients wait or hold, none of their transactions or
// snapshots is older than 20 s (their other statements are bounded by
// [Config.StatementTimeout], 10 s unless set longer, and no connection of
// theirs idles in a transaction), and a watcher costs one statement per
// 20 s while nothing happens.
//
// A session listens for notifications only while its client needs them:
// while it holds a lease whose holder asked to hear step-down requests
// ([Lease.StepDownRequested], which an [Elector] calls), has a wait that
// does not watch a bell (a semaphore, a set, a wait behind others in the
// queue, a wait on a holder without a bell) or an observer such as
// [Elector.Observe]; and for 30 s after. The table's channel is notified
// only by a release that wakes the first waiter or sees no live waiter at
// all: for what does not queue (semaphores, sets, clients without a live
// session), for observers, and for a wait whose first registration was still
// being written when the release looked (which also looks once more shortly
// after registering). The releases of a burst notify nothing.
//
// What the queue survives:
//
//   - A waiter whose client died is passed over at once: a waiter is live
//     only while its client's dedicated session holds the client's advisory
//     lock, which the server frees when the session ends.
//   - A waiter woken by a release that then never acquires (a pause, a
//     crash its session outlives, a partition) holds the others up until
//     its registration goes stale (3 × PollInterval + 1 s without an
//     attempt refreshing it), and at most one fallback poll after that.
//   - A lost notification, or a dedicated session that reconnects or
//     starts to listen, is covered as before: it wakes every waiter, and
//     the expiry timer and fallback poll never stop.
//   - A client without a live dedicated session (database/sql with another
//     driver, [Config.DisableNotify], a transaction-pooling proxy, a
//     session down) does not register; it attempts at the expiry timer and
//     fallback poll, and on the table's channel when a release notifies it
//     (above). A change within a burst reaches observers at the holder's
//     expiry timer or fallback poll.
//   - A ring the watcher cannot see: the release came between the waiter's
//     attempt and the watcher's first look at the bell (it wakes its waits
//     once it has looked, and they look again), or while the watcher was
//     not blocked (the bell it blocks on next was freed by that ring, and
//     is granted at once; only sixteen rings in that gap go unseen), or the
//     ring itself failed (a lock timeout, a session down): the wait looks
//     again at its expiry timer and fallback poll.
//   - A holder without a bell (its session is not up yet: a client opens
//     it with its first wait or renewal; or it is down, or the client uses
//     database/sql or Config.DisableNotify, or runs a version without
//     bells) is found so by the watcher, and its waiters listen for
//     notifications meanwhile; the watcher looks for the bell again after
//     1, 2, 4… up to 30 s while it has waits, and moves them to the bell
//     when it comes. A holder's session that reconnects takes bell 0
//     again; its watchers, woken by the old session's end, find it at
//     their next look and wake their waits once more.
//   - A holder's connection that fails on its side only (a middlebox
//     reset): the server's backend lives on (until TCP keepalive ends it,
//     two hours by default), holding the client lock and the bell its
//     waiters watch. Only this client's sessions take its client lock, so
//     the reconnected session ends the backend that holds it (found by
//     that lock, with pg_terminate_backend, which a role may call on its
//     own sessions), takes the lock and bell 0, and rings again. A role
//     that may not end it (the old session was another role's) logs what
//     to grant; until the server ends the old backend, the client's
//     releases ring no bell and its waiters look again at their expiry
//     timer and fallback poll.
//   - What a bell costs: a connection per waiting client and holder
//     client (at most sixteen per waiting client: its waits on the names
//     of further holders listen), a statement per ring and one per 20 s
//     between rings; nothing on the holder's side for a release nobody
//     waits for.
//   - The queue decides only who may take a free lease; it never changes
//     who holds one. Mutual exclusion and fencing do not depend on it, nor
//     on bells or notifications.
//
// # Shared leases
//
// [WithShared] takes a shared (read) lease of a name: any number of shared
// holders at once, or one exclusive holder (a lease of the name without
// the option, or a set's), never both. Each shared holder holds a row of
// its own, "name#i" (the lowest i not held; [Lease.Name], [Lease.Shared]),
// with its own fencing token, and is renewed, released, fenced and bound
// to its session ([WithFastFailover]) as any lease is. A shared
// acquisition runs the table's shared acquisition function, under the
// same advisory lock of the name as every exclusive acquisition of it, so
// that the check of the other kind and the insert are atomic: an
// exclusive acquisition is refused while a live shared row of the name
// exists (one whose session has ended is not live), a shared one while
// the name's own row is live. A semaphore ([WithSlots]) and shared leases
// of one name refuse each other with a *[SlotsError].
//
// Exclusive waiters are not starved. A blocked exclusive [Client.Acquire]
// queues as any does, and while a live exclusive waiter is queued before
// it (any, for a shared attempt not queued itself), a shared attempt is
// refused: the shared holders drain and the exclusive waiter takes the
// name; shared waiters queued before it are not held up by it. A client
// without a live session of its own ([Config.DisableNotify], or behind a
// transaction-pooling proxy) cannot queue: its exclusive Acquire, refused
// by shared holders, registers as a polling waiter instead, live while its
// attempts keep it fresh (3 × PollInterval + 1 s), and shared attempts
// wait behind it just the same; it takes the name at its next poll after
// the shared holders drained. It leaves when it gives up; one whose
// process dies, or that gives up while an attempt of its is in flight,
// holds shared attempts back until its registration goes stale. Shared
// waits register in the queue too ([Client.Waiters] lists their kind), but
// take no part in its wake-ups and promises: they hear every release on
// the table's channel. Each release of a shared lease wakes the first
// exclusive waiter of the name on its client's channel; it takes the name
// if that was the last shared lease, and otherwise looks at those left.
// Every exclusive waiter behind shared holders (not only the first) watches
// the session of one fast-failover shared holder, so that a crash of the
// last one is noticed at once even when the first waiter, a client of a
// shared holder waiting to take the name exclusively, dies with it.
//
// What it keeps and what it does not:
//
//   - Mutual exclusion between the kinds, fencing, one clock and "nothing
//     stolen" hold as for any lease: they are the rows' rules, and the
//     check between the kinds is made under the name's lock.
//   - [Lease.Guard] of a shared lease locks its row; an exclusive
//     acquisition over shared leases that ended deletes their rows, which
//     waits for such a lock, so a stale shared holder's guarded write
//     commits before the exclusive holder's acquisition does, or not at
//     all (as a takeover of a plain row waits). A shared acquisition over
//     an exclusive row that ended deletes that row the same way.
//   - Preference goes to exclusive waiters: shared waiters queued after
//     an exclusive waiter wait for it, so a steady stream of exclusive
//     waiters can hold shared ones up (sync.RWMutex makes the same choice).
//   - Within one client, shared leases of a name do not hold its local
//     slot, so goroutines share it; an exclusive acquisition by the client
//     waits for its own shared leases too. A goroutine that holds a shared
//     lease and then waits for an exclusive one of the name waits for
//     itself, as with sync.RWMutex.
//   - A shared row whose acquisition reply was lost is deleted by the
//     client's next shared attempt on the name; until then (or its expiry)
//     it keeps exclusive acquisitions out.
//
// # Sets of leases
//
// [Client.AcquireAll] and [Client.TryAcquireAll] take up to 64 names all or
// nothing, as a [LeaseSet]: one transaction takes the names' advisory locks
// (the ones every single acquisition of a name takes first) in sorted
// order, checks that every name is free, and only then writes every row,
// each with a token of its own; otherwise it writes nothing. Sets asked for
// in any order therefore never deadlock, and a waiting set holds nothing,
// on the server or locally. A set does not queue: a name promised to a
// queued waiter is not free for it, so the queue's promise holds, but a
// set contending with steady single-name waiters may wait long. Its leases
// are plain ones (no [WithFastFailover]), renewed with the client's
// others, and they end together: when one is lost, the set deletes the
// others' rows and cancels its context with the cause.
//
// # Fast failover
//
// With the [WithFastFailover] option a lease is also tied to the holder's
// database session: its row records that session (its backend pid), which
// holds one session advisory lock, keyed by the pid, for as long as it
// lives. Once that lock is free the holder's session has ended, and any
// contender for the name, for a slot of its semaphore or for a set that
// includes it ([Client.AcquireAll]), fast-failover or plain, takes the
// lease over at once instead of waiting out the TTL. A waiting
// client learns of it within milliseconds: it watches the holder's session
// on a connection of its own, blocked on that lock (one such connection per
// holder session, shared by every wait of the client on names that session
// holds; 20 s at a time, as a bell's watcher: see Waiting), not polling;
// a holder client that lost its session and opened another is not
// mistaken for the holder. A waiter starts watching once the
// holder has held the name for 200 ms, so that holders that pass a name on
// quickly cost no connections; a crash fails over within about 200 ms of
// the session's end at worst. Every waiter in the queue watches, not only
// the first, which may die with the holder (one process, pod or node
// running both); a waiter behind one to which the free name is promised
// looks again within about a second, in case that one died too. When a
// fast-failover lease goes to a queued waiter (by a release, a take-over
// from a dead holder or at expiry), the acquisition wakes the next live
// waiter once, so that it watches the new holder: however the holder got
// the name, a crash is noticed by the waiter that takes over.
// The binding needs no lock per name, so nothing another session holds can
// keep a lease from being bound (a paused holder whose lease was taken over
// at expiry, say). The rules that keep the guarantees above:
//
//   - The server must not declare a live holder's session dead before the
//     holder's own local deadline: the session's TCP keepalive and user
//     timeout are set to at least the TTL, and idle_session_timeout to off.
//   - A fast-failover lease's row is taken over early only by the server
//     incarnation that granted its lock (recorded with the row: the
//     postmaster's start time and an id kept in an unlogged table, which
//     a crash-recovery cycle empties). After a restart, a crash-recovery
//     cycle or a standby promotion the new incarnation holds no session
//     locks, so such rows fall back to the plain expiry rule: a
//     partitioned old holder still believes in its lease until its local
//     deadline, and nobody takes it over before the row expires. Routine
//     statistics resets do not change the incarnation.
//   - The session takes its lock before it acquires any fast-failover
//     lease and keeps it until it ends. A lock another session
//     happens to hold errs only towards waiting: should the server reuse a
//     dead holder's pid for another client's session, the row counts as
//     live and is taken over when it expires.
//   - Lock keys come from the table as the server resolves it (schema and
//     name from the catalog), so every spelling of one table
//     ("pglease_leases", "public.pglease_leases", another search_path)
//     shares one key space.
//   - The client never closes its session under a held fast-failover lease
//     on its own initiative: statements on it are bounded by the server's
//     statement_timeout and lock_timeout, which end in an error, not a
//     closed session; when a statement outlives its client-side bound too
//     (the server does not answer), every fast-failover lease of the
//     connection is ended locally before the socket is closed. A holder
//     whose session connection fails cancels its fast-failover leases at
//     once, with [ErrSessionLost] (which also matches [ErrLeaseLost]): a
//     waiter may hold the lease milliseconds later, so the work it
//     protected must stop at once, with no grace period (pglease run sends
//     SIGKILL). A lease whose session ended between the acquisition's
//     commit and its registration is never handed out. When the connection
//     failed on the client's side only (a middlebox reset), the server's
//     backend lives on and its rows stay bound to it: the client's next
//     session ends that backend (see Waiting), and a waiter takes over
//     then, not at the TTL.
//   - The mode needs a session of its own. Behind a transaction- or
//     statement-pooling proxy (PgBouncer) another client could share the
//     server backend and re-enter its advisory lock; the client detects
//     such a proxy (the backend key of the connection's startup is not the
//     backend's own) and refuses the mode with [ErrSessionUnavailable].
//   - The session ends when the holder process dies, at the instant its
//     socket closes, while work the holder started in other processes may
//     still be dying. [Lease.SessionFile] gives such a process (a
//     supervisor) a copy of the connection's descriptor: the server then
//     sees the session end only once that copy is closed too, so the
//     waiter cannot start before the work is gone (pglease run and cron
//     give it to the supervisor that reaps the command's processes).
//
// What remains, each covered by fencing tokens ([Lease.Token],
// [Lease.Guard]) rather than by the lease alone:
//
//   - An operator or the server itself ending a live holder's session
//     (pg_terminate_backend) hands
//     the lease over while the holder may still be working, until it
//     notices the broken connection: at once when idle, after its current
//     statement otherwise. (A backend that crashes takes the whole server
//     through crash recovery: a new incarnation, so the rule above applies.)
//   - A proxy or NAT between client and server that ends the server side of
//     the connection on its own (an idle timeout) is the same case.
//   - With asynchronous replication a failover may lose the last
//     acquisitions and renewals (see docs/FAILURE-MODES.md); this is true of
//     plain leases as well.
//
// Release commits without waiting for its WAL flush (synchronous_commit off
// for that one statement): a server crash right after a release can bring
// the row back until it expires. That costs availability, never safety.
// Acquisitions and renewals always wait for it, whatever a role, a
// database or the connection sets synchronous_commit to: off and local are
// raised to on for their own transaction, so that a crash or a failover
// never forgets a token handed out or an extension a holder relies on.
//
// # Stepping down
//
// [Client.RequestStepDown] asks the holder of a name, in whatever process,
// to let go: a rolling deploy moves leadership off an instance before
// stopping it. The request is a stamp on the lease's row plus a
// notification to the holder's client; the holder's renewals report the
// stamp too, so a lost notification delays the request by one renewal
// interval at most, and a client that starts listening after the request
// looks for it then. A client listens for requests only while it holds a
// lease whose holder called [Lease.StepDownRequested] (an [Elector] does);
// for other leases the renewals deliver the stamp. A new acquisition
// clears the stamp. The request never
// ends a lease by itself: an [Elector] that leads ends its term (cause
// [ErrStepDown]), releases once lead has returned, and stays out of the
// election until another instance leads or its hold-off has passed; a plain
// holder watches [Lease.StepDownRequested] and decides. A holder that
// ignores the request keeps its lease, so a request is no substitute for
// fencing.
//
// # Observing
//
// [Config.Observer] receives an [Event] for everything that happens to the
// client's leases, in order, on a goroutine of the client's own, so that a
// slow observer never delays a renewal. Adapters (the nested modules
// pgleaseprom and pgleaseotel) count the leases held from the events
// alone, which the events make exact:
//   - a lease handed to the caller is reported by EventAcquired (with the
//     wait since the call began) and, later, exactly once, by
//     EventReleased or EventLost (with the hold time); a release whose
//     delete failed is an EventReleased with Err, since the lease has ended
//     all the same; a lease never handed out (an abandoned or late
//     acquisition) is reported neither way;
//   - each renewal statement is reported once by EventHeartbeat (its round
//     trip and the number of leases it renewed), besides one EventRenewed
//     per lease;
//   - an observer that falls more than 10,000 events behind loses the
//     newest ones until it catches up; it then gets one EventDropped that
//     counts them and carries the state they changed (the names held, the
//     electors leading), so a gauge built on the events is corrected.
//
// Events carry the context of the call that caused them (Acquire's,
// Release's), for tracing; the client's log records ([Config.Logger]) are
// written with the context-carrying slog methods, so a handler that reads
// trace ids from the context links them to the caller's trace.
//
// # Concurrency
//
// [Client] and [Lease] are safe for concurrent use by multiple goroutines.
package pglease
