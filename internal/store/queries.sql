-- The SQL of pglease, in one place.
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

-- name: CreateSchema
CREATE SCHEMA IF NOT EXISTS {{schema}}

-- name: CreateSequence
CREATE SEQUENCE IF NOT EXISTS {{seq}} AS bigint MINVALUE 1 NO CYCLE

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
    PRIMARY KEY ("name"),
    CHECK (octet_length("name") BETWEEN 1 AND 255),
    CHECK ("token" > 0)
)

-- name: CommentTable
COMMENT ON TABLE {{table}} IS 'pglease lease table, schema version 1'

-- name: SchemaLock
SELECT pg_advisory_xact_lock(hashtextextended($1::text, 0))

-- name: TableExists
-- $3 the schema ('' for the search_path's first): does it exist already?
SELECT to_regclass($1::text) IS NOT NULL, to_regclass($2::text) IS NOT NULL,
       $3::text = '' OR to_regnamespace($3::text) IS NOT NULL

-- name: Columns
SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), a.attnotnull
FROM pg_attribute AS a
WHERE a.attrelid = to_regclass($1::text) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum

-- name: SchemaVersion
SELECT coalesce(substring(obj_description(to_regclass($1::text), 'pg_class')
                          FROM 'schema version ([0-9]+)'), '0')::int

-- name: Acquire
-- $1 name, $2 owner, $3 ttl ms, $4 min-hold ms, $5 session-bound?,
-- $6 metadata json, $7 advisory-lock namespace (schema.table), $8 the
-- client's random id, recorded in the metadata so that the client can
-- recognise a row of its own whose reply it never got.
-- A session-bound acquire first takes a session advisory lock keyed by the
-- name; holding it proves that no other live session holds a session-bound
-- lease on the name, so a session-bound row may be taken over at once.
--
-- Tokens: acquisitions of one name first serialize on a transaction-scoped
-- advisory lock (the two-int4 key space, which never meets the bigint keys
-- of session locks), and only then draw from the sequence. Drawn earlier,
-- a slow contender could be granted a token older than one granted
-- meanwhile to a faster contender that has since released.
WITH xl AS MATERIALIZED (
    SELECT pg_advisory_xact_lock(hashtext($7::text || $1::text), hashtext($1::text || $7::text))
), lk AS MATERIALIZED (
    SELECT CASE WHEN $5::bool
                THEN pg_try_advisory_lock(hashtextextended($7::text || $1::text, 0))
                ELSE false END AS got
      FROM xl
), old AS (
    SELECT l."owner", l."token", l."session_pid" IS NOT NULL AS "session_bound",
           (extract(epoch FROM l."expires_at" - now()) * 1000)::bigint AS "remaining_ms",
           (extract(epoch FROM now() - l."renewed_at") * 1000)::bigint AS "heartbeat_ms",
           l."metadata" ->> 'client' AS "client"
      FROM {{table}} AS l WHERE l."name" = $1::text
), ins AS (
    INSERT INTO {{table}} AS l
        ("name", "owner", "token", "acquired_at", "renewed_at", "expires_at",
         "hold_until", "ttl", "session_pid", "metadata")
    SELECT $1::text, $2::text, nextval('{{seq}}'), now(), now(),
           now() + $3::bigint * interval '1 millisecond',
           now() + $4::bigint * interval '1 millisecond',
           $3::bigint * interval '1 millisecond',
           CASE WHEN lk.got THEN pg_backend_pid() END,
           $6::jsonb || jsonb_build_object('client', $8::text)
    FROM lk
    ON CONFLICT ("name") DO UPDATE
       SET "owner" = excluded."owner", "token" = excluded."token",
           "acquired_at" = excluded."acquired_at", "renewed_at" = excluded."renewed_at",
           "expires_at" = excluded."expires_at", "hold_until" = excluded."hold_until",
           "ttl" = excluded."ttl", "session_pid" = excluded."session_pid",
           "metadata" = excluded."metadata"
     WHERE l."expires_at" <= now()
        OR (l."session_pid" IS NOT NULL AND (SELECT got FROM lk))
    RETURNING l."token", l."session_pid" IS NOT NULL AS "session_bound"
), unlocked AS (
    -- Not acquired: give the session lock back within this statement, so
    -- that the next contender (queued on the transaction lock) can take it.
    SELECT pg_advisory_unlock(hashtextextended($7::text || $1::text, 0)) AS ok
      FROM lk WHERE lk.got AND NOT EXISTS (SELECT 1 FROM ins)
)
-- Acquired: the new token, and the row taken over if any (as it was before).
-- Not acquired: the holder as this statement saw it; remaining -1 when the
-- row appeared concurrently and could not be seen.
SELECT true, ins."token", ins."session_bound", (SELECT got FROM lk),
       coalesce(old."owner", ''), coalesce(old."token", 0), 0::bigint, 0::bigint, ''
  FROM ins LEFT JOIN old ON true
UNION ALL
SELECT false, 0::bigint, coalesce(old."session_bound", false),
       (SELECT got FROM lk) AND NOT EXISTS (SELECT 1 FROM unlocked),
       coalesce(old."owner", ''), coalesce(old."token", 0), coalesce(old."remaining_ms", -1),
       coalesce(old."heartbeat_ms", 0), coalesce(old."client", '')
  FROM (SELECT 1) AS one LEFT JOIN old ON true
 WHERE NOT EXISTS (SELECT 1 FROM ins)

-- name: Bind
-- Binds a lease acquired without its session lock (another session held the
-- lock for an instant) to this session once the lock is free.
WITH lk AS MATERIALIZED (
    SELECT pg_try_advisory_lock(hashtextextended($3::text || $1::text, 0)) AS got
), upd AS (
    UPDATE {{table}} SET "session_pid" = pg_backend_pid()
     WHERE "name" = $1::text AND "token" = $2::bigint AND (SELECT got FROM lk)
    RETURNING 1
)
SELECT (SELECT got FROM lk), EXISTS (SELECT 1 FROM upd)

-- name: Unlock
SELECT pg_advisory_unlock(hashtextextended($2::text || $1::text, 0))

-- name: Renew
-- $1 a JSON array of {"name":…, "token":…}. Renews every lease of the batch
-- still held with that token; a session-bound lease only from its own
-- session. Returns the names renewed; a missing name was lost.
UPDATE {{table}} AS l
   SET "renewed_at" = now(), "expires_at" = now() + l."ttl"
  FROM jsonb_to_recordset($1::jsonb) AS r("name" text, "token" bigint)
 WHERE l."name" = r."name" AND l."token" = r."token"
   AND (l."session_pid" IS NULL OR l."session_pid" = pg_backend_pid())
RETURNING l."name"

-- name: Release
-- $1 name, $2 token, $3 notification channel, $4 unlock session lock?,
-- $5 advisory-lock namespace. Before the minimum hold time the row is kept
-- (and stays held) until then; afterwards it is deleted and waiters are
-- notified.
WITH keep AS (
    -- The kept row no longer belongs to a client's live lease: drop the
    -- client id so that the client does not take it for a lost reply's row.
    UPDATE {{table}} SET "expires_at" = "hold_until", "session_pid" = NULL,
                         "metadata" = "metadata" - 'client'
     WHERE "name" = $1::text AND "token" = $2::bigint AND "hold_until" > now()
    RETURNING "name"
), del AS (
    DELETE FROM {{table}}
     WHERE "name" = $1::text AND "token" = $2::bigint AND "hold_until" <= now()
    RETURNING "name"
), note AS (
    SELECT pg_notify($3::text, "name") FROM del
), unlock AS (
    SELECT pg_advisory_unlock(hashtextextended($5::text || $1::text, 0)) AS ok WHERE $4::bool
), nowait AS (
    -- A release need not wait for its WAL flush: lost in a crash, it only
    -- delays the next holder until the row expires. (Acquire and renew do
    -- wait: losing them could let two holders overlap.)
    SELECT set_config('synchronous_commit', 'off', true)
)
SELECT (SELECT count(*) FROM keep) + (SELECT count(*) FROM del),
       (SELECT count(*) FROM note), (SELECT count(*) FROM unlock) + (SELECT count(*) FROM nowait) - 1

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
-- message below as a value of the setting; the client recognises the
-- message (it is ErrNotHeld's text). It is raised by set_config, a
-- volatile function, so the planner never evaluates it ahead of time.
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

-- name: Get
SELECT "name", "owner", "token", "acquired_at", "renewed_at", "expires_at",
       (extract(epoch FROM "ttl") * 1000)::bigint,
       (extract(epoch FROM "expires_at" - now()) * 1000)::bigint,
       (extract(epoch FROM now() - "renewed_at") * 1000)::bigint,
       (extract(epoch FROM now() - "acquired_at") * 1000)::bigint,
       "session_pid" IS NOT NULL, "metadata"::text
  FROM {{table}}
 WHERE "name" = $1::text

-- name: List
SELECT "name", "owner", "token", "acquired_at", "renewed_at", "expires_at",
       (extract(epoch FROM "ttl") * 1000)::bigint,
       (extract(epoch FROM "expires_at" - now()) * 1000)::bigint,
       (extract(epoch FROM now() - "renewed_at") * 1000)::bigint,
       (extract(epoch FROM now() - "acquired_at") * 1000)::bigint,
       "session_pid" IS NOT NULL, "metadata"::text
  FROM {{table}}
 ORDER BY "name"

-- name: ForceRelease
WITH del AS (
    DELETE FROM {{table}} WHERE "name" = $1::text
    RETURNING "name", "owner", "token", "acquired_at", "renewed_at", "expires_at", "ttl",
              "session_pid", "metadata"
), note AS (
    SELECT pg_notify($2::text, "name") FROM del
)
SELECT "name", "owner", "token", "acquired_at", "renewed_at", "expires_at",
       (extract(epoch FROM "ttl") * 1000)::bigint,
       (extract(epoch FROM "expires_at" - now()) * 1000)::bigint,
       (extract(epoch FROM now() - "renewed_at") * 1000)::bigint,
       (extract(epoch FROM now() - "acquired_at") * 1000)::bigint,
       "session_pid" IS NOT NULL, "metadata"::text
  FROM del, (SELECT count(*) FROM note) AS n

-- name: Cleanup
WITH del AS (
    DELETE FROM {{table}} WHERE "expires_at" <= now() RETURNING 1
)
SELECT count(*) FROM del

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

-- name: AwaitSession
-- Blocks until no session holds the session-bound lease of $1 (its holder
-- released it or its session ended), then lets go at once.
SELECT pg_advisory_lock_shared(hashtextextended($2::text || $1::text, 0)),
       pg_advisory_unlock_shared(hashtextextended($2::text || $1::text, 0))
