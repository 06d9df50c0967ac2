-- The SQL of pglease, in one place: this file, functions.sql (the
-- server-side functions) and session.sql (what a client's dedicated session
-- and its watchers run: the session lock, the client lock, the doorbell).
--
-- Each statement starts with a "-- name: X" line. Identifiers are written as
-- {{table}} (the lease table, schema-qualified) and {{seq}} (the token
-- sequence); they are replaced once, when a Store is created, by identifiers
-- that were validated against [a-z_][a-z0-9_]{0,62} and then quoted. Every
-- value is a bind parameter; nothing a user types is spliced into SQL text.
--
-- All times are computed here with the server clock (now() is the start of
-- the statement's transaction; every statement below runs alone in its own
-- transaction unless the caller's transaction is used on purpose).
--
-- {{server}} names the server incarnation that runs the statement: the
-- postmaster's start time and the random id in the unlogged table
-- CreateIncarnation, which a crash-recovery cycle (every backend killed,
-- shared memory and with it every advisory lock reinitialised, the
-- postmaster kept) empties, as it empties every unlogged table, so that the
-- next call draws another (CreateIncarnationFunction). A standby promoted to
-- primary has a postmaster of its own, and an empty unlogged table. Session
-- advisory locks live exactly as long as one incarnation, so a session-bound
-- row is trusted to be free when its lock is free only where that lock was
-- granted. (Schema versions before 9 took the time the shared statistics
-- were last reset for the id, which a crash-recovery cycle renews too, but
-- so does an operator's pg_stat_reset_shared('bgwriter'): every
-- fast-failover row not renewed since then fell back to its expiry.)
--
-- Advisory-lock keys are prefixed by the lock namespace ($ns below): the
-- table's schema and name as the catalog resolves them, never as a user
-- spelled them, so every spelling of one table shares one key space. Every
-- key, and every probe of a session's or a client's lock, is written by a
-- macro ({{name_key(ns, name)}}, {{session_ended(ns, pid, here)}}, …),
-- which the renderer expands: each is defined once, with the seeds that
-- tell the keys apart, in macros.go.

-- name: CreateSchema
CREATE SCHEMA IF NOT EXISTS {{schema}}

-- name: CreateSequence
CREATE SEQUENCE IF NOT EXISTS {{seq}} AS bigint MINVALUE 1 NO CYCLE

-- name: SeedSequence
-- Run just after CreateSequence (by a migration that created the sequence,
-- and in the exported DDL): a sequence that has handed out nothing starts
-- at the server clock, in microseconds since the Unix epoch, so that a
-- table created again after its predecessor was lost (dropped, or missing
-- on a new primary or a restored database) hands out tokens above every
-- token the lost one handed out, as long as the server clock did not run
-- back and the lost table handed out fewer than a million tokens a second
-- on average since the Unix epoch. The sequence is marked used (is_called),
-- so that its first token is the clock plus one, the token state
-- (TokenState) reads the seed, and running this again (the DDL twice)
-- changes nothing. A sequence that has handed out tokens is never touched
-- (never moved backwards), and the seed never goes below its value.
SELECT setval('{{seq}}', greatest((extract(epoch FROM clock_timestamp()) * 1000000)::bigint, "last_value"), true)
  FROM {{seq}}
 WHERE NOT "is_called"

-- name: CreateTable
CREATE TABLE IF NOT EXISTS {{table}} (
    "name"          text        NOT NULL,
    "owner"         text        NOT NULL,
    "token"         bigint      NOT NULL,
    "acquired_at"   timestamptz NOT NULL,
    "renewed_at"    timestamptz NOT NULL,
    "expires_at"    timestamptz NOT NULL,
    "hold_until"    timestamptz NOT NULL,
    "ttl"           interval    NOT NULL,
    "session_pid"   integer,
    "metadata"      jsonb       NOT NULL DEFAULT '{}',
    "session_server" text,
    "semaphore"     text,
    "slots"         integer,
    "stepdown_at"   timestamptz,
    "kind"          text        NOT NULL DEFAULT 'plain',
    "weight"        integer     NOT NULL DEFAULT 1,
    PRIMARY KEY ("name"),
    CHECK (octet_length("name") BETWEEN 1 AND 255),
    CHECK ("token" > 0)
)

-- name: CreateSemaphoreIndex
-- The slot rows of a semaphore, found by its name (see WithSlots): an
-- acquisition compares the slot count it asks for with theirs.
CREATE INDEX IF NOT EXISTS {{semaphore_index}} ON {{table}} ("semaphore") WHERE "semaphore" IS NOT NULL

-- name: CreateWaiters
-- The queue of blocked Acquire calls: one row per waiting client and name
-- (the goroutines of one client queue locally), ordered by "since", so that
-- a release wakes the first live waiter alone and a free lease is promised
-- to it (see CreateAcquire and CreateRelease). Unlogged: nothing in it must survive a
-- crash, since waiting clients register again with every attempt, and its
-- writes cost no WAL.
-- "owner" is the waiting client's owner label, for the operators who ask
-- who waits (Waiters); "shared" marks the wait of a shared lease
-- (CreateAcquireShared), which is listed but never woken or promised a
-- lease by the queue's rules: shared waiters hear the table's channel.
-- "polling" marks the registration of an exclusive wait without a session
-- of its own (it cannot queue: no lock marks it live, no notification
-- reaches it; it polls), which CreateAcquire writes when shared holders
-- refuse it: live while fresh, it keeps new shared leases of the name away
-- (CreateAcquireShared) and is listed (Waiters), but the queue's wake-ups
-- and promises pass it over.
CREATE UNLOGGED TABLE IF NOT EXISTS {{waiters}} (
    "name"       text        NOT NULL,
    "client"     text        NOT NULL,
    "since"       timestamptz NOT NULL,
    "expires_at"  timestamptz NOT NULL,
    "notified_at" timestamptz,
    "owner"       text,
    "shared"      boolean     NOT NULL DEFAULT false,
    "polling"     boolean     NOT NULL DEFAULT false,
    PRIMARY KEY ("name", "client")
)

-- name: CreateIncarnation
-- The server incarnation's id (see {{server}} above): one row, drawn by the
-- first call of CreateIncarnationFunction after the table was created, a
-- crash-recovery cycle or a promotion emptied it. Unlogged, so that these
-- empty it. Only that function (SECURITY DEFINER) reads and writes it: an
-- application role needs no grant.
CREATE UNLOGGED TABLE IF NOT EXISTS {{incarnation}} (
    "one" boolean PRIMARY KEY DEFAULT true CHECK ("one"),
    "id"  text    NOT NULL
)

-- name: UpgradeWaiters
-- Schema version 3 (in its later form): when a release first woke a
-- waiter; version 7: the owner label of a waiting client; version 8:
-- whether it waits for a shared lease; version 9: whether it polls (see
-- CreateWaiters). A registration written by an older version has no owner.
ALTER TABLE {{waiters}} ADD COLUMN IF NOT EXISTS "notified_at" timestamptz,
                        ADD COLUMN IF NOT EXISTS "owner" text,
                        ADD COLUMN IF NOT EXISTS "shared" boolean NOT NULL DEFAULT false,
                        ADD COLUMN IF NOT EXISTS "polling" boolean NOT NULL DEFAULT false

-- name: RefuseNewer
-- The first statement of the exported DDL (Store.DDL; after CreateSchema,
-- which changes nothing of an existing table), which upgrades a
-- table of any earlier schema version: it refuses a table that is not
-- pglease's (its comment names no schema version) or of a newer version,
-- whose functions the DDL would replace with older ones, before anything
-- is changed.
DO $pglease$
DECLARE
    v_comment text := obj_description(to_regclass('{{table}}'), 'pg_class');
BEGIN
    IF to_regclass('{{table}}') IS NULL THEN
        RETURN;
    END IF;
    IF v_comment IS NULL OR v_comment !~ '^pglease lease table, schema version [0-9]+$' THEN
        RAISE EXCEPTION 'pglease: table % exists but is not a pglease lease table (its comment names no schema version); nothing was changed: pick another table, or let pglease migrate (Client.Migrate) check and upgrade it', '{{table}}';
    END IF;
    IF substring(v_comment FROM '([0-9]+)$')::int > {{version}} THEN
        RAISE EXCEPTION 'pglease: table % has schema version %, newer than this DDL (%); nothing was changed: use the DDL of the newer pglease', '{{table}}', substring(v_comment FROM '([0-9]+)$'), {{version}};
    END IF;
END
$pglease$

-- name: CommentTable
COMMENT ON TABLE {{table}} IS 'pglease lease table, schema version {{version}}'

-- name: SchemaLock
-- Serializes the creation and upgrade of the pglease objects of one schema
-- (CREATE SCHEMA, the tables, sequence, index and comment), which would
-- otherwise race on the catalog's unique indexes. pgleasecron takes the same
-- key to create its tables (pgleasecron/queries.sql): the key must not change.
-- The lock is keyed by the schema as the server resolves it, never as the
-- client spells it: $1 is the schema the table names, or '' for an
-- unqualified table, which CREATE TABLE puts in the first existing schema of
-- the search_path, current_schema(). (The key is the one earlier versions
-- took for a schema-qualified table, so that they serialize with this one.)
-- Returns the schema, NULL (and no lock taken) when the search_path names no
-- existing schema, and the search_path.
WITH s AS MATERIALIZED (
    SELECT CASE WHEN $1::text = '' THEN current_schema()::text ELSE $1::text END AS nsp
), l AS MATERIALIZED (
    SELECT s.nsp, pg_advisory_xact_lock({{schema_key('pglease schema "' || replace(s.nsp, '"', '""') || '"')}})
      FROM s
)
SELECT l.nsp, current_setting('search_path') FROM l

-- name: MigrationLockTimeout
-- Run in a migration's transaction just after SchemaLock: every lock the
-- migration waits for from then on (the ACCESS EXCLUSIVE lock of an ALTER
-- TABLE, the SHARE lock of CREATE INDEX, the EXCLUSIVE lock of LockTable)
-- is given up after $1 ms, the caller's own lock_timeout when stricter, so
-- that the statements queued behind the request (renewals, acquisitions,
-- readers) wait no longer than that; the migration is then tried again.
-- The wait for SchemaLock itself, which only other migrations take, is not
-- bounded.
SELECT set_config('lock_timeout',
                  CASE WHEN s.setting::bigint BETWEEN 1 AND $1::bigint THEN s.setting ELSE $1::text END,
                  true)
  FROM pg_settings AS s WHERE s.name = 'lock_timeout'

-- name: MigrationBlockers
-- Who holds locks of the table $1 or of its waiters table $2 (as the client
-- spells them), other than this session: what a migration that could not
-- take its locks waited for. Longest transaction first: pid,
-- application_name, state, how long its transaction has run (ms; -1 when
-- unknown), and the start of its last statement.
SELECT l."pid", coalesce(a."application_name", ''), coalesce(a."state", ''),
       coalesce((extract(epoch FROM now() - a."xact_start") * 1000)::bigint, -1),
       left(regexp_replace(coalesce(a."query", ''), '\s+', ' ', 'g'), 60)
  FROM (SELECT DISTINCT k."pid" FROM pg_locks AS k
         WHERE k."locktype" = 'relation' AND k."granted" AND k."pid" <> pg_backend_pid()
           AND k."database" = (SELECT d."oid" FROM pg_database AS d WHERE d."datname" = current_database())
           AND k."relation" IN (to_regclass($1::text), to_regclass($2::text))) AS l
  LEFT JOIN pg_stat_activity AS a ON a."pid" = l."pid"
 ORDER BY a."xact_start" NULLS LAST, l."pid"
 LIMIT 3

-- name: TableExists
-- $3 the schema ('' for the search_path's first): does it exist already?
-- $4 the waiters table; $5, $6 and $7 the acquisition, release and shared
-- acquisition functions (CreateAcquire, CreateRelease,
-- CreateAcquireShared), with their argument types, as
-- to_regprocedure reads them, $8 the fence's (CreateFence), whose trigger
-- must be on the table and enabled, $9 the incarnation table and $10 its
-- function (CreateIncarnation, CreateIncarnationFunction), $11 and $12 the
-- acquisition functions by the signatures of versions 7 to 9
-- (CreateAcquireCompat, CreateAcquireSharedCompat), $13 the release
-- function by that of versions 6 to 11 (CreateReleaseCompat): the last
-- column names those missing ('' when none). Run just after SchemaLock, in its
-- transaction.
-- Waiting for that lock (an advisory lock) does not make the backend take
-- in the catalog changes other sessions committed meanwhile, and
-- to_regclass reads the backend's catalog caches: they could still say
-- that the table another client has just created is missing, and the
-- client would run the creation again. That is harmless but for its
-- locks, held until the migration commits: CREATE INDEX IF NOT EXISTS
-- takes a SHARE lock on the table even when the index exists, and stalls
-- every acquisition meanwhile (a fast-failover one gives up after its
-- lock timeout and reports the name busy). Reading pg_class (nothing of
-- it) locks it, and the first lock of a relation in a transaction takes
-- those changes in before the statement runs.
SELECT to_regclass($1::text) IS NOT NULL, to_regclass($2::text) IS NOT NULL,
       $3::text = '' OR to_regnamespace($3::text) IS NOT NULL,
       to_regclass($4::text) IS NOT NULL,
       concat_ws(', ', CASE WHEN to_regprocedure($5::text) IS NULL THEN $5::text END,
                       CASE WHEN to_regprocedure($6::text) IS NULL THEN $6::text END,
                       CASE WHEN to_regprocedure($7::text) IS NULL THEN $7::text END,
                       CASE WHEN to_regprocedure($8::text) IS NULL THEN $8::text END,
                       CASE WHEN NOT EXISTS (
                                     SELECT FROM pg_catalog.pg_trigger AS g
                                      WHERE g.tgrelid = to_regclass($1::text) AND g.tgname = 'pglease_fence'
                                        AND g.tgfoid = to_regprocedure($8::text) AND g.tgenabled <> 'D')
                            THEN 'the trigger pglease_fence (enabled)' END,
                       CASE WHEN to_regclass($9::text) IS NULL THEN 'the table ' || $9::text END,
                       CASE WHEN to_regprocedure($10::text) IS NULL THEN $10::text END,
                       CASE WHEN to_regprocedure($11::text) IS NULL THEN $11::text END,
                       CASE WHEN to_regprocedure($12::text) IS NULL THEN $12::text END,
                       CASE WHEN to_regprocedure($13::text) IS NULL THEN $13::text END)
  FROM (SELECT count(*) FROM pg_catalog.pg_class WHERE false) AS catalog

-- name: Columns
-- The columns of the table $1: name, type, NOT NULL, default (NULL when
-- none) and whether the column is part of the primary key.
SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), a.attnotnull,
       pg_get_expr(d.adbin, d.adrelid),
       coalesce(a.attnum = ANY (i.indkey), false)
  FROM pg_attribute AS a
  LEFT JOIN pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  LEFT JOIN pg_index AS i ON i.indrelid = a.attrelid AND i.indisprimary
 WHERE a.attrelid = to_regclass($1::text) AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY a.attnum

-- name: SequenceShape
-- The token sequence $1: its type, increment and whether it cycles (no
-- row when it is not a sequence).
SELECT format_type(s.seqtypid, NULL), s.seqincrement, s.seqcycle
  FROM pg_sequence AS s
 WHERE s.seqrelid = to_regclass($1::text)

-- name: SchemaVersion
SELECT coalesce(substring(obj_description(to_regclass($1::text), 'pg_class')
                          FROM 'schema version ([0-9]+)'), '0')::int

-- name: LockNamespace
-- The table as the server resolves it ($1 as the client spells it).
SELECT n.nspname::text || '.' || c.relname::text || E'\n'
  FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
 WHERE c.oid = to_regclass($1::text)

-- name: UpgradeTable
-- Schema version 1 to 2: the server incarnation of a session-bound lease.
-- (Version 3 added the waiters table, CreateWaiters.) Version 4: the
-- semaphore a slot row belongs to and its slot count, and a step-down
-- request to the holder (CreateSemaphoreIndex follows). Version 5 changes
-- no column: a session-bound row is bound by its session's lock (see
-- Acquire), where earlier versions took a lock per name and would take
-- such a row over from a live session; the version keeps them away (they
-- refuse a newer table). Version 6 changes no column either: it adds the
-- acquisition and release functions (CreateAcquire and CreateRelease
-- follow), which this version calls instead of statements of its own.
-- Version 7 adds the owner of a waiting client to the waiters table
-- (UpgradeWaiters follows). Version 8 adds shared leases: the function
-- that acquires them (CreateAcquireShared), and the kind of a wait to the
-- waiters table. Version 9 adds the fence against acquisitions by earlier
-- releases' statements (CreateFence, CreateFenceTrigger), and the server
-- incarnation's id that a statistics reset leaves alone (CreateIncarnation,
-- CreateIncarnationFunction). Version 10 records each row's kind of lease
-- in "kind" ('plain', 'semaphore', 'shared': see RowPlain and its siblings
-- in acquire.go), which versions 4 to 9 read from "slots" (NULL plain, 0
-- shared, n a semaphore of n slots; it keeps the size), and the units of
-- a kind's capacity a row takes in "weight" (1 for every kind so far).
-- Their constant defaults make adding them a change of the catalog alone,
-- with no rewrite of the table; BackfillKind follows. No CHECK lists the
-- kinds: only the acquisition functions write rows (the fence keeps other
-- writers out), and a kind added later needs no change of the table.
ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS "session_server" text,
                      ADD COLUMN IF NOT EXISTS "semaphore" text,
                      ADD COLUMN IF NOT EXISTS "slots" integer,
                      ADD COLUMN IF NOT EXISTS "stepdown_at" timestamptz,
                      ADD COLUMN IF NOT EXISTS "kind" text NOT NULL DEFAULT 'plain',
                      ADD COLUMN IF NOT EXISTS "weight" integer NOT NULL DEFAULT 1

-- name: BackfillKind
-- Schema version 10: the kind of the rows written before "kind" existed
-- (UpgradeTable gives every row 'plain'), read from "slots" as the earlier
-- versions did. Idempotent: this version never writes a 'plain' row with
-- a semaphore. Run after the functions are replaced, so that it also
-- mends the rows the earlier functions wrote meanwhile when the exported
-- DDL runs outside one transaction. Through the semaphore index: it reads
-- the rows of semaphores and shared leases alone.
UPDATE {{table}} AS l SET "kind" = CASE WHEN l."slots" = 0 THEN 'shared' ELSE 'semaphore' END
 WHERE l."semaphore" IS NOT NULL AND l."kind" = 'plain'

-- name: TokenState
-- The largest token in the table and the sequence's last value (0 when the
-- sequence was never used): a sequence behind the table (a table-only
-- restore, a logical-replication cutover) would hand out old tokens.
SELECT coalesce((SELECT max("token") FROM {{table}}), 0),
       coalesce(pg_sequence_last_value('{{seq}}'::regclass), 0)

-- name: LockTable
-- Held while the sequence is repaired: no acquisition draws a token meanwhile.
LOCK TABLE {{table}} IN EXCLUSIVE MODE

-- name: RepairSequence
-- Moves the sequence past the largest token in the table; never backwards.
SELECT setval('{{seq}}', m) FROM (SELECT max("token") AS m FROM {{table}}) AS t
 WHERE m > coalesce(pg_sequence_last_value('{{seq}}'::regclass), 0)

-- name: Acquire
-- One acquisition attempt: a call of the table's acquisition function (see
-- CreateAcquire in functions.sql for the parameters, the rules and the
-- result), one statement in a transaction of its own or in a batch's. The
-- calls of the functions are in named notation, their arguments listed
-- once, in params.go ({{acquire_call}}: p_name => $1::text, …).
SELECT * FROM {{acquire_fn}}({{acquire_call}})

-- name: AcquireShared
-- One attempt at a shared lease: a call of the table's shared acquisition
-- function (CreateAcquireShared in functions.sql).
SELECT * FROM {{acquire_shared_fn}}({{acquire_shared_call}})

-- name: Renew
-- $1 a JSON object {name: token, …}, $2 the client's random id. Renews every
-- lease of the batch still held with that token by this client and not yet
-- expired (a late renewal never revives a row; a row kept for a minimum hold
-- after its release has no client id and is never extended); a
-- session-bound lease only from its own session, which then also stamps the
-- server incarnation it is on (the same one that granted its lock: a new
-- incarnation would have broken the session). A row locked by a guarded
-- transaction is skipped, not waited for, so that one guard does not stall
-- the client's other leases. Returns the names renewed (true) and those
-- still held but skipped (false); a missing name was lost. The third column
-- says whether a step-down was requested of a renewed lease (the fallback
-- of the notification RequestStepDown sends).
-- Rows are found through the primary key (= ANY of the batch's names), so
-- the cost grows with the batch, not the table, whatever the estimates.
WITH held AS (
    SELECT l."name" FROM {{table}} AS l
     WHERE l."name" = ANY (ARRAY(SELECT jsonb_object_keys($1::jsonb)))
       AND l."token" = ($1::jsonb ->> l."name")::bigint
       AND l."expires_at" > now() AND l."metadata" ->> 'client' = $2::text
       AND (l."session_pid" IS NULL OR l."session_pid" = pg_backend_pid())
), mine AS (
    -- held's test again: a row that changed since the statement's snapshot
    -- is locked in its newest version, and only this WHERE is evaluated
    -- again on that version (READ COMMITTED); a row another client took
    -- over meanwhile must not be renewed.
    SELECT l."name" FROM {{table}} AS l
     WHERE l."name" = ANY (ARRAY(SELECT "name" FROM held))
       AND l."token" = ($1::jsonb ->> l."name")::bigint
       AND l."expires_at" > now() AND l."metadata" ->> 'client' = $2::text
       AND (l."session_pid" IS NULL OR l."session_pid" = pg_backend_pid())
       FOR NO KEY UPDATE OF l SKIP LOCKED
), upd AS (
    UPDATE {{table}} AS l
       SET "renewed_at" = now(), "expires_at" = now() + l."ttl",
           "session_server" = CASE WHEN l."session_pid" IS NULL THEN NULL ELSE {{server}} END
     WHERE l."name" = ANY (ARRAY(SELECT "name" FROM mine))
       AND l."token" = ($1::jsonb ->> l."name")::bigint
       AND l."expires_at" > now() AND l."metadata" ->> 'client' = $2::text
    RETURNING l."name", l."stepdown_at" IS NOT NULL AS "stepdown"
), durable AS (
    SELECT {{durable}} AS ok FROM upd LIMIT 1
)
SELECT "name", true, "stepdown" FROM upd LEFT JOIN durable ON true
UNION ALL
SELECT "name", false, false FROM (SELECT "name" FROM held EXCEPT SELECT "name" FROM upd) AS busy
 WHERE (SELECT count(*) FROM upd) < (SELECT count(*) FROM held)

-- name: Release
-- A call of the table's release
-- function (CreateRelease in functions.sql), which deletes the row held
-- with the token (or keeps it until its minimum hold) and wakes waiters.
SELECT * FROM {{release_fn}}({{release_call}})

-- name: Guard
-- Inside the caller's transaction: succeeds only while the lease is held
-- with this token, and locks the row so that no takeover, release or
-- cleanup can commit before the caller's transaction ends.
-- $3 ms until the lease row could expire: for the rest of the transaction
-- the server ends the session if the transaction sits idle that long (the
-- caller's own idle_in_transaction_session_timeout is kept when stricter).
-- Otherwise a client partitioned mid-transaction would hold the row lock,
-- and block every takeover, until the server noticed the dead connection.
-- $4 is false when the client already knows the lease ended.
-- When the lease is not held with this token the statement fails, and so
-- does the caller's transaction: a caller that ignores Guard's error still
-- cannot commit a stale write. The failure is the server refusing the
-- message below as a value of the setting (invalid_parameter_value,
-- 22023, which the client recognises: $3 is always within the setting's
-- range, so nothing else here raises it); the message is what the
-- server's log shows. It is raised by set_config, a volatile function,
-- so the planner never evaluates it ahead of time.
SELECT set_config('idle_in_transaction_session_timeout',
                  CASE WHEN g."token" IS NULL
                       THEN 'pglease: lease is no longer held with this token'
                       ELSE (SELECT CASE WHEN s.setting::bigint BETWEEN 1 AND $3::bigint THEN s.setting
                                         ELSE $3::bigint::text END
                               FROM pg_settings AS s WHERE s.name = 'idle_in_transaction_session_timeout')
                  END,
                  true)
  FROM (SELECT) AS one
  LEFT JOIN (SELECT l."token"
               FROM {{table}} AS l
              WHERE $4::boolean AND l."name" = $1::text AND l."token" = $2::bigint
                AND l."expires_at" > clock_timestamp()
                FOR SHARE OF l) AS g ON true

-- name: Head
-- Not a statement: the first live waiter of an exclusive lease queued for
-- the name {{.name}} (shared waiters hear the table's channel instead) (its
-- client, when its turn began if it was woken before, and when it queued),
-- once the row was deleted (del), spliced in for {{head(name)}}; lockns
-- holds the advisory-lock namespace.
SELECT w."client", w."notified_at", w."since"
  FROM {{waiters}} AS w
 WHERE EXISTS (SELECT 1 FROM del) AND w."name" = {{.name}} AND NOT w."shared"
   AND CASE WHEN w."expires_at" > now()
            THEN NOT {{client_gone((SELECT v FROM lockns), w."client")}}
            ELSE false END
 ORDER BY w."since", w."client"
 LIMIT 1

-- name: First
-- Not a statement: the first live waiter of another client queued for an
-- exclusive lease of
-- n."name" before the wait q (queued since q."since" by client
-- q."client"; q."ns" the advisory-lock namespace), whether the lease is
-- promised to it, and how many live waiters are queued before q. Spliced
-- in for {{first}} as a LATERAL subquery. The lease is promised to the
-- first waiter once its turn began q."fair" ago: when it was first woken
-- (Release records the start of its turn then), or, never woken, when it
-- queued. Only the first waiter counts: the others' turns begin after it.
SELECT w."client",
       coalesce(w."notified_at", w."since") <= now() - q."fair" AS "due",
       count(*) OVER () AS "n"
  FROM {{waiters}} AS w
 WHERE w."name" = n."name" AND w."client" <> q."client" AND NOT w."shared"
   AND CASE WHEN w."expires_at" > now() AND (w."since", w."client") < (q."since", q."client")
            THEN NOT {{client_gone(q."ns", w."client")}}
            ELSE false END
 ORDER BY w."since", w."client"
 LIMIT 1

-- name: Durable
-- Not a statement: an expression that makes the commit of its transaction
-- wait for the WAL flush (and for synchronous standbys, as configured)
-- even where a role, a database or the connection turned
-- synchronous_commit off or to local, spliced in for {{durable}}. An
-- acquisition, a renewal or a claimed tick lost in a crash or a failover
-- could hand a token out again, or let two holders overlap; so the
-- statements that write them raise the setting for their own transaction
-- (stronger settings, remote_write and remote_apply, are kept). It must be
-- evaluated: a CTE that uses it is referenced by the statement's result.
set_config('synchronous_commit',
           CASE WHEN current_setting('synchronous_commit') IN ('off', 'local') THEN 'on'
                ELSE current_setting('synchronous_commit') END,
           true)

-- name: RowKind
-- Not a statement: the kind of the lease row {{.row}} as the row records
-- it, spliced in for {{rowkind(row)}}: its "kind" (any word: a kind added
-- later is read as it is), or, in a table of a version before that column
-- (10), the kind its "slots" said (NULL plain, 0 shared, n a semaphore;
-- before the "slots" column, 4, plain). Read from the row as a document,
-- so that it reads a table of any version.
coalesce(to_jsonb({{.row}}) ->> 'kind',
         CASE WHEN to_jsonb({{.row}}) ->> 'slots' IS NULL THEN 'plain'
              WHEN to_jsonb({{.row}}) ->> 'slots' = '0' THEN 'shared'
              ELSE 'semaphore' END)

-- name: NewPlainRow
-- Not a statement: the first path of CreateAcquire (functions.sql),
-- spliced in for {{new_plain_row}}: the INSERT of a plain lease's new row
-- for the function's parameters, whose SELECT its two forms (unqueued,
-- queued) complete with their own FROM and WHERE.
INSERT INTO {{table}} AS l
    ("name", "owner", "token", "acquired_at", "renewed_at", "expires_at",
     "hold_until", "ttl", "session_pid", "session_server", "metadata")
SELECT p_name, p_owner, nextval('{{seq}}'), now(), now(),
       now() + p_ttl_ms * interval '1 millisecond',
       now() + p_hold_ms * interval '1 millisecond',
       p_ttl_ms * interval '1 millisecond',
       CASE WHEN p_session THEN pg_backend_pid() END,
       CASE WHEN p_session THEN {{server}} END,
       p_metadata || jsonb_build_object('client', p_client)

-- name: Record
-- Not a statement: the select list of a lease row as Get, List and
-- ForceRelease return it (scanRecord reads it), spliced in for {{record}}.
-- Durations are whole milliseconds, computed with the server's clock. The
-- last four columns are the row's kind (RowKind: any word, so that a kind
-- added later is read as it is), the name it belongs to ("semaphore": a
-- slot's semaphore, the name a shared row shares; '' for a plain lease),
-- its kind's size ("slots": a semaphore's slot count; 0 for a kind without
-- one, shared included) and the units of that size the row takes
-- ("weight"). They are read from the row as a document, so that a table of
-- a version before the "kind" and "weight" columns (10) or before the
-- "semaphore" and "slots" columns (4) is still readable. The row is named
-- r.
SELECT "name", "owner", "token", "acquired_at", "renewed_at", "expires_at",
       (extract(epoch FROM "ttl") * 1000)::bigint,
       (extract(epoch FROM "expires_at" - now()) * 1000)::bigint,
       (extract(epoch FROM now() - "renewed_at") * 1000)::bigint,
       (extract(epoch FROM now() - "acquired_at") * 1000)::bigint,
       "session_pid" IS NOT NULL, "metadata"::text,
       {{rowkind(r)}},
       coalesce(to_jsonb(r) ->> 'semaphore', ''),
       coalesce((to_jsonb(r) ->> 'slots')::integer, 0),
       coalesce((to_jsonb(r) ->> 'weight')::integer, 1)

-- name: Get
{{record}}
  FROM {{table}} AS r
 WHERE "name" = $1::text

-- name: List
{{record}}
  FROM {{table}} AS r
 ORDER BY "name"

-- name: ForceRelease
-- $1 name, $2 notification channel, $3 advisory-lock namespace. Wakes the
-- first live waiter, as Release does (for a shared lease of a name, the
-- first exclusive waiter of the name).
WITH del AS (
    DELETE FROM {{table}} WHERE "name" = $1::text
    RETURNING "name", "owner", "token", "acquired_at", "renewed_at", "expires_at", "ttl",
              "session_pid", "metadata", "semaphore", "slots", "kind", "weight"
), lockns AS (
    SELECT $3::text AS v
), head AS MATERIALIZED (
    {{head($1::text)}}
), reader AS MATERIALIZED (
    -- The name of a shared lease (see CreateRelease).
    SELECT d."semaphore" AS "name" FROM del AS d WHERE d."kind" = 'shared'
), note AS (
    SELECT pg_notify($2::text, "name") FROM del
    UNION ALL
    SELECT pg_notify('pglease_' || head."client", del."name") FROM del, head
    UNION ALL
    SELECT pg_notify('pglease_' || w."client", r."name")
      FROM reader AS r
      CROSS JOIN LATERAL (SELECT w."client" FROM {{waiters}} AS w
                           WHERE w."name" = r."name" AND NOT w."shared"
                             AND CASE WHEN w."expires_at" > now()
                                      THEN NOT {{client_gone($3::text, w."client")}}
                                      ELSE false END
                           ORDER BY w."since", w."client"
                           LIMIT 1) AS w
)
{{record}}
  FROM del AS r, (SELECT count(*) FROM note) AS n

-- name: RequestStepDown
-- $1 name. Asks the live holder of the name to let go: stamps the row (a
-- new acquisition clears the stamp, and every renewal reports it, so a lost
-- notification delays the request by one renewal interval at most) and
-- notifies the holder's client on its step-down channel with the token and
-- the name. A row kept for a minimum hold after its release has no client
-- and is not notified. Returns a row when a live holder was asked, none
-- when nothing live holds the name.
WITH req AS (
    UPDATE {{table}} AS l SET "stepdown_at" = coalesce(l."stepdown_at", now())
     WHERE l."name" = $1::text AND l."expires_at" > now()
    RETURNING l."token", l."metadata" ->> 'client' AS "client"
), note AS (
    SELECT pg_notify('pglease_' || req."client" || '_stepdown', req."token"::text || ' ' || $1::text)
      FROM req WHERE req."client" IS NOT NULL
)
SELECT (SELECT count(*) FROM note) FROM req

-- name: StepDownsRequested
-- $1 a JSON object {name: token, …}: the leases of the batch, still held
-- with that token, of which a step-down was requested (for a client that
-- was not listening when the request was made).
SELECT l."name" FROM {{table}} AS l
 WHERE l."name" = ANY (ARRAY(SELECT jsonb_object_keys($1::jsonb)))
   AND l."token" = ($1::jsonb ->> l."name")::bigint
   AND l."stepdown_at" IS NOT NULL

-- name: Orphans
-- The live rows of client $1 named in $2, and its shared leases' rows
-- ("name#i", see CreateAcquireShared) of the names in $3 (JSON arrays):
-- the rows acquisitions whose reply was lost may have been granted. The
-- client releases each by token, except those its leases hold (a row
-- kept for a minimum hold has no client id).
SELECT l."name", l."token" FROM {{table}} AS l
 WHERE (l."name" IN (SELECT jsonb_array_elements_text($2::jsonb))
        OR (l."kind" = 'shared' AND l."semaphore" IN (SELECT jsonb_array_elements_text($3::jsonb))))
   AND l."metadata" ->> 'client' = $1::text AND l."expires_at" > now()

-- name: Cleanup
-- Expired rows, and the waiters' registrations that went stale.
WITH del AS (
    DELETE FROM {{table}} WHERE "expires_at" <= now() RETURNING 1
), stale AS (
    DELETE FROM {{waiters}} WHERE "expires_at" <= now()
)
SELECT count(*) FROM del

-- name: Waiters
-- Who waits: the live registrations of the queue (see CreateWaiters), for
-- the names of $1, a JSON array (every name when it is empty), in queue
-- order per name. $2 is the table as the client spells it: the
-- advisory-lock namespace is read from the catalog, as LockNamespace
-- does, so that a reader that never checked the table's shape can ask. A
-- registration is live while it is fresh and its client's dedicated
-- session holds the client's lock (a polling one: while it is fresh), as
-- the acquisition functions tell;
-- trying that lock shared takes nothing that outlives the statement's
-- transaction, and writes nothing. Returns the name, the owner ('' for a
-- registration of an older version), when it queued, how long ago that
-- was, in milliseconds, and the kind of lease it waits for: 'plain' for an
-- exclusive wait; for a wait of the holders who share a name ("shared"),
-- the kind of the live rows that share the name (a row of the name's
-- that is not a semaphore's slot, through the semaphore index: RowKind,
-- so that a kind added later is named as its rows name it), or 'shared'
-- when none is live.
WITH ns AS MATERIALIZED (
    SELECT n.nspname::text || '.' || c.relname::text || E'\n' AS v
      FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
     WHERE c.oid = to_regclass($2::text)
)
SELECT w."name", coalesce(w."owner", ''), w."since",
       (extract(epoch FROM now() - w."since") * 1000)::bigint,
       CASE WHEN NOT w."shared" THEN 'plain'
            ELSE coalesce((SELECT {{rowkind(l)}} FROM {{table}} AS l
                            WHERE l."semaphore" = w."name" AND l."expires_at" > now()
                              AND {{rowkind(l)}} <> 'semaphore'
                            ORDER BY l."name"
                            LIMIT 1), 'shared') END
  FROM {{waiters}} AS w, ns
 WHERE (jsonb_array_length($1::jsonb) = 0
        OR w."name" IN (SELECT jsonb_array_elements_text($1::jsonb)))
   AND CASE WHEN w."expires_at" > now()
            THEN w."polling" OR NOT {{client_gone(ns.v, w."client")}}
            ELSE false END
 ORDER BY w."name", w."since", w."client"

-- name: Unqueue
-- A wait that ends without the lease leaves the queue.
DELETE FROM {{waiters}} WHERE "client" = $1::text AND "name" = $2::text

-- name: Ahead
-- The waiter directly ahead of client $1's registration for an exclusive
-- lease of the name $2: the live waiter of another client queued last
-- before it, by the order First counts (its client), or no row when it is
-- first or not registered. $3 is the advisory-lock namespace. A wait
-- behind others watches that client's doorbell (see refusedOne), which
-- rings as its wait gives up and is freed as its session ends; its taking
-- the name rings nothing, and needs not: it is then the holder the wait
-- would watch.
SELECT w."client"
  FROM {{waiters}} AS q
  JOIN {{waiters}} AS w ON w."name" = q."name"
 WHERE q."name" = $2::text AND q."client" = $1::text
   AND w."client" <> q."client" AND NOT w."shared"
   AND CASE WHEN w."expires_at" > now() AND (w."since", w."client") < (q."since", q."client")
            THEN NOT {{client_gone($3::text, w."client")}}
            ELSE false END
 ORDER BY w."since" DESC, w."client" DESC
 LIMIT 1

-- name: AcquireAllLocks
-- The first statement of AcquireAll's transaction. $1 the names (a JSON
-- array, sorted and without duplicates), $2 advisory-lock namespace.
-- Takes each name's transaction-scoped advisory lock, the very lock Acquire
-- takes first (the two-int4 key space), so that single and all-or-nothing
-- acquisitions of one name serialize; one name after the other, in the
-- array's order (the caller's canonical, sorted order), so that two
-- transactions asking for overlapping sets in any order never wait for
-- each other in a cycle. The locks are held until the transaction ends.
-- It also marks the transaction as this version's writer (see CreateFence).
SELECT pg_advisory_xact_lock({{name_key($2::text, u.n)}}),
       set_config('pglease.writer', '{{version}}', true)
  FROM jsonb_array_elements_text($1::jsonb) WITH ORDINALITY AS u(n, i)
 ORDER BY u.i

-- name: AcquireAll
-- The second statement of AcquireAll's transaction, run with every name's
-- lock held (AcquireAllLocks), so its snapshot sees every acquisition of
-- these names that committed before. $1 the names (JSON array, as above),
-- $2 owner, $3 ttl ms, $4 min-hold ms, $5 metadata json, $6 advisory-lock
-- namespace, $7 the client's random id (recorded in the metadata, as
-- Acquire does), $8 how long a waiter may be overtaken (ms).
--
-- All or nothing: every name must be free (no row, an expired row, a
-- session-bound row whose session ended, as CreateAcquire takes over, or a
-- row of this client's own whose acquisition reply was lost: the caller
-- holds every name's local slot, so no lease of the client holds it), and
-- no name may be promised to a waiter of another client (the queue, see
-- CreateAcquire: a live waiter queued for at least $8 ms); only then is every
-- row written, each with its own token drawn from the sequence after the
-- locks were taken. Otherwise nothing is written, the promised waiters of
-- free names are woken (as CreateAcquire's nudge), and the commit does not wait
-- for its WAL flush. A set never registers in the queue itself.
--
-- A row can still change under this statement without the advisory lock
-- (a renewal that began before the row expired): the ON CONFLICT clause
-- then skips it, and the caller, seeing fewer rows written than names,
-- rolls the transaction back. Returns one row per name, in $1's order:
-- whether it was written, its token, and the holder as seen (remaining -1
-- when no row was seen), whether the name was free, the number of
-- promised waiters of other clients, the kind and size of a live lease of
-- another kind on the name ('' and 0 when none: see CreateAcquire's
-- clash), and, as
-- CreateAcquire returns them, whether the holder is session-bound, whether
-- its session can be watched, and its session's pid.
WITH names AS MATERIALIZED (
    SELECT u.n AS "name", u.i AS i
      FROM jsonb_array_elements_text($1::jsonb) WITH ORDINALITY AS u(n, i)
), srv AS MATERIALIZED (
    SELECT {{server}} AS id
), seen AS MATERIALIZED (
    -- The name's row; but a live shared holder of the name (see
    -- CreateAcquire's readers: a set's leases are exclusive) is reported
    -- when that row is not live, with no client, as CreateAcquire does.
    SELECT n."name", k."kind" AS "clash_kind", k."size" AS "clash_size",
           CASE WHEN r."rd" THEN r."owner" ELSE l."owner" END AS "owner",
           CASE WHEN r."rd" THEN r."token" ELSE l."token" END AS "token",
           CASE WHEN r."rd" THEN r."expires_at" ELSE l."expires_at" END AS "expires_at",
           CASE WHEN r."rd" THEN r."renewed_at" ELSE l."renewed_at" END AS "renewed_at",
           CASE WHEN r."rd" THEN '{}'::jsonb ELSE l."metadata" END AS "metadata",
           l."name" IS NOT NULL OR coalesce(r."rd", false) AS "row",
           CASE WHEN r."rd" THEN r."session_bound"
                ELSE l."session_pid" IS NOT NULL AND l."session_server" = (SELECT id FROM srv) END AS "session_bound",
           CASE WHEN r."rd" THEN r."pid" ELSE l."session_pid" END AS "pid",
           coalesce(r."rd", false) AS "reading"
      FROM names AS n LEFT JOIN {{table}} AS l ON l."name" = n."name"
      -- A name is one kind of lease: a live slot of a semaphore of the
      -- name refuses the set (as CreateAcquire's clash).
      LEFT JOIN LATERAL (SELECT s."kind", coalesce(s."slots", 0) AS "size" FROM {{table}} AS s
                          WHERE s."semaphore" = n."name" AND s."kind" <> 'shared' AND s."expires_at" > now()
                          LIMIT 1) AS k ON true
      LEFT JOIN LATERAL (SELECT s."owner", s."token", s."expires_at", s."renewed_at", s."session_pid" AS "pid",
                                s."session_pid" IS NOT NULL AND s."session_server" = (SELECT id FROM srv) AS "session_bound",
                                NOT coalesce(l."expires_at" > now(), false) AS "rd"
                           FROM {{table}} AS s
                          WHERE s."semaphore" = n."name" AND s."kind" = 'shared' AND s."expires_at" > now()
                            AND NOT {{session_ended($6::text, s."session_pid", s."session_server" = (SELECT id FROM srv))}}
                          ORDER BY s."session_pid" IS NOT NULL DESC, s."expires_at" DESC
                          LIMIT 1) AS r ON true
), old AS MATERIALIZED (
    -- free as the header says; "alive" (NULL unless the holder is a live
    -- session-bound row of another session): whether that session still
    -- holds its session lock (SessionLock), so that it can be watched, or
    -- ended, so that the row is taken over.
    SELECT a.*, (NOT a."row" OR a."expires_at" <= now() OR a."alive" IS FALSE
                 OR a."client" = $7::text) AND a."clash_kind" = '' AND NOT a."reading" AS "free"
      FROM (SELECT s."name", s."owner", s."token", s."row", s."expires_at", s."session_bound", s."pid", s."reading",
                   (extract(epoch FROM s."expires_at" - now()) * 1000)::bigint AS "remaining_ms",
                   (extract(epoch FROM now() - s."renewed_at") * 1000)::bigint AS "heartbeat_ms",
                   coalesce(s."metadata" ->> 'client', '') AS "client",
                   coalesce(s."clash_kind", '') AS "clash_kind", coalesce(s."clash_size", 0) AS "clash_size",
                   CASE WHEN s."session_bound" AND s."expires_at" > now() AND s."pid" <> pg_backend_pid()
                        THEN NOT {{session_gone($6::text, s."pid")}}
                   END AS "alive"
              FROM seen AS s) AS a
), ahead AS MATERIALIZED (
    -- As CreateAcquire's (a set is never queued itself).
    SELECT n."name", CASE WHEN f.due THEN f.n ELSE 0 END AS n, CASE WHEN f.due THEN f."client" END AS first
      FROM names AS n
     CROSS JOIN (SELECT $7::text AS "client", $6::text AS "ns", 'infinity'::timestamptz AS "since",
                        $8::bigint * interval '1 millisecond' AS "fair") AS q
      LEFT JOIN LATERAL ({{first}}) AS f ON true
), ok AS MATERIALIZED (
    SELECT coalesce(bool_and(o."free" AND a.n = 0), false) AS "all"
      FROM old AS o JOIN ahead AS a USING ("name")
), ins AS (
    INSERT INTO {{table}} AS l
        ("name", "owner", "token", "acquired_at", "renewed_at", "expires_at",
         "hold_until", "ttl", "metadata")
    SELECT n."name", $2::text, nextval('{{seq}}'), now(), now(),
           now() + $3::bigint * interval '1 millisecond',
           now() + $4::bigint * interval '1 millisecond',
           $3::bigint * interval '1 millisecond',
           $5::jsonb || jsonb_build_object('client', $7::text)
      FROM names AS n, ok
     WHERE ok."all"
     ORDER BY n.i
    ON CONFLICT ("name") DO UPDATE
       SET "owner" = excluded."owner", "token" = excluded."token",
           "acquired_at" = excluded."acquired_at", "renewed_at" = excluded."renewed_at",
           "expires_at" = excluded."expires_at", "hold_until" = excluded."hold_until",
           "ttl" = excluded."ttl", "session_pid" = NULL, "session_server" = NULL,
           "metadata" = excluded."metadata", "semaphore" = NULL, "slots" = NULL,
           "kind" = 'plain', "weight" = 1, "stepdown_at" = NULL
     WHERE l."expires_at" <= now() OR l."metadata" ->> 'client' = $7::text
        -- A session-bound row whose session ended (see old): the row as it
        -- is now, not as of the statement's snapshot.
        OR {{session_ended($6::text, l."session_pid", l."session_server" = (SELECT id FROM srv))}}
    RETURNING l."name", l."token"
), purged AS (
    -- Shared leases of the names that ended: their rows go (see
    -- CreateAcquire's purged).
    DELETE FROM {{table}} AS l
     USING ok
     WHERE ok."all" AND l."kind" = 'shared' AND l."semaphore" IN (SELECT "name" FROM names)
       AND (l."expires_at" <= now()
            OR {{session_ended($6::text, l."session_pid", l."session_server" = (SELECT id FROM srv))}})
    RETURNING 1
), nudge AS (
    SELECT pg_notify('pglease_' || a.first, a."name") AS ok
      FROM ahead AS a JOIN old AS o USING ("name")
     WHERE a.n > 0 AND o."free"
), nowait AS (
    SELECT set_config('synchronous_commit', 'off', true) AS ok
      FROM ok WHERE NOT ok."all"
), durable AS (
    SELECT {{durable}} AS ok FROM ok WHERE ok."all"
)
SELECT n."name", i."token" IS NOT NULL, coalesce(i."token", 0),
       coalesce(o."owner", ''), coalesce(o."token", 0), coalesce(o."remaining_ms", -1),
       coalesce(o."heartbeat_ms", 0), o."client", o."free", a.n, o."clash_kind", o."clash_size",
       coalesce(o."session_bound", false), coalesce(o."alive", false), coalesce(o."pid", 0)
  FROM names AS n
  JOIN old AS o USING ("name")
  JOIN ahead AS a USING ("name")
  LEFT JOIN ins AS i USING ("name")
 CROSS JOIN (SELECT count(*) FROM nudge) AS nn
 CROSS JOIN (SELECT count(*) FROM nowait) AS nw
 CROSS JOIN (SELECT count(*) FROM durable) AS dw
 ORDER BY n.i

