-- The server-side functions of pglease: an acquisition and a release, each
-- one call in one statement (schema version 6; 7
-- records the owner of a waiter). Same conventions as
-- queries.sql, whose Acquire and Release call them; {{acquire_fn}} and
-- {{release_fn}} are their names, derived from the table's and quoted, in
-- the table's schema. They are PL/pgSQL, VOLATILE and SECURITY INVOKER (the
-- caller's privileges on the tables apply); every value is a parameter.
--
-- Why functions: an acquisition must read the table only once it holds the
-- name's advisory lock (see CreateAcquire), and a statement reads with the
-- snapshot it started with, so it used to take two statements in one
-- transaction (a lock, then the acquisition: BEGIN and COMMIT around them
-- for database/sql). In a VOLATILE function in READ COMMITTED every
-- statement takes a new snapshot, so the lock and the reads after it fit
-- in one call; and the function runs, for each kind of lease, only the
-- statements that kind needs: a plain lease that nobody contends runs one
-- INSERT (with two index probes), nothing of the queue's, the semaphores'
-- or the session binding's machinery. A release needs no lock, but a
-- function lets it run the queue's statement only when a waiter has
-- registered.
--
-- The bodies name the tables and the sequence schema-qualified, by the
-- schema the server resolved when the migration created them (see
-- EnsureSchema): a client may spell the table another way (qualified, or
-- through another search_path), and the body must find the same table
-- whoever calls it. The exported DDL of an unqualified table cannot know
-- that schema: its functions are created with SET search_path FROM
-- CURRENT ({{fn_options}}), which resolves them as CREATE TABLE resolved
-- the table.
--
-- Comment lines are kept out of the function bodies (see parse); they are
-- the documentation, here. The migration replaces the functions with
-- CREATE OR REPLACE, which cannot change a function's arguments or result
-- columns: a later version that does must drop the old one first (and
-- look it up, TableExists, by its new argument types). Version 10 drops
-- none: its acquisition functions take one more argument (p_kind), so
-- they are new functions beside those of the older signatures, which it
-- replaces with wrappers for the clients of earlier releases
-- (CreateAcquireCompat).

-- name: CreateAcquire
-- p_name the name, p_owner the owner, p_ttl_ms the ttl (ms), p_hold_ms
-- the minimum hold (ms), p_session whether the row is session-bound,
-- p_metadata the metadata (json), p_ns the advisory-lock namespace,
-- p_client the client's random id, recorded in the metadata so that the
-- client can recognise a row of its own whose reply it never got,
-- p_lock_timeout_ms lock_timeout for the rest of the transaction (0 keeps
-- the session's): a session-bound acquire runs on the connection that
-- also renews, and must not sit behind a row lock (a guarded transaction)
-- or a contender's acquisition.
-- p_queued: the attempt belongs to a blocked Acquire that waits in the
-- queue (the waiters table), p_queue_ttl_ms how long its registration
-- stays fresh, p_fair_ms how long a waiter may be overtaken, p_in_batch
-- whether the call shares its transaction with others (a batch, whose
-- commit must wait for its WAL flush if any of them acquired).
-- p_semaphore the semaphore whose slot p_name is and p_slots its slot
-- count (see WithSlots), both recorded in the row; NULL for a plain lease.
-- p_kind the kind asked for, recorded in the row's "kind" (schema version
-- 10): 'plain', or 'semaphore' for a slot. (Every acquisition function
-- takes the kind it writes; a kind with rules of its own has a function of
-- its own.)
-- (The parameters and the result columns, in order, with their types,
-- are listed once, in params.go, which renders the signature, the call
-- and the scan of the row.)
--
-- Returns one row: acquired?, the new token, and whether the new row is
-- session-bound; acquired, the row taken over if any (its owner and token,
-- as it was before); not acquired, the holder as the attempt saw it
-- (remaining -1 when no holder was seen: the row appeared concurrently, or
-- the lease is free and promised to the waiters ahead), whether a
-- session-bound holder is bound to its session, whether that session
-- still holds its session lock (a waiter can watch it: AwaitSession), the
-- number of live waiters ahead, the kind and size of a live row of another
-- kind on the name (see clash; '' and 0 when none), and the session-bound
-- holder's backend pid.
--
-- Tokens: acquisitions of one name first serialize on a transaction-scoped
-- advisory lock (the two-int4 key space, which never meets the bigint keys
-- of session locks), and only then draw from the sequence. Drawn earlier,
-- a slow contender could be granted a token older than one granted
-- meanwhile to a faster contender that has since released. The lock is
-- the name's, and for a slot first its semaphore's (a semaphore and a
-- plain lease of one name take the same lock) and then the slot's own (a
-- set, AcquireAllLocks, takes the names' locks). Every statement after the
-- lock reads with a snapshot taken once the lock was granted, and so sees
-- every row of the name committed before; none can commit between a check
-- and the insert.
--
-- A session-bound acquire (p_session) records its session in the row: the
-- backend's pid, which holds that session's session lock (SessionLock, the
-- key {{session_key(…)}}) for as long as the session lives, and the
-- server incarnation. Any attempt, session-bound or not, may then take such
-- a row over at once when that lock is free: the holder's session ended
-- (the client died, or its connection failed, and a client whose
-- connection fails ends its session-bound leases at once). A row granted by
-- another incarnation (a restart, a promoted standby) is trusted no further
-- than a plain row: it is taken over when it expires. (Should the pid be
-- reused meanwhile by another client's session, the row is taken for
-- alive, and taken over when it expires.)
--
-- The queue: blocked waiters register (a queued attempt, p_queued), and a
-- release wakes the first live one alone (see Release). A free lease goes to
-- whichever attempt comes first, so that a client may take a name again at
-- once (a burst), except that once a live waiter has been queued for
-- p_fair_ms, it is promised to it: every attempt of another client that is not
-- queued before it is refused (and a queued one keeps or takes its place).
-- A waiter is live while its registration is fresh and its client's
-- dedicated session holds the client lock (the key {{client_key(…)}},
-- taken by ClientLock): a crashed waiter is passed over at once. An
-- attempt that acquires nothing commits without waiting for its WAL flush
-- (unless it shares a batch's transaction): losing it in a crash loses
-- nothing. An attempt that acquires waits for its flush whatever the
-- settings (see the Durable fragment).
--
-- A name is one kind of lease: a slot is refused, and nothing written,
-- while a live row under its semaphore's name is of another kind (shared
-- leases) or records another slot count, or a live plain lease holds the
-- semaphore's name; a plain lease is refused while a live row of another
-- kind but shared leases (a slot of a semaphore of its name) exists.
--
-- The function has two paths. The first serves an attempt on a plain
-- lease (session-bound or not) of a name that has no row at all: an
-- unqueued one for which no other client has a registration in the
-- queue, or (schema version 12) a queued one whose own registration no
-- registration of another client's exclusive wait precedes, live or not
-- (the first waiter that a release woke: a hand-off). One INSERT that
-- probes the semaphore index for a live slot of a semaphore of the name
-- and the waiters' primary key for those registrations (no promise can
-- exist without one, and a queued wait that none precedes is the one the
-- lease would be promised to), and writes the row unless one exists (ON
-- CONFLICT DO NOTHING: an existing row is not even locked); what follows
-- an acquisition then is the second path's (below). (Two statements, one
-- for each form: a single one with a condition on p_queued cost an
-- uncontended acquisition about 0.1 ms more of server time, in S1 of the
-- peer bench.) When it writes nothing the second path decides, from
-- scratch, one rule per statement: another kind, the holder, shared
-- holders, the queue; then the row (it takes over an expired row, or one
-- whose session ended), and what follows an acquisition (purge,
-- dequeue, hand-off) or a refusal (registration, nudge, the holder
-- reported). A live row that it reads (and that is not session-bound,
-- whose session may have ended) is not written to at all there: no row
-- lock, no token drawn; the attempt only reads.
CREATE OR REPLACE FUNCTION {{acquire_fn}}(
{{acquire_params}}
{{acquire_result}})
LANGUAGE plpgsql VOLATILE {{fn_options}}AS $pglease$
DECLARE
    v_ok boolean;
    v_setting text;
    v_srv text;
    v_clash boolean;
    v_clash_kind text;
    v_clash_size integer;
    h record;           -- the name's own row
    v_row boolean := false; -- it exists
    v_held boolean;     -- it is live
    r record;           -- a live shared holder of the name
    v_reading boolean := false;
    v_since timestamptz;
    v_registered boolean := false;
    v_first text;
    v_first_path boolean := false;
BEGIN
    PERFORM set_config('pglease.writer', '{{version}}', true);
    IF p_lock_timeout_ms > 0 THEN
        v_ok := set_config('lock_timeout', p_lock_timeout_ms::text, true) IS NULL;
    END IF;
    IF p_kind = 'semaphore' THEN
        v_ok := pg_advisory_xact_lock({{name_key(p_ns, p_semaphore)}}) IS NULL;
    END IF;
    v_ok := pg_advisory_xact_lock({{name_key(p_ns, p_name)}}) IS NULL;

    -- The first path (see above): an unqueued attempt, or a queued one.
    IF p_kind = 'plain' AND NOT p_queued THEN
        {{new_plain_row}}
         WHERE NOT EXISTS (SELECT 1 FROM {{table}} AS s
                            WHERE s."semaphore" = p_name AND (s."expires_at" > now() OR s."kind" IN ('shared', 'quota')))
           AND NOT EXISTS (SELECT 1 FROM {{waiters}} AS w
                            WHERE w."name" = p_name AND w."client" <> p_client)
        ON CONFLICT ("name") DO NOTHING
        RETURNING true, l."token", l."session_pid" IS NOT NULL INTO o_acquired, o_token, o_session_bound;
        v_first_path := FOUND;
    ELSIF p_kind = 'plain' THEN
        {{new_plain_row}}
          FROM {{waiters}} AS q
         WHERE q."name" = p_name AND q."client" = p_client
           AND NOT EXISTS (SELECT 1 FROM {{table}} AS s
                            WHERE s."semaphore" = p_name AND (s."expires_at" > now() OR s."kind" IN ('shared', 'quota')))
           AND NOT EXISTS (SELECT 1 FROM {{waiters}} AS w
                            WHERE w."name" = p_name AND w."client" <> p_client AND NOT w."shared"
                              AND (w."since", w."client") < (q."since", q."client"))
        ON CONFLICT ("name") DO NOTHING
        RETURNING true, l."token", l."session_pid" IS NOT NULL INTO o_acquired, o_token, o_session_bound;
        v_first_path := FOUND;
    END IF;

    IF NOT v_first_path THEN

        -- The second path: every rule, one statement each, in this order; the
        -- decision follows them. (Each statement reads with a snapshot taken
        -- under the name's lock: no acquisition of the name commits meanwhile,
        -- and the INSERT's ON CONFLICT clause re-checks the row as it is then,
        -- for what renewals, releases and Guard change without that lock.)
        v_srv := {{server}};

        -- Another kind: a live row of another kind on the name, by its kind and
        -- size. For a plain lease, a row of another kind under its name (shared
        -- leases of the name are not another kind to it: see the shared
        -- holders below); for a slot, a row under its semaphore's name of
        -- another kind or recording another count, or a plain lease on that
        -- name. (Through the semaphore index and the primary key: the cost
        -- does not grow with the table.)
        SELECT c."kind", c."size" INTO v_clash_kind, v_clash_size
          FROM (SELECT l."kind", coalesce(l."slots", 0) AS "size" FROM {{table}} AS l
                 WHERE l."semaphore" = coalesce(p_semaphore, p_name) AND l."expires_at" > now()
                   AND (CASE WHEN p_kind = 'plain' THEN l."kind" <> 'shared'
                             ELSE l."kind" <> p_kind OR l."slots" IS DISTINCT FROM p_slots END)
                UNION ALL
                SELECT l."kind", 0 FROM {{table}} AS l
                 WHERE p_kind <> 'plain' AND l."name" = p_semaphore AND l."semaphore" IS NULL
                   AND l."expires_at" > now()) AS c
         LIMIT 1;
        v_clash := FOUND;

        -- The holder: the name's own row, if any.
        SELECT l."owner", l."token", l."expires_at" > now() AS "live",
               coalesce(l."session_pid" IS NOT NULL AND l."session_server" = v_srv, false) AS "session_bound",
               (extract(epoch FROM l."expires_at" - now()) * 1000)::bigint AS "remaining_ms",
               (extract(epoch FROM now() - l."renewed_at") * 1000)::bigint AS "heartbeat_ms",
               l."metadata" ->> 'client' AS "client", l."session_pid" AS "pid"
          INTO h FROM {{table}} AS l WHERE l."name" = p_name;
        v_row := FOUND;
        v_held := v_row AND h."live";

        -- Shared holders of a plain lease's name (CreateAcquireShared): a live
        -- one, unless bound to a session of this incarnation that has ended (as
        -- a plain row is taken over then), refuses it. The one a refusal
        -- reports: one bound to a session first (for the waiter to watch), then
        -- the one that expires last.
        IF p_kind = 'plain' THEN
            SELECT l."owner", l."token",
                   coalesce(l."session_pid" IS NOT NULL AND l."session_server" = v_srv, false) AS "session_bound",
                   (extract(epoch FROM l."expires_at" - now()) * 1000)::bigint AS "remaining_ms",
                   (extract(epoch FROM now() - l."renewed_at") * 1000)::bigint AS "heartbeat_ms",
                   l."session_pid" AS "pid", l."metadata"->>'client' AS "client"
              INTO r FROM {{table}} AS l
             WHERE l."semaphore" = p_name AND l."kind" = 'shared' AND l."expires_at" > now()
               AND NOT {{session_ended(p_ns, l."session_pid", l."session_server" = v_srv)}}
             ORDER BY 3 DESC, 4 DESC
             LIMIT 1;
            v_reading := FOUND;
        END IF;

        -- The queue: this wait's place (its first registration, or now), and
        -- the live waiters queued before it, when one of them keeps it from the
        -- lease: the first, once the lease is promised to it (v_first names it
        -- then), or any, for a wait already in the queue (queued waiters take
        -- their turns in order; only a new attempt may overtake, as a client
        -- taking the name again at once does).
        IF p_queued THEN
            SELECT w."since" INTO v_since FROM {{waiters}} AS w
             WHERE w."name" = p_name AND w."client" = p_client;
            v_registered := FOUND;
        END IF;
        IF NOT v_registered THEN
            v_since := now();
        END IF;
        SELECT coalesce(max(f.n) FILTER (WHERE f.due OR v_registered), 0), max(f."client") FILTER (WHERE f.due)
          INTO o_ahead, v_first
          FROM (SELECT p_name AS "name") AS n
         CROSS JOIN (SELECT p_client AS "client", p_ns AS "ns", v_since AS "since",
                            p_fair_ms * interval '1 millisecond' AS "fair") AS q
          LEFT JOIN LATERAL ({{first}}) AS f ON true;

        -- The row: written unless something above refuses, and not at all over
        -- a live row that is not session-bound (it would refuse, ON CONFLICT,
        -- after locking it, and the attempt would write). It takes over an
        -- expired row, or a session-bound one whose session ended, as the row
        -- is now, not as of the reads above.
        IF o_ahead = 0 AND NOT v_clash AND NOT v_reading AND NOT (v_held AND NOT h."session_bound") THEN
            INSERT INTO {{table}} AS l
                ("name", "owner", "token", "acquired_at", "renewed_at", "expires_at",
                 "hold_until", "ttl", "session_pid", "session_server", "metadata", "semaphore", "slots",
                 "kind", "weight")
            VALUES (p_name, p_owner, nextval('{{seq}}'), now(), now(),
                    now() + p_ttl_ms * interval '1 millisecond',
                    now() + p_hold_ms * interval '1 millisecond',
                    p_ttl_ms * interval '1 millisecond',
                    CASE WHEN p_session THEN pg_backend_pid() END,
                    CASE WHEN p_session THEN v_srv END,
                    p_metadata || jsonb_build_object('client', p_client),
                    p_semaphore, p_slots, p_kind, 1)
            ON CONFLICT ("name") DO UPDATE
               SET "owner" = excluded."owner", "token" = excluded."token",
                   "acquired_at" = excluded."acquired_at", "renewed_at" = excluded."renewed_at",
                   "expires_at" = excluded."expires_at", "hold_until" = excluded."hold_until",
                   "ttl" = excluded."ttl", "session_pid" = excluded."session_pid",
                   "session_server" = excluded."session_server", "metadata" = excluded."metadata",
                   "semaphore" = excluded."semaphore", "slots" = excluded."slots",
                   "kind" = excluded."kind", "weight" = excluded."weight", "stepdown_at" = NULL
             WHERE l."expires_at" <= now()
                OR {{session_ended(p_ns, l."session_pid", l."session_server" = v_srv)}}
            RETURNING true, l."token", l."session_pid" IS NOT NULL INTO o_acquired, o_token, o_session_bound;
        END IF;
    END IF;
    o_acquired := coalesce(o_acquired, false);

    IF o_acquired THEN
        -- Acquired over shared leases that ended (expired, or their
        -- sessions did; a live one would have refused it, and no new one
        -- can appear under the name's lock): their rows go. Deleting waits
        -- for a Guard's lock on one of them, so that a stale shared
        -- holder's guarded write commits before this acquisition does, as
        -- a takeover of a plain row waits.
        IF p_kind = 'plain' AND NOT v_first_path THEN
            DELETE FROM {{table}} AS l WHERE l."semaphore" = p_name AND l."kind" IN ('shared', 'quota');
        END IF;
        -- Out of the queue (a queued wait, or a polling one's registration).
        IF p_queued OR p_queue_ttl_ms > 0 THEN
            DELETE FROM {{waiters}} AS w WHERE w."name" = p_name AND w."client" = p_client;
        END IF;
        IF p_session AND p_queued THEN
            -- A fast-failover lease handed to a queued waiter (by a
            -- release, or taken over from a dead or expired holder): wake
            -- the next live waiter once, so that it looks again and watches
            -- the new holder's session. It was queued behind this one and
            -- did not watch the previous holder, and nothing else would
            -- tell it of the new one before its fallback poll: a crash of
            -- the new holder would wait for that poll.
            PERFORM pg_notify('pglease_' || w."client", p_name)
              FROM (SELECT w."client" FROM {{waiters}} AS w
                     WHERE w."name" = p_name AND w."client" <> p_client AND NOT w."shared"
                       AND CASE WHEN w."expires_at" > now()
                                THEN NOT {{client_gone(p_ns, w."client")}}
                                ELSE false END
                     ORDER BY w."since", w."client"
                     LIMIT 1) AS w;
        END IF;
        -- The row taken over, if any, as it was.
        IF v_row THEN
            o_owner := coalesce(h."owner", ''); o_other_token := coalesce(h."token", 0);
        ELSE
            o_owner := ''; o_other_token := 0;
        END IF;
        o_remaining_ms := 0; o_heartbeat_ms := 0; o_client := ''; o_watchable := false;
        o_ahead := 0; o_clash_kind := ''; o_clash_size := 0; o_pid := 0;
        v_setting := {{durable}};
        RETURN;
    END IF;

    -- Refused. A queued wait registers, or keeps its place (not for
    -- another kind: that refusal is final).
    IF p_queued AND NOT v_clash THEN
        INSERT INTO {{waiters}} AS w ("name", "client", "since", "expires_at", "owner", "shared")
        VALUES (p_name, p_client, v_since, now() + p_queue_ttl_ms * interval '1 millisecond', p_owner, false)
        ON CONFLICT ("name", "client") DO UPDATE
           SET "expires_at" = excluded."expires_at", "owner" = excluded."owner", "shared" = false,
               "polling" = false;
    END IF;
    -- A wait that cannot queue (p_queue_ttl_ms without p_queued: no session
    -- of its own) refused by shared holders: registered as polling, live
    -- while fresh, so that new shared leases of the name wait behind it
    -- (CreateAcquireShared) and readers taking turns cannot starve it. It
    -- keeps its place (since) while it keeps being refused.
    IF NOT p_queued AND p_queue_ttl_ms > 0 AND v_reading THEN
        INSERT INTO {{waiters}} AS w ("name", "client", "since", "expires_at", "owner", "shared", "polling")
        VALUES (p_name, p_client, now(), now() + p_queue_ttl_ms * interval '1 millisecond', p_owner, false, true)
        ON CONFLICT ("name", "client") DO UPDATE
           SET "expires_at" = excluded."expires_at", "owner" = excluded."owner", "shared" = false,
               "polling" = true;
    END IF;
    -- Refused a free lease promised to a waiter (or one whose holder's
    -- session ended): wake that waiter now rather than at its next look
    -- (see Release).
    IF v_first IS NOT NULL AND NOT v_reading
       AND NOT (v_row AND h."remaining_ms" > 0
                AND NOT {{session_ended(p_ns, h."pid", h."session_bound")}}) THEN
        PERFORM pg_notify('pglease_' || v_first, p_name);
    END IF;
    IF NOT p_in_batch THEN
        -- Acquiring nothing, the commit need not wait for its WAL flush.
        v_setting := set_config('synchronous_commit', 'off', true);
    END IF;

    -- The holder the refusal reports: the name's own live row; else a live
    -- shared holder, whose client is reported when it is another's
    -- (schema version 11: the wait watches that client's doorbell, which
    -- its release of the shared lease rings; a shared lease of this
    -- client's own is no orphan of its, and has no bell to watch); else the
    -- name's row as it is; else none (remaining -1).
    o_clash_kind := coalesce(v_clash_kind, ''); o_clash_size := coalesce(v_clash_size, 0);
    o_token := 0;
    IF v_held OR (v_row AND NOT v_reading) THEN
        o_session_bound := h."session_bound"; o_owner := h."owner"; o_other_token := h."token";
        o_remaining_ms := h."remaining_ms"; o_heartbeat_ms := h."heartbeat_ms";
        o_client := coalesce(h."client", ''); o_pid := coalesce(h."pid", 0);
    ELSIF v_reading THEN
        o_session_bound := r."session_bound"; o_owner := r."owner"; o_other_token := r."token";
        o_remaining_ms := r."remaining_ms"; o_heartbeat_ms := r."heartbeat_ms";
        o_client := CASE WHEN r."client" <> p_client THEN r."client" ELSE '' END;
        o_pid := coalesce(r."pid", 0);
    ELSE
        o_session_bound := false; o_owner := ''; o_other_token := 0;
        o_remaining_ms := -1; o_heartbeat_ms := 0; o_client := ''; o_pid := 0;
    END IF;
    -- Whether the session-bound holder's session still holds its session
    -- lock, so that the waiter can watch it (AwaitSession).
    o_watchable := CASE WHEN o_session_bound THEN NOT {{session_gone(p_ns, o_pid)}} ELSE false END;
END
$pglease$

-- name: CreateRelease
-- p_name the name, p_token the token, p_channel the notification channel,
-- p_ns the advisory-lock namespace, p_fair_ms how often a waiter may be
-- woken (ms); p_client the releasing client's id and p_bell the bell of
-- its doorbell that the calling session holds, or -1 (schema version 12:
-- see the ring below). Returns the rows released or
-- kept (0 or 1), the notifications sent, 1 (the old statement's
-- count of its nowait part), and whether it rang the doorbell (below).
--
-- Before the minimum hold time the row is kept (and stays held) until
-- then; afterwards it is deleted, the first live waiter of the queue is
-- woken alone on its client's own channel (one statement per hand-off,
-- however many clients wait: queued waiters do not act on the table's
-- channel), and the table's channel is notified for what does not queue
-- (TryAcquire loops, observers of a leader). Registrations that went stale
-- are dropped on the way. A name nobody queues for costs the delete (which
-- also probes the waiters' primary key) and the table's notification; the
-- queue's statement runs only when a registration exists.
--
-- A release need not wait for its WAL flush: lost in a crash, it only
-- delays the next holder until the row expires. (Acquire and renew do
-- wait: losing them could let two holders overlap.)
--
-- The ring (schema version 12). A release that wakes the first waiter of
-- the name (o_notified 2) rings the releasing client's doorbell, which
-- that waiter's client may watch instead of listening (see Ring in
-- session.sql). Called on the client's dedicated session, which holds the
-- bell p_bell, the release rings it itself, in the same statement: the
-- bell is freed before the release commits, a round trip earlier than a
-- ring of its own after the reply. So that the woken waiter's attempt does
-- not read the row as still held, the release rings only once it holds
-- the name's transaction lock, which every acquisition of the name takes
-- first: the attempt then waits for the release's commit. It takes that
-- lock only to ring, and without waiting (it holds the row's lock by
-- then, and an acquisition holding the name's may be waiting for the row:
-- waiting in turn would deadlock); when an acquisition of the name holds
-- it, the release rings nothing (o_rang false). A release that rings
-- nothing (that one, of a shared lease, or on another connection: p_bell
-- -1) leaves the ring to its client, after the reply, as before.
CREATE OR REPLACE FUNCTION {{release_fn}}(
{{release_params}}
{{release_result}})
LANGUAGE plpgsql VOLATILE {{fn_options}}AS $pglease$
DECLARE
    v_setting text;
    v_acquired_at timestamptz;
    v_waiters boolean;
    v_shared text;
BEGIN
    o_released := 0;
    o_notified := 0;
    o_nowait := 1;
    o_rang := false;
    DELETE FROM {{table}} AS l
     WHERE l."name" = p_name AND l."token" = p_token AND l."hold_until" <= now()
    RETURNING l."acquired_at",
              -- Whether a registration exists; when none does, the
              -- table's channel is notified here.
              (SELECT CASE WHEN x.queue THEN true WHEN pg_notify(p_channel, p_name) IS NULL THEN false ELSE false END
                 FROM (SELECT EXISTS (SELECT 1 FROM {{waiters}} AS w WHERE w."name" = p_name) AS queue) AS x),
              set_config('synchronous_commit', 'off', true),
              CASE WHEN l."kind" = 'shared' THEN l."semaphore" END
         INTO v_acquired_at, v_waiters, v_setting, v_shared;
    IF NOT FOUND THEN
        v_setting := set_config('synchronous_commit', 'off', true);
        -- Kept: the row no longer belongs to a client's live lease; drop
        -- the client id so that the client does not take it for a lost
        -- reply's row.
        UPDATE {{table}} AS l
           SET "expires_at" = l."hold_until", "session_pid" = NULL, "session_server" = NULL,
               "metadata" = l."metadata" - 'client'
         WHERE l."name" = p_name AND l."token" = p_token AND l."hold_until" > now();
        GET DIAGNOSTICS o_released = ROW_COUNT;
        RETURN;
    END IF;
    o_released := 1;
    IF v_shared IS NOT NULL THEN
        -- A shared lease of the name v_shared (CreateAcquireShared): the
        -- table's channel was notified above. The first live waiter for an
        -- exclusive lease of the name is woken on its client's channel, as
        -- a release of the name itself would: it takes the name if this
        -- was the last shared lease, and otherwise looks at the ones left
        -- (it watches the session of one bound to its session, and this
        -- one may have been it). Since schema version 11 it may watch this
        -- client's doorbell instead of listening (the refusal reports a
        -- shared holder's client): o_notified 2 has the client ring it, as
        -- a release that woke the first waiter of a name does.
        o_notified := 1;
        PERFORM pg_notify('pglease_' || w."client", v_shared)
          FROM (SELECT w."client" FROM {{waiters}} AS w
                 WHERE w."name" = v_shared AND NOT w."shared"
                   AND CASE WHEN w."expires_at" > now()
                            THEN NOT {{client_gone(p_ns, w."client")}}
                            ELSE false END
                 ORDER BY w."since", w."client"
                 LIMIT 1) AS w;
        IF FOUND THEN
            o_notified := 2;
        END IF;
        RETURN;
    END IF;
    IF NOT v_waiters THEN
        o_notified := 1;
        RETURN;
    END IF;
    WITH del AS (
        SELECT p_name AS "name", v_acquired_at AS "acquired_at"
    ), lockns AS (
        SELECT p_ns AS v
    ), head AS MATERIALIZED (
        {{head(p_name)}}
    ), wake AS MATERIALIZED (
        -- The first waiter is woken the first time, and again once the lease
        -- is promised to it (p_fair_ms ms after its turn began: see marked); not in
        -- between, while the releasing client may take the name again at once
        -- (a burst) and a waiter woken in vain looks again by itself.
        SELECT h."client", h."since" FROM head AS h
         WHERE h."notified_at" IS NULL OR h."notified_at" <= now() - p_fair_ms * interval '1 millisecond'
    ), marked AS (
        -- Its turn began when it queued or when the lease now released was
        -- acquired, whichever is later: a waiter queued through a long hold is
        -- promised the lease at once, one queued behind a burst p_fair_ms ms later.
        UPDATE {{waiters}} AS w SET "notified_at" = greatest(wake."since", del."acquired_at")
          FROM wake, del
         WHERE w."name" = p_name AND w."client" = wake."client" AND w."notified_at" IS NULL
    ), stale AS (
        DELETE FROM {{waiters}} AS w
         WHERE w."name" = p_name AND w."expires_at" <= now()
    ), note AS (
        -- The table's channel when no live waiter was seen (waits that do not
        -- queue, or whose registration this statement could not see yet) or
        -- the first one is woken (observers: a hand-off is under way).
        SELECT pg_notify(p_channel, del."name") FROM del
         WHERE NOT EXISTS (SELECT 1 FROM head) OR EXISTS (SELECT 1 FROM wake)
        UNION ALL
        SELECT pg_notify('pglease_' || wake."client", del."name") FROM del, wake
    )
    SELECT count(*) INTO o_notified FROM note;
    IF o_notified = 2 AND p_bell >= 0 THEN
        IF pg_try_advisory_xact_lock({{name_key(p_ns, p_name)}}) THEN
            PERFORM {{ring(p_ns, p_client, p_bell)}};
            o_rang := true;
        END IF;
    END IF;
END
$pglease$

-- name: CreateReleaseCompat
-- Schema version 12: CreateRelease by the signature of versions 6 to 11
-- (without p_client and p_bell), which the clients of those releases
-- still running during a rolling upgrade call: it rings nothing (their
-- clients ring after the reply), as the release they knew did.
CREATE OR REPLACE FUNCTION {{release_fn}}(
{{release_v11_params}}
{{release_v11_result}})
LANGUAGE plpgsql VOLATILE {{fn_options}}AS $pglease$
BEGIN
    SELECT {{release_v11_select}} INTO {{release_v11_into}}
      FROM {{release_fn}}({{release_v11_pass}}, p_client => '', p_bell => -1) AS a;
END
$pglease$

-- name: CreateAcquireShared
-- A row of its own among a name's, for the kinds whose holders share
-- their name: shared leases (p_kind 'shared', schema version 8) and quotas
-- (p_kind 'quota', version 10). Each holder holds a row of its own,
-- "name#i" (the lowest i not held), with the name in "semaphore", its kind
-- in "kind", the kind's size in "slots" (p_capacity: a quota's units; 0
-- for a shared lease, which the releases of schema versions 8 and 9 read
-- as the kind), the units it takes in "weight" (p_weight; 1 for a shared
-- lease), and a fencing token of its own; it is renewed, released
-- (CreateRelease) and guarded by that row as any lease is. p_name the
-- name, p_owner to p_queue_ttl_ms as CreateAcquire's (p_queued: the
-- attempt registers in the queue of the name), p_in_batch whether the
-- call shares its transaction, p_mine the rows of the name this client
-- holds (a JSON array of names).
--
-- Shared leases: many shared holders of a name at once, or one exclusive
-- holder (a plain lease of the name, CreateAcquire), never both. A quota:
-- holders whose weights sum to at most its capacity, first in line first.
--
-- The rules, all under the name's advisory lock, the one every acquisition
-- of the name takes first (CreateAcquire's, and so a semaphore's of that
-- name, and AcquireAll's):
--   - another kind: a live row under the name of another kind or size (a
--     slot of a semaphore of the name, a quota of another capacity), and
--     for a quota a live plain lease of the name itself, refuses the
--     attempt at once (o_clash_kind and o_clash_size); nothing is written.
--   - an exclusive holder (shared leases): the name's own row, live (and,
--     session-bound, its session alive), refuses it; the holder is
--     reported as CreateAcquire reports one.
--   - the queue: a live registration of another client's wait (for a
--     shared lease, a wait for a plain lease of the name; for a quota, any:
--     a polling one too, while fresh, see CreateWaiters) queued before
--     this wait (any, for an attempt that is not in the queue yet: a
--     quota's polling wait is in it by its registration) refuses it
--     (o_ahead, their number). So a stream of shared holders cannot starve
--     an exclusive one (the shared holders drain, the exclusive waiter
--     takes the name, and the shared waiters follow), and small requests
--     of a quota cannot starve a large one.
--   - the units (a quota): the live rows of the quota (not bound to a
--     session that ended, and not this client's rows deleted below) whose
--     weights and p_weight sum to more than p_capacity refuse it; the
--     holder reported is one bound to a session first (for the waiter to
--     watch), then the one that expires first; o_holders lists every live
--     session-bound holder of the quota (row to backend pid), whose
--     sessions the waiter watches, as a semaphore's waiter watches each
--     slot's: the end of any of them may free the units it needs.
-- Otherwise the name's own row, ended, is deleted (waiting for a Guard's
-- lock on it, so that its stale holder's guarded write commits first),
-- rows of this client's leases of the name and kind that it does not hold
-- (acquisitions whose reply was lost: the caller holds the name's local
-- slot meanwhile) are deleted, and the lowest free "name#i" is written,
-- taking over an ended row of that name. A refused queued attempt
-- registers in the queue as a wait for a share of the name ("shared"; the
-- queue's wake-ups and promises are for exclusive waits: these waiters
-- hear the table's channel), and a quota's wait that cannot queue (no
-- session: p_queue_ttl_ms without p_queued) as a polling one, live while
-- fresh, which keeps its place while it keeps being refused. Returns
-- CreateAcquire's columns, the row written (o_name) and, for a quota's
-- refusal, its session-bound holders (o_holders, a JSON object; '{}'
-- otherwise).
CREATE OR REPLACE FUNCTION {{acquire_shared_fn}}(
{{acquire_shared_params}}
{{acquire_shared_result}})
LANGUAGE plpgsql VOLATILE {{fn_options}}AS $pglease$
DECLARE
    v_ok boolean;
    v_setting text;
    v_srv text;
    v_since timestamptz;
    v_registered boolean;
    v_held boolean;
    v_full boolean := false;
    v_i integer;
    v_sync text;
    h record;           -- the name's own row
    q record;           -- a holder of the quota, when it refuses
BEGIN
    PERFORM set_config('pglease.writer', '{{version}}', true);
    IF p_lock_timeout_ms > 0 THEN
        v_ok := set_config('lock_timeout', p_lock_timeout_ms::text, true) IS NULL;
    END IF;
    v_ok := pg_advisory_xact_lock({{name_key(p_ns, p_name)}}) IS NULL;
    v_srv := {{server}};
    o_acquired := false; o_token := 0; o_session_bound := false; o_owner := '';
    o_other_token := 0; o_remaining_ms := -1; o_heartbeat_ms := 0; o_client := '';
    o_watchable := false; o_ahead := 0; o_pid := 0; o_name := ''; o_holders := '{}';
    IF NOT (p_kind = 'shared' AND p_weight = 1 AND p_capacity = 0
            OR p_kind = 'quota' AND p_weight BETWEEN 1 AND p_capacity) THEN
        RAISE EXCEPTION 'pglease: % acquires shared leases or units of a quota, not % of weight % and size %',
            '{{acquire_shared_fn}}', p_kind, p_weight, p_capacity;
    END IF;
    IF NOT p_in_batch THEN
        -- Acquiring nothing, the commit need not wait for its WAL flush
        -- (the caller's setting is put back below, and raised by
        -- {{durable}}, once it acquires: remote_write and remote_apply
        -- are kept).
        v_sync := current_setting('synchronous_commit');
        v_setting := set_config('synchronous_commit', 'off', true);
    END IF;

    SELECT l."kind", coalesce(l."slots", 0) INTO o_clash_kind, o_clash_size FROM {{table}} AS l
     WHERE l."semaphore" = p_name AND (l."kind" <> p_kind OR l."slots" IS DISTINCT FROM p_capacity)
       AND l."expires_at" > now()
     LIMIT 1;
    IF FOUND THEN
        RETURN;
    END IF;
    o_clash_kind := ''; o_clash_size := 0;

    SELECT w."since" INTO v_since FROM {{waiters}} AS w
     WHERE (p_queued OR p_kind = 'quota' AND p_queue_ttl_ms > 0) AND w."name" = p_name AND w."client" = p_client;
    v_registered := FOUND;
    IF NOT v_registered THEN
        v_since := now();
    END IF;

    SELECT l."owner", l."token", l."metadata" ->> 'client' AS "client", l."session_pid" AS "pid",
           (extract(epoch FROM l."expires_at" - now()) * 1000)::bigint AS "remaining_ms",
           (extract(epoch FROM now() - l."renewed_at") * 1000)::bigint AS "heartbeat_ms",
           l."session_pid" IS NOT NULL AND l."session_server" = v_srv AS "session_bound",
           l."expires_at" > now() AS "live"
      INTO h FROM {{table}} AS l WHERE l."name" = p_name;
    v_held := FOUND AND h."live"
              AND NOT {{session_ended(p_ns, h."pid", h."session_bound")}};
    IF v_held AND p_kind = 'quota' THEN
        o_clash_kind := 'plain';
        RETURN;
    END IF;
    IF NOT v_held THEN
        SELECT count(*) INTO o_ahead FROM {{waiters}} AS w
         WHERE w."name" = p_name AND (p_kind = 'quota' OR NOT w."shared") AND w."client" <> p_client
           AND (NOT v_registered OR (w."since", w."client") < (v_since, p_client))
           AND CASE WHEN w."expires_at" > now()
                    THEN w."polling" OR NOT {{client_gone(p_ns, w."client")}}
                    ELSE false END;
    END IF;
    IF p_kind = 'quota' THEN
        SELECT sum(l."weight") OVER () + p_weight > p_capacity AS "full", l."owner", l."token",
               l."session_pid" AS "pid",
               (extract(epoch FROM l."expires_at" - now()) * 1000)::bigint AS "remaining_ms",
               (extract(epoch FROM now() - l."renewed_at") * 1000)::bigint AS "heartbeat_ms",
               coalesce(l."session_pid" IS NOT NULL AND l."session_server" = v_srv, false) AS "session_bound"
          INTO q FROM {{table}} AS l
         WHERE l."semaphore" = p_name AND l."kind" = 'quota' AND l."expires_at" > now()
           AND NOT {{session_ended(p_ns, l."session_pid", l."session_server" = v_srv)}}
           AND NOT (coalesce(l."metadata" ->> 'client' = p_client, false)
                    AND l."name" NOT IN (SELECT jsonb_array_elements_text(p_mine)))
         ORDER BY 7 DESC, 5
         LIMIT 1;
        IF FOUND AND (q."full" OR o_ahead > 0) THEN
            v_full := q."full";
            o_owner := q."owner"; o_other_token := q."token"; o_remaining_ms := q."remaining_ms";
            o_heartbeat_ms := q."heartbeat_ms"; o_session_bound := q."session_bound";
            o_watchable := q."session_bound"; o_pid := coalesce(q."pid", 0);
            IF q."session_bound" THEN
                SELECT coalesce(jsonb_object_agg(l."name", l."session_pid"), '{}') INTO o_holders
                  FROM {{table}} AS l
                 WHERE l."semaphore" = p_name AND l."kind" = 'quota' AND l."expires_at" > now()
                   AND l."session_pid" IS NOT NULL AND l."session_server" = v_srv
                   AND NOT {{session_ended(p_ns, l."session_pid", true)}};
            END IF;
        END IF;
    END IF;
    IF v_held OR v_full OR o_ahead > 0 THEN
        IF v_held THEN
            o_owner := h."owner"; o_other_token := h."token"; o_remaining_ms := h."remaining_ms";
            o_heartbeat_ms := h."heartbeat_ms"; o_client := coalesce(h."client", '');
            o_session_bound := h."session_bound"; o_watchable := h."session_bound";
            o_pid := coalesce(h."pid", 0);
        END IF;
        IF p_queued THEN
            INSERT INTO {{waiters}} AS w ("name", "client", "since", "expires_at", "owner", "shared")
            VALUES (p_name, p_client, v_since, now() + p_queue_ttl_ms * interval '1 millisecond', p_owner, true)
            ON CONFLICT ("name", "client") DO UPDATE
               SET "expires_at" = excluded."expires_at", "owner" = excluded."owner", "shared" = true,
                   "polling" = false;
        ELSIF p_kind = 'quota' AND p_queue_ttl_ms > 0 THEN
            INSERT INTO {{waiters}} AS w ("name", "client", "since", "expires_at", "owner", "shared", "polling")
            VALUES (p_name, p_client, v_since, now() + p_queue_ttl_ms * interval '1 millisecond', p_owner, true, true)
            ON CONFLICT ("name", "client") DO UPDATE
               SET "expires_at" = excluded."expires_at", "owner" = excluded."owner", "shared" = true,
                   "polling" = true;
        END IF;
        RETURN;
    END IF;

    DELETE FROM {{table}} AS l WHERE l."name" = p_name;
    DELETE FROM {{table}} AS l
     WHERE l."semaphore" = p_name AND l."kind" = p_kind AND l."metadata" ->> 'client' = p_client
       AND l."name" NOT IN (SELECT jsonb_array_elements_text(p_mine));
    SELECT min(i) INTO v_i
      FROM generate_series(0, (SELECT count(*) FROM {{table}} AS l
                                WHERE l."semaphore" = p_name AND l."kind" = p_kind)::integer) AS i
     WHERE NOT EXISTS (
            SELECT 1 FROM {{table}} AS l
             WHERE l."name" = p_name || '#' || i AND l."expires_at" > now()
               AND NOT {{session_ended(p_ns, l."session_pid", l."session_server" = v_srv)}});
    INSERT INTO {{table}} AS l
        ("name", "owner", "token", "acquired_at", "renewed_at", "expires_at",
         "hold_until", "ttl", "session_pid", "session_server", "metadata", "semaphore", "slots",
         "kind", "weight")
    VALUES (p_name || '#' || v_i, p_owner, nextval('{{seq}}'), now(), now(),
            now() + p_ttl_ms * interval '1 millisecond',
            now() + p_hold_ms * interval '1 millisecond',
            p_ttl_ms * interval '1 millisecond',
            CASE WHEN p_session THEN pg_backend_pid() END,
            CASE WHEN p_session THEN v_srv END,
            p_metadata || jsonb_build_object('client', p_client),
            p_name, p_capacity, p_kind, p_weight)
    ON CONFLICT ("name") DO UPDATE
       SET "owner" = excluded."owner", "token" = excluded."token",
           "acquired_at" = excluded."acquired_at", "renewed_at" = excluded."renewed_at",
           "expires_at" = excluded."expires_at", "hold_until" = excluded."hold_until",
           "ttl" = excluded."ttl", "session_pid" = excluded."session_pid",
           "session_server" = excluded."session_server", "metadata" = excluded."metadata",
           "semaphore" = excluded."semaphore", "slots" = excluded."slots",
           "kind" = excluded."kind", "weight" = excluded."weight", "stepdown_at" = NULL
    RETURNING l."name", l."token", l."session_pid" IS NOT NULL INTO o_name, o_token, o_session_bound;
    o_acquired := true;
    IF p_queued OR p_kind = 'quota' AND p_queue_ttl_ms > 0 THEN
        DELETE FROM {{waiters}} AS w WHERE w."name" = p_name AND w."client" = p_client;
    END IF;
    IF v_sync IS NOT NULL THEN
        v_setting := set_config('synchronous_commit', v_sync, true);
    END IF;
    v_setting := {{durable}};
END
$pglease$

-- name: CreateAcquireCompat
-- Schema version 10: CreateAcquire by the signature of versions 7 to 9
-- (without p_kind, and the clash as an int code, o_clash), which the
-- clients of those releases still running during a rolling upgrade call.
-- A thin wrapper: it asks for the kind their arguments meant (a slot when
-- p_semaphore is set), so their single acquisitions follow this version's
-- rules, and encodes the clash as they read it (0 none, 1 a plain lease,
-- -1 shared leases, n a semaphore of n slots). PostgreSQL tells it from
-- CreateAcquire by its argument types. A later version may drop it once
-- it no longer supports those releases' clients.
CREATE OR REPLACE FUNCTION {{acquire_fn}}(
{{acquire_v9_params}}
{{acquire_v9_result}})
LANGUAGE plpgsql VOLATILE {{fn_options}}AS $pglease$
BEGIN
    SELECT {{acquire_v9_select}}
      INTO {{acquire_v9_into}}
      FROM {{acquire_fn}}({{acquire_v9_pass}},
                          p_kind => CASE WHEN p_semaphore IS NULL THEN 'plain' ELSE 'semaphore' END) AS a;
END
$pglease$

-- name: CreateAcquireSharedCompat
-- CreateAcquireShared by the signature of versions 8 and 9, as
-- CreateAcquireCompat.
CREATE OR REPLACE FUNCTION {{acquire_shared_fn}}(
{{acquire_shared_v9_params}}
{{acquire_shared_v9_result}})
LANGUAGE plpgsql VOLATILE {{fn_options}}AS $pglease$
BEGIN
    SELECT {{acquire_shared_v9_select}}
      INTO {{acquire_shared_v9_into}}
      FROM {{acquire_shared_fn}}({{acquire_shared_v9_pass}}, p_kind => 'shared', p_weight => 1, p_capacity => 0) AS a;
END
$pglease$

-- name: CreateFence
-- Schema version 9: the fence that keeps clients of earlier releases,
-- still running during a rolling upgrade, from acquiring by statements of
-- their own. Every acquisition of this version writes the lease
-- table with the setting pglease.writer at the table's schema version:
-- the acquisition functions set it first, and a set's transaction sets it
-- with its locks (AcquireAllLocks); for the rest of the transaction. An INSERT
-- without it (an earlier release's set, whose statement knows nothing of
-- the kinds a later version added) fails with this error, and nothing is
-- written; its single acquisitions call the functions the upgrade
-- replaced, and so follow this version's rules, and its renewals and
-- releases update and delete rows of its own, which the fence lets pass.
-- A later version replaces this function with its own number, fencing
-- out this one's statements in turn — unless it changed no rule of what
-- an acquisition writes: the fence lets the versions from FencedBefore
-- (store.go) on write ({{fence_writers}}; version 12 lets version 11's).
-- A statement-level trigger: one call per statement, whatever the rows.
CREATE OR REPLACE FUNCTION {{fence_fn}}() RETURNS trigger
LANGUAGE plpgsql VOLATILE {{fn_options}}AS $pglease$
BEGIN
    IF coalesce(current_setting('pglease.writer', true), '') NOT IN ({{fence_writers}}) THEN
        RAISE EXCEPTION USING
            MESSAGE = format('pglease: table %I.%I has schema version {{version}}, and a client of an earlier pglease release may not acquire leases in it',
                             TG_TABLE_SCHEMA, TG_TABLE_NAME),
            HINT = 'upgrade this client to a pglease release of schema version {{fence_since}} or later; until then its held leases still renew and release';
    END IF;
    RETURN NULL;
END
$pglease$

-- name: CreateFenceTrigger
-- Fires CreateFence before every INSERT into the lease table (an INSERT
-- … ON CONFLICT DO UPDATE included). Created once: the function it calls
-- is replaced in place.
DO $pglease$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_trigger
                    WHERE tgrelid = '{{table}}'::regclass AND tgname = 'pglease_fence') THEN
        CREATE TRIGGER "pglease_fence" BEFORE INSERT ON {{table}}
            FOR EACH STATEMENT EXECUTE FUNCTION {{fence_fn}}();
    END IF;
END
$pglease$

-- name: CreateIncarnationFunction
-- The server incarnation that runs the call ({{server}}, see queries.sql):
-- the postmaster's start time and the id in CreateIncarnation, drawn when
-- the table is empty (INSERT … ON CONFLICT: of two first calls at once,
-- one draws, and the other reads its id once it commits). NULL when even
-- then no id can be read (a first call inside a REPEATABLE READ
-- transaction that raced with another): a session-bound row then counts
-- as another incarnation's, and falls back to its expiry. SECURITY
-- DEFINER, with the search_path of {{definer_options}}: the owner's
-- privileges on the table, so that the application role needs none.
CREATE OR REPLACE FUNCTION {{incarnation_fn}}() RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER {{definer_options}}AS $pglease$
DECLARE
    v_id text;
BEGIN
    SELECT i."id" INTO v_id FROM {{incarnation}} AS i;
    IF v_id IS NULL THEN
        INSERT INTO {{incarnation}} AS i ("id") VALUES (md5(random()::text || clock_timestamp()::text))
        ON CONFLICT ("one") DO NOTHING
        RETURNING i."id" INTO v_id;
        IF v_id IS NULL THEN
            SELECT i."id" INTO v_id FROM {{incarnation}} AS i;
        END IF;
    END IF;
    RETURN extract(epoch FROM pg_postmaster_start_time())::text || ' ' || v_id;
END
$pglease$
