-- What a client's dedicated session runs besides acquisitions and
-- renewals, and what the watchers of a waiting client run: the session lock,
-- the client lock, the doorbell, notifications, session settings. Same
-- conventions as queries.sql (advisory-lock keys are prefixed by the lock
-- namespace, and written by the macros {{client_key(…)}}, {{session_key(…)}}
-- and {{bell_key(…)}}: their seeds are named once, in macros.go).

-- name: SessionLock
-- Taken once by each client's dedicated session, first, and held as long as
-- it lives: the session lock (seed 3, keyed by the backend's pid) binds the
-- session's session-bound leases to it (a row records the pid, and is taken
-- over once the lock is free: see CreateAcquire), and lets waiters watch the very
-- session that holds such a lease (AwaitSession), so that a client whose
-- session ended and that opened another is not mistaken for the holder. No
-- other live session has the pid, so it never waits. It must be held before
-- the session acquires anything session-bound. $1 namespace.
SELECT pg_advisory_lock({{session_key($1::text, pg_backend_pid())}})

-- name: ClientLock
-- Taken once by each client's dedicated session, after SessionLock, and
-- held as long as it lives: the client lock (seed 1) marks the client's
-- queued waits as live; with it the session takes bell 0 (see Ring). $1
-- namespace, $2 client id. Waits up to the session's lock_timeout: an
-- earlier session of the same client that the server has not yet ended
-- may still hold it (see EndEarlierSession); the session lives on without
-- it if it cannot be had, and still has its session lock.
SELECT pg_advisory_lock({{client_key($1::text, $2::text)}}),
       pg_advisory_lock({{bell_key($1::text, $2::text, 0)}})

-- name: EndEarlierSession
-- Ends the backends other than this one that hold client $2's client lock
-- (seed 1; ClientLock), and returns their pids. Only this client's
-- dedicated sessions take that lock, and it has one at a time: such a
-- backend is an earlier session of this client that the server has not
-- ended, its connection having failed on the client's side only (a
-- middlebox reset). It still holds the client's bell, which the client's
-- waiters watch, and its session lock, which binds the session-bound rows
-- it acquired. The backend is found by the lock it holds, not by a pid
-- recorded earlier, which another backend may have reused: pg_locks shows
-- an advisory lock's bigint key as classid (its high 32 bits) and objid
-- (its low 32 bits), with objsubid 1. A role may end its own backends;
-- without the privileges of the backend's role (or of pg_signal_backend)
-- the statement fails with insufficient_privilege. Only the exclusive
-- lock: other clients take this key shared, for a moment, to ask whether
-- this client lives (its queued waits; Waiters), and are never ended. $1
-- namespace.
SELECT l."pid", pg_terminate_backend(l."pid")
  FROM pg_locks AS l,
       (SELECT {{client_key($1::text, $2::text)}} AS "key") AS k
 WHERE l."locktype" = 'advisory' AND l."granted" AND l."objsubid" = 1
   AND l."mode" = 'ExclusiveLock' AND l."pid" <> pg_backend_pid()
   AND l."database" = (SELECT d."oid" FROM pg_database AS d WHERE d."datname" = current_database())
   AND l."classid"::bigint = (k."key" >> 32) & 4294967295
   AND l."objid"::bigint = k."key" & 4294967295

-- name: Ring
-- The client's doorbell (see "Waiting" in the package documentation): a
-- client's dedicated session holds one of sixteen bell locks (seeds 16 to
-- 31, keyed by the client id), bell 0 from ClientLock on; a release that
-- wakes the first waiter rings by taking the next bell and freeing the
-- one held, which grants the shared waits of the waiters' watchers
-- (AwaitBell) blocked on it, and no other backend. $1 namespace, $2
-- client id, $3 the bell held (the next is the one after it, modulo
-- Bells). A release on the session rings in its own statement instead
-- (see CreateRelease).
SELECT {{ring($1::text, $2::text, $3::int)}}

-- name: ProbeBell
-- The bells client $2 holds now (see held_bells in macros.go). $1
-- namespace.
{{held_bells($1::text, $2::text)}}

-- name: AwaitBell
-- Blocks until bell $3 of client $2 is free (its next ring, or the end of
-- its session), then lets go at once (at the end of its batch: see
-- WatchBounds). $1 namespace.
SELECT pg_advisory_xact_lock_shared({{bell_key($1::text, $2::text, $3::int)}})

-- name: AwaitHeldBell
-- AwaitBell for the bell $3 that a watcher expects client $2 to hold (the
-- one after the bell it saw rung): blocks until it is free and returns
-- true, as AwaitBell; or, when it is free already (the client rang again
-- since, or its session ended), returns false at once without waiting,
-- and the bells the client holds now, as ProbeBell would (the watcher
-- wakes its waits, which may have read their names before those rings,
-- and waits on the bell found). So a watcher that saw a ring waits for
-- the next one in one statement, not a probe and a wait. No lock of a
-- bell it looks at is held while it waits (bell_free), but the one it
-- waits on: a ring taking another would wait for it, and the watcher for
-- the ring. $1 namespace.
SELECT CASE WHEN l."free" THEN false
            ELSE pg_advisory_xact_lock_shared({{bell_key($1::text, $2::text, $3::int)}})::text = '' END,
       CASE WHEN l."free" THEN ARRAY({{held_bells($1::text, $2::text)}}) END
  FROM (SELECT {{bell_free($1::text, $2::text, $3::int)}} AS "free" OFFSET 0) AS l

-- name: WatchBounds
-- Sent in one batch before a watcher's blocking statement (AwaitBell,
-- AwaitSession), and reverted at the batch's end: the statement waits for
-- its lock at most $1 ms, and no statement_timeout ends it sooner. It may
-- run on the client's dedicated session, whose own bounds are shorter.
-- (The server arms a statement's timeout as each statement of a batch
-- starts, from the setting then: see BatchStatementTimeout.) A wait that
-- times out found the lock still held; the watcher waits again, so that
-- no snapshot of a waiting client is older than $1 ms.
SELECT set_config('lock_timeout', $1::text, true),
       set_config('statement_timeout', '0', true)

-- name: Listen
LISTEN {{channel}}

-- name: SessionKeepalive
-- Bounds dead-peer detection of a session holding session-bound leases from
-- below: the server must not end the session (and so free its advisory
-- locks) before the holder's own deadline, and must not end it for being
-- idle between renewals. $1 seconds, $2 milliseconds.
SELECT set_config('tcp_keepalives_idle', $1::text, false),
       set_config('tcp_keepalives_interval', $1::text, false),
       set_config('tcp_keepalives_count', '2', false),
       set_config('tcp_user_timeout', $2::text, false),
       set_config('idle_session_timeout', '0', false)

-- name: BatchStatementTimeout
-- Bounds each later statement of a batch's transaction (and reverts at its
-- end). $1 ms.
SELECT set_config('statement_timeout', $1::text, true)

-- name: BackendPID
-- Compared with the backend key of the connection's startup: a
-- transaction-pooling proxy answers with a key of its own.
SELECT pg_backend_pid()

-- name: SessionSettings
-- The dedicated connection's own bounds: a statement the server cancels
-- (statement_timeout, lock_timeout) fails without ending the session, and so
-- without freeing the session advisory locks of its leases. $1, $2 ms.
SELECT set_config('statement_timeout', $1::text, false),
       set_config('lock_timeout', $2::text, false)

-- name: AwaitSession
-- Blocks until the dedicated session of backend pid $1 ends (it holds its
-- session lock, SessionLock, for as long as it lives), then lets go at once;
-- returns at once when that session is gone already. (Should the pid be
-- reused meanwhile by another client's dedicated session, the wait lasts
-- as long as that one: the waiter's fallback poll and the row's expiry
-- still apply.)
SELECT pg_advisory_lock_shared({{session_key($2::text, $1::int)}}),
       pg_advisory_unlock_shared({{session_key($2::text, $1::int)}})

