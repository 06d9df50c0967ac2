-- pglease.DDL("pglease_fixture.leases") as printed at commit 703758e (schema version 9),
-- for the test that a version-9 table created by that code accepts every call of this one
-- (TestTablesOf703758eServeTheseCalls, through pgtest.CreateOldTable). Generated; do not edit.

CREATE SCHEMA IF NOT EXISTS "pglease_fixture";

DO $pglease$
DECLARE
    v_comment text := obj_description(to_regclass('"pglease_fixture"."leases"'), 'pg_class');
BEGIN
    IF to_regclass('"pglease_fixture"."leases"') IS NULL THEN
        RETURN;
    END IF;
    IF v_comment IS NULL OR v_comment !~ '^pglease lease table, schema version [0-9]+$' THEN
        RAISE EXCEPTION 'pglease: table % exists but is not a pglease lease table (its comment names no schema version); nothing was changed: pick another table, or let pglease migrate (Client.Migrate) check and upgrade it', '"pglease_fixture"."leases"';
    END IF;
    IF substring(v_comment FROM '([0-9]+)$')::int > 9 THEN
        RAISE EXCEPTION 'pglease: table % has schema version %, newer than this DDL (%); nothing was changed: use the DDL of the newer pglease', '"pglease_fixture"."leases"', substring(v_comment FROM '([0-9]+)$'), 9;
    END IF;
END
$pglease$;

CREATE SEQUENCE IF NOT EXISTS "pglease_fixture"."leases_token_seq" AS bigint MINVALUE 1 NO CYCLE;

SELECT setval('"pglease_fixture"."leases_token_seq"', greatest((extract(epoch FROM clock_timestamp()) * 1000000)::bigint, "last_value"), true)
  FROM "pglease_fixture"."leases_token_seq"
 WHERE NOT "is_called";

CREATE TABLE IF NOT EXISTS "pglease_fixture"."leases" (
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
    PRIMARY KEY ("name"),
    CHECK (octet_length("name") BETWEEN 1 AND 255),
    CHECK ("token" > 0)
);

ALTER TABLE "pglease_fixture"."leases" ADD COLUMN IF NOT EXISTS "session_server" text,
                      ADD COLUMN IF NOT EXISTS "semaphore" text,
                      ADD COLUMN IF NOT EXISTS "slots" integer,
                      ADD COLUMN IF NOT EXISTS "stepdown_at" timestamptz;

CREATE INDEX IF NOT EXISTS "leases_semaphore_idx" ON "pglease_fixture"."leases" ("semaphore") WHERE "semaphore" IS NOT NULL;

CREATE UNLOGGED TABLE IF NOT EXISTS "pglease_fixture"."leases_waiters" (
    "name"       text        NOT NULL,
    "client"     text        NOT NULL,
    "since"       timestamptz NOT NULL,
    "expires_at"  timestamptz NOT NULL,
    "notified_at" timestamptz,
    "owner"       text,
    "shared"      boolean     NOT NULL DEFAULT false,
    "polling"     boolean     NOT NULL DEFAULT false,
    PRIMARY KEY ("name", "client")
);

ALTER TABLE "pglease_fixture"."leases_waiters" ADD COLUMN IF NOT EXISTS "notified_at" timestamptz,
                        ADD COLUMN IF NOT EXISTS "owner" text,
                        ADD COLUMN IF NOT EXISTS "shared" boolean NOT NULL DEFAULT false,
                        ADD COLUMN IF NOT EXISTS "polling" boolean NOT NULL DEFAULT false;

CREATE UNLOGGED TABLE IF NOT EXISTS "pglease_fixture"."leases_incarnation" (
    "one" boolean PRIMARY KEY DEFAULT true CHECK ("one"),
    "id"  text    NOT NULL
);

CREATE OR REPLACE FUNCTION "pglease_fixture"."leases_server"() RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $pglease$
DECLARE
    v_id text;
BEGIN
    SELECT i."id" INTO v_id FROM "pglease_fixture"."leases_incarnation" AS i;
    IF v_id IS NULL THEN
        INSERT INTO "pglease_fixture"."leases_incarnation" AS i ("id") VALUES (md5(random()::text || clock_timestamp()::text))
        ON CONFLICT ("one") DO NOTHING
        RETURNING i."id" INTO v_id;
        IF v_id IS NULL THEN
            SELECT i."id" INTO v_id FROM "pglease_fixture"."leases_incarnation" AS i;
        END IF;
    END IF;
    RETURN extract(epoch FROM pg_postmaster_start_time())::text || ' ' || v_id;
END
$pglease$;

CREATE OR REPLACE FUNCTION "pglease_fixture"."leases_acquire"(
    p_name text, p_owner text, p_ttl_ms bigint, p_hold_ms bigint, p_session boolean,
    p_metadata jsonb, p_ns text, p_client text, p_lock_timeout_ms integer,
    p_queued boolean, p_queue_ttl_ms bigint, p_fair_ms bigint, p_in_batch boolean,
    p_semaphore text, p_slots integer,
    OUT o_acquired boolean, OUT o_token bigint, OUT o_session_bound boolean,
    OUT o_owner text, OUT o_other_token bigint, OUT o_remaining_ms bigint,
    OUT o_heartbeat_ms bigint, OUT o_client text, OUT o_watchable boolean,
    OUT o_ahead bigint, OUT o_clash integer, OUT o_pid integer)
LANGUAGE plpgsql VOLATILE AS $pglease$
DECLARE
    v_ok boolean;
    v_setting text;
BEGIN
    PERFORM set_config('pglease.writer', '9', true);
    IF $9 > 0 THEN
        v_ok := set_config('lock_timeout', $9::text, true) IS NULL;
    END IF;
    IF $14 IS NOT NULL THEN
        v_ok := pg_advisory_xact_lock(hashtext($7 || $14), hashtext($14 || $7)) IS NULL;
    END IF;
    v_ok := pg_advisory_xact_lock(hashtext($7 || $1), hashtext($1 || $7)) IS NULL;

    IF NOT $10 AND $14 IS NULL THEN
        INSERT INTO "pglease_fixture"."leases" AS l
            ("name", "owner", "token", "acquired_at", "renewed_at", "expires_at",
             "hold_until", "ttl", "session_pid", "session_server", "metadata")
        SELECT $1, $2, nextval('"pglease_fixture"."leases_token_seq"'), now(), now(),
               now() + $3 * interval '1 millisecond',
               now() + $4 * interval '1 millisecond',
               $3 * interval '1 millisecond',
               CASE WHEN $5 THEN pg_backend_pid() END,
               CASE WHEN $5 THEN "pglease_fixture"."leases_server"() END,
               $6 || jsonb_build_object('client', $8)
         WHERE NOT EXISTS (SELECT 1 FROM "pglease_fixture"."leases" AS s
                            WHERE s."semaphore" = $1 AND (s."expires_at" > now() OR s."slots" = 0))
           AND NOT EXISTS (SELECT 1 FROM "pglease_fixture"."leases_waiters" AS w
                            WHERE w."name" = $1 AND w."client" <> $8)
        ON CONFLICT ("name") DO NOTHING
        RETURNING true, l."token", l."session_pid" IS NOT NULL, '', 0::bigint, 0::bigint, 0::bigint,
                  '', false, 0::bigint, 0, 0, set_config('synchronous_commit',
           CASE WHEN current_setting('synchronous_commit') IN ('off', 'local') THEN 'on'
                ELSE current_setting('synchronous_commit') END,
           true)
             INTO o_acquired, o_token, o_session_bound, o_owner, o_other_token, o_remaining_ms,
                  o_heartbeat_ms, o_client, o_watchable, o_ahead, o_clash, o_pid, v_setting;
        IF FOUND THEN
            IF $11 > 0 THEN
                DELETE FROM "pglease_fixture"."leases_waiters" AS w WHERE w."name" = $1 AND w."client" = $8;
            END IF;
            RETURN;
        END IF;
    END IF;

    WITH clash AS MATERIALIZED (
        SELECT CASE WHEN l."slots" = 0 THEN -1 ELSE l."slots" END FROM "pglease_fixture"."leases" AS l
         WHERE l."semaphore" = coalesce($14, $1) AND l."expires_at" > now()
           AND (CASE WHEN $14 IS NULL THEN l."slots" <> 0 ELSE l."slots" <> $15 END)
        UNION ALL
        SELECT 1 FROM "pglease_fixture"."leases" AS l
         WHERE $14 IS NOT NULL AND l."name" = $14 AND l."semaphore" IS NULL
           AND l."expires_at" > now()
         LIMIT 1
    ), srv AS MATERIALIZED (
        SELECT "pglease_fixture"."leases_server"() AS id
    ), readers AS MATERIALIZED (
        SELECT l."name", l."owner", l."token", l."expires_at" > now() AS "live",
               l."session_pid" IS NOT NULL AND l."session_server" = (SELECT id FROM srv) AS "session_bound",
               (extract(epoch FROM l."expires_at" - now()) * 1000)::bigint AS "remaining_ms",
               (extract(epoch FROM now() - l."renewed_at") * 1000)::bigint AS "heartbeat_ms",
               l."session_pid" AS "pid",
               NOT (l."session_pid" IS NOT NULL AND l."session_pid" <> pg_backend_pid()
                    AND l."session_server" = (SELECT id FROM srv)
                    AND pg_try_advisory_xact_lock_shared(hashtextextended($7 || l."session_pid"::text, 3))) AS "alive"
          FROM "pglease_fixture"."leases" AS l
         WHERE $14 IS NULL AND l."semaphore" = $1 AND l."slots" = 0
    ), reading AS MATERIALIZED (
        SELECT * FROM readers AS r WHERE r."live" AND r."alive"
    ), me AS MATERIALIZED (
        SELECT coalesce(r.since, now()) AS since, r.since IS NOT NULL AS registered
          FROM (SELECT) AS one LEFT JOIN "pglease_fixture"."leases_waiters" AS r
            ON $10 AND r."name" = $1 AND r."client" = $8
    ), ahead AS MATERIALIZED (
        SELECT coalesce(max(f.n) FILTER (WHERE f.due OR q.registered), 0) AS n,
               max(f."client") FILTER (WHERE f.due) AS first
          FROM (SELECT $1 AS "name") AS n
         CROSS JOIN (SELECT $8 AS "client", $7 AS "ns", me.since AS "since", me.registered,
                            $12 * interval '1 millisecond' AS "fair" FROM me) AS q
          LEFT JOIN LATERAL (SELECT w."client",
       coalesce(w."notified_at", w."since") <= now() - q."fair" AS "due",
       count(*) OVER () AS "n"
  FROM "pglease_fixture"."leases_waiters" AS w
 WHERE w."name" = n."name" AND w."client" <> q."client" AND NOT w."shared"
   AND CASE WHEN w."expires_at" > now() AND (w."since", w."client") < (q."since", q."client")
            THEN NOT pg_try_advisory_xact_lock_shared(hashtextextended(q."ns" || w."client", 1))
            ELSE false END
 ORDER BY w."since", w."client"
 LIMIT 1) AS f ON true
    ), old AS MATERIALIZED (
        SELECT l."owner", l."token", l."expires_at" > now() AS "live",
               l."session_pid" IS NOT NULL AND l."session_server" = (SELECT id FROM srv) AS "session_bound",
               (extract(epoch FROM l."expires_at" - now()) * 1000)::bigint AS "remaining_ms",
               (extract(epoch FROM now() - l."renewed_at") * 1000)::bigint AS "heartbeat_ms",
               l."metadata" ->> 'client' AS "client", l."session_pid" AS "pid"
          FROM "pglease_fixture"."leases" AS l WHERE l."name" = $1
    ), ins AS (
        INSERT INTO "pglease_fixture"."leases" AS l
            ("name", "owner", "token", "acquired_at", "renewed_at", "expires_at",
             "hold_until", "ttl", "session_pid", "session_server", "metadata", "semaphore", "slots")
        SELECT $1, $2, nextval('"pglease_fixture"."leases_token_seq"'), now(), now(),
               now() + $3 * interval '1 millisecond',
               now() + $4 * interval '1 millisecond',
               $3 * interval '1 millisecond',
               CASE WHEN $5 THEN pg_backend_pid() END,
               CASE WHEN $5 THEN (SELECT id FROM srv) END,
               $6 || jsonb_build_object('client', $8),
               $14, $15
        FROM ahead
        WHERE ahead.n = 0 AND NOT EXISTS (SELECT 1 FROM clash) AND NOT EXISTS (SELECT 1 FROM reading)
          AND NOT EXISTS (SELECT 1 FROM old WHERE old."live" AND NOT old."session_bound")
        ON CONFLICT ("name") DO UPDATE
           SET "owner" = excluded."owner", "token" = excluded."token",
               "acquired_at" = excluded."acquired_at", "renewed_at" = excluded."renewed_at",
               "expires_at" = excluded."expires_at", "hold_until" = excluded."hold_until",
               "ttl" = excluded."ttl", "session_pid" = excluded."session_pid",
               "session_server" = excluded."session_server", "metadata" = excluded."metadata",
               "semaphore" = excluded."semaphore", "slots" = excluded."slots",
               "stepdown_at" = NULL
         WHERE l."expires_at" <= now()
            OR (l."session_pid" IS NOT NULL AND l."session_pid" <> pg_backend_pid()
                AND l."session_server" = (SELECT id FROM srv)
                AND pg_try_advisory_xact_lock_shared(hashtextextended($7 || l."session_pid"::text, 3)))
        RETURNING l."token", l."session_pid" IS NOT NULL AS "session_bound"
    ), purged AS (
        DELETE FROM "pglease_fixture"."leases" AS l
         WHERE EXISTS (SELECT 1 FROM ins)
           AND l."name" IN (SELECT r."name" FROM readers AS r WHERE NOT (r."live" AND r."alive"))
        RETURNING 1
    ), queued AS (
        INSERT INTO "pglease_fixture"."leases_waiters" AS w ("name", "client", "since", "expires_at", "owner", "shared")
        SELECT $1, $8, me.since, now() + $11 * interval '1 millisecond', $2, false
          FROM me WHERE $10 AND NOT EXISTS (SELECT 1 FROM ins) AND NOT EXISTS (SELECT 1 FROM clash)
        ON CONFLICT ("name", "client") DO UPDATE
           SET "expires_at" = excluded."expires_at", "owner" = excluded."owner", "shared" = false,
               "polling" = false
        RETURNING 1
    ), polled AS (
        INSERT INTO "pglease_fixture"."leases_waiters" AS w ("name", "client", "since", "expires_at", "owner", "shared", "polling")
        SELECT $1, $8, now(), now() + $11 * interval '1 millisecond', $2, false, true
         WHERE NOT $10 AND $11 > 0 AND $14 IS NULL
           AND NOT EXISTS (SELECT 1 FROM ins) AND EXISTS (SELECT 1 FROM reading)
        ON CONFLICT ("name", "client") DO UPDATE
           SET "expires_at" = excluded."expires_at", "owner" = excluded."owner", "shared" = false,
               "polling" = true
        RETURNING 1
    ), dequeued AS (
        DELETE FROM "pglease_fixture"."leases_waiters" AS w
         WHERE ($10 OR $11 > 0) AND EXISTS (SELECT 1 FROM ins)
           AND w."client" = $8 AND w."name" = $1
        RETURNING 1
    ), handed AS (
        SELECT pg_notify('pglease_' || w."client", $1) AS ok
          FROM (SELECT w."client" FROM "pglease_fixture"."leases_waiters" AS w
                 WHERE $5 AND $10 AND EXISTS (SELECT 1 FROM ins)
                   AND w."name" = $1 AND w."client" <> $8 AND NOT w."shared"
                   AND CASE WHEN w."expires_at" > now()
                            THEN NOT pg_try_advisory_xact_lock_shared(hashtextextended($7 || w."client", 1))
                            ELSE false END
                 ORDER BY w."since", w."client"
                 LIMIT 1) AS w
    ), durable AS (
        SELECT set_config('synchronous_commit',
           CASE WHEN current_setting('synchronous_commit') IN ('off', 'local') THEN 'on'
                ELSE current_setting('synchronous_commit') END,
           true) AS ok FROM ins LIMIT 1
    ), nudge AS (
        SELECT pg_notify('pglease_' || ahead.first, $1) AS ok
          FROM ahead
         WHERE ahead.first IS NOT NULL AND NOT EXISTS (SELECT 1 FROM reading)
           AND NOT EXISTS (SELECT 1 FROM old
                            WHERE old."remaining_ms" > 0
                              AND NOT (old."session_bound" AND old."pid" <> pg_backend_pid()
                                       AND pg_try_advisory_xact_lock_shared(hashtextextended($7 || old."pid"::text, 3))))
    ), nowait AS (
        SELECT set_config('synchronous_commit', 'off', true) AS ok
         WHERE NOT EXISTS (SELECT 1 FROM ins) AND NOT $13
    ), shown AS MATERIALIZED (
        SELECT h.* FROM (
            SELECT old."owner", old."token", old."session_bound", old."remaining_ms", old."heartbeat_ms",
                   old."client", old."pid", CASE WHEN old."live" THEN 0 ELSE 2 END AS "rank"
              FROM old
            UNION ALL
            SELECT r."owner", r."token", r."session_bound", r."remaining_ms", r."heartbeat_ms",
                   '', r."pid", 1
              FROM reading AS r
        ) AS h
         ORDER BY h."rank", h."session_bound" DESC, h."remaining_ms" DESC
         LIMIT 1
    )
    SELECT true, ins."token", ins."session_bound",
           coalesce(old."owner", ''), coalesce(old."token", 0), 0::bigint, 0::bigint, '',
           false, 0::bigint, 0, 0
      FROM ins LEFT JOIN old ON true LEFT JOIN handed ON true LEFT JOIN durable ON true
           LEFT JOIN (SELECT count(*) FROM purged) AS p ON true
    UNION ALL
    SELECT false, 0::bigint, coalesce(old."session_bound", false),
           coalesce(old."owner", ''), coalesce(old."token", 0), coalesce(old."remaining_ms", -1),
           coalesce(old."heartbeat_ms", 0), coalesce(old."client", ''),
           CASE WHEN old."session_bound"
                THEN NOT pg_try_advisory_xact_lock_shared(hashtextextended($7 || old."pid"::text, 3))
                ELSE false END,
           (SELECT n FROM ahead), coalesce((SELECT "slots" FROM clash), 0), coalesce(old."pid", 0)
      FROM (SELECT 1) AS one LEFT JOIN shown AS old ON true LEFT JOIN nowait ON true LEFT JOIN nudge ON true
     WHERE NOT EXISTS (SELECT 1 FROM ins)
      INTO o_acquired, o_token, o_session_bound, o_owner, o_other_token, o_remaining_ms,
           o_heartbeat_ms, o_client, o_watchable, o_ahead, o_clash, o_pid;
END
$pglease$;

CREATE OR REPLACE FUNCTION "pglease_fixture"."leases_release"(
    p_name text, p_token bigint, p_channel text, p_ns text, p_fair_ms bigint,
    OUT o_released bigint, OUT o_notified bigint, OUT o_nowait bigint)
LANGUAGE plpgsql VOLATILE AS $pglease$
DECLARE
    v_setting text;
    v_acquired_at timestamptz;
    v_waiters boolean;
    v_shared text;
BEGIN
    o_released := 0;
    o_notified := 0;
    o_nowait := 1;
    DELETE FROM "pglease_fixture"."leases" AS l
     WHERE l."name" = $1 AND l."token" = $2 AND l."hold_until" <= now()
    RETURNING l."acquired_at",
              (SELECT CASE WHEN x.queue THEN true WHEN pg_notify($3, $1) IS NULL THEN false ELSE false END
                 FROM (SELECT EXISTS (SELECT 1 FROM "pglease_fixture"."leases_waiters" AS w WHERE w."name" = $1) AS queue) AS x),
              set_config('synchronous_commit', 'off', true),
              CASE WHEN l."slots" = 0 THEN l."semaphore" END
         INTO v_acquired_at, v_waiters, v_setting, v_shared;
    IF NOT FOUND THEN
        v_setting := set_config('synchronous_commit', 'off', true);
        UPDATE "pglease_fixture"."leases" AS l
           SET "expires_at" = l."hold_until", "session_pid" = NULL, "session_server" = NULL,
               "metadata" = l."metadata" - 'client'
         WHERE l."name" = $1 AND l."token" = $2 AND l."hold_until" > now();
        GET DIAGNOSTICS o_released = ROW_COUNT;
        RETURN;
    END IF;
    o_released := 1;
    IF v_shared IS NOT NULL THEN
        o_notified := 1;
        PERFORM pg_notify('pglease_' || w."client", v_shared)
          FROM (SELECT w."client" FROM "pglease_fixture"."leases_waiters" AS w
                 WHERE w."name" = v_shared AND NOT w."shared"
                   AND CASE WHEN w."expires_at" > now()
                            THEN NOT pg_try_advisory_xact_lock_shared(hashtextextended($4 || w."client", 1))
                            ELSE false END
                 ORDER BY w."since", w."client"
                 LIMIT 1) AS w;
        RETURN;
    END IF;
    IF NOT v_waiters THEN
        o_notified := 1;
        RETURN;
    END IF;
    WITH del AS (
        SELECT $1 AS "name", v_acquired_at AS "acquired_at"
    ), lockns AS (
        SELECT $4 AS v
    ), head AS MATERIALIZED (
        SELECT w."client", w."notified_at", w."since"
  FROM "pglease_fixture"."leases_waiters" AS w
 WHERE EXISTS (SELECT 1 FROM del) AND w."name" = $1::text AND NOT w."shared"
   AND CASE WHEN w."expires_at" > now()
            THEN NOT pg_try_advisory_xact_lock_shared(hashtextextended((SELECT v FROM lockns) || w."client", 1))
            ELSE false END
 ORDER BY w."since", w."client"
 LIMIT 1
    ), wake AS MATERIALIZED (
        SELECT h."client", h."since" FROM head AS h
         WHERE h."notified_at" IS NULL OR h."notified_at" <= now() - $5 * interval '1 millisecond'
    ), marked AS (
        UPDATE "pglease_fixture"."leases_waiters" AS w SET "notified_at" = greatest(wake."since", del."acquired_at")
          FROM wake, del
         WHERE w."name" = $1 AND w."client" = wake."client" AND w."notified_at" IS NULL
    ), stale AS (
        DELETE FROM "pglease_fixture"."leases_waiters" AS w
         WHERE w."name" = $1 AND w."expires_at" <= now()
    ), note AS (
        SELECT pg_notify($3, del."name") FROM del
         WHERE NOT EXISTS (SELECT 1 FROM head) OR EXISTS (SELECT 1 FROM wake)
        UNION ALL
        SELECT pg_notify('pglease_' || wake."client", del."name") FROM del, wake
    )
    SELECT count(*) INTO o_notified FROM note;
END
$pglease$;

CREATE OR REPLACE FUNCTION "pglease_fixture"."leases_acquire_shared"(
    p_name text, p_owner text, p_ttl_ms bigint, p_hold_ms bigint, p_session boolean,
    p_metadata jsonb, p_ns text, p_client text, p_lock_timeout_ms integer,
    p_queued boolean, p_queue_ttl_ms bigint, p_in_batch boolean, p_mine jsonb,
    OUT o_acquired boolean, OUT o_token bigint, OUT o_session_bound boolean,
    OUT o_owner text, OUT o_other_token bigint, OUT o_remaining_ms bigint,
    OUT o_heartbeat_ms bigint, OUT o_client text, OUT o_watchable boolean,
    OUT o_ahead bigint, OUT o_clash integer, OUT o_pid integer, OUT o_name text)
LANGUAGE plpgsql VOLATILE AS $pglease$
DECLARE
    v_ok boolean;
    v_setting text;
    v_srv text;
    v_since timestamptz;
    v_registered boolean;
    v_held boolean;
    v_i integer;
    h record;
BEGIN
    PERFORM set_config('pglease.writer', '9', true);
    IF $9 > 0 THEN
        v_ok := set_config('lock_timeout', $9::text, true) IS NULL;
    END IF;
    v_ok := pg_advisory_xact_lock(hashtext($7 || $1), hashtext($1 || $7)) IS NULL;
    v_srv := "pglease_fixture"."leases_server"();
    o_acquired := false; o_token := 0; o_session_bound := false; o_owner := '';
    o_other_token := 0; o_remaining_ms := -1; o_heartbeat_ms := 0; o_client := '';
    o_watchable := false; o_ahead := 0; o_pid := 0; o_name := '';
    IF NOT $12 THEN
        v_setting := set_config('synchronous_commit', 'off', true);
    END IF;

    o_clash := coalesce((SELECT l."slots" FROM "pglease_fixture"."leases" AS l
                          WHERE l."semaphore" = $1 AND l."slots" <> 0 AND l."expires_at" > now()
                          LIMIT 1), 0);
    IF o_clash <> 0 THEN
        RETURN;
    END IF;

    SELECT w."since" INTO v_since FROM "pglease_fixture"."leases_waiters" AS w
     WHERE $10 AND w."name" = $1 AND w."client" = $8;
    v_registered := FOUND;
    IF NOT v_registered THEN
        v_since := now();
    END IF;

    SELECT l."owner", l."token", l."metadata" ->> 'client' AS "client", l."session_pid" AS "pid",
           (extract(epoch FROM l."expires_at" - now()) * 1000)::bigint AS "remaining_ms",
           (extract(epoch FROM now() - l."renewed_at") * 1000)::bigint AS "heartbeat_ms",
           l."session_pid" IS NOT NULL AND l."session_server" = v_srv AS "session_bound",
           l."expires_at" > now() AS "live"
      INTO h FROM "pglease_fixture"."leases" AS l WHERE l."name" = $1;
    v_held := FOUND AND h."live"
              AND NOT (h."session_bound" AND h."pid" <> pg_backend_pid()
                       AND pg_try_advisory_xact_lock_shared(hashtextextended($7 || h."pid"::text, 3)));
    IF NOT v_held THEN
        SELECT count(*) INTO o_ahead FROM "pglease_fixture"."leases_waiters" AS w
         WHERE w."name" = $1 AND NOT w."shared" AND w."client" <> $8
           AND (NOT v_registered OR (w."since", w."client") < (v_since, $8))
           AND CASE WHEN w."expires_at" > now()
                    THEN w."polling" OR NOT pg_try_advisory_xact_lock_shared(hashtextextended($7 || w."client", 1))
                    ELSE false END;
    END IF;
    IF v_held OR o_ahead > 0 THEN
        IF v_held THEN
            o_owner := h."owner"; o_other_token := h."token"; o_remaining_ms := h."remaining_ms";
            o_heartbeat_ms := h."heartbeat_ms"; o_client := coalesce(h."client", '');
            o_session_bound := h."session_bound"; o_watchable := h."session_bound";
            o_pid := coalesce(h."pid", 0);
        END IF;
        IF $10 THEN
            INSERT INTO "pglease_fixture"."leases_waiters" AS w ("name", "client", "since", "expires_at", "owner", "shared")
            VALUES ($1, $8, v_since, now() + $11 * interval '1 millisecond', $2, true)
            ON CONFLICT ("name", "client") DO UPDATE
               SET "expires_at" = excluded."expires_at", "owner" = excluded."owner", "shared" = true,
                   "polling" = false;
        END IF;
        RETURN;
    END IF;

    DELETE FROM "pglease_fixture"."leases" AS l WHERE l."name" = $1;
    DELETE FROM "pglease_fixture"."leases" AS l
     WHERE l."semaphore" = $1 AND l."slots" = 0 AND l."metadata" ->> 'client' = $8
       AND l."name" NOT IN (SELECT jsonb_array_elements_text($13));
    SELECT min(i) INTO v_i
      FROM generate_series(0, (SELECT count(*) FROM "pglease_fixture"."leases" AS l
                                WHERE l."semaphore" = $1 AND l."slots" = 0)::integer) AS i
     WHERE NOT EXISTS (
            SELECT 1 FROM "pglease_fixture"."leases" AS l
             WHERE l."name" = $1 || '#' || i AND l."expires_at" > now()
               AND NOT (l."session_pid" IS NOT NULL AND l."session_pid" <> pg_backend_pid()
                        AND l."session_server" = v_srv
                        AND pg_try_advisory_xact_lock_shared(hashtextextended($7 || l."session_pid"::text, 3))));
    INSERT INTO "pglease_fixture"."leases" AS l
        ("name", "owner", "token", "acquired_at", "renewed_at", "expires_at",
         "hold_until", "ttl", "session_pid", "session_server", "metadata", "semaphore", "slots")
    VALUES ($1 || '#' || v_i, $2, nextval('"pglease_fixture"."leases_token_seq"'), now(), now(),
            now() + $3 * interval '1 millisecond',
            now() + $4 * interval '1 millisecond',
            $3 * interval '1 millisecond',
            CASE WHEN $5 THEN pg_backend_pid() END,
            CASE WHEN $5 THEN v_srv END,
            $6 || jsonb_build_object('client', $8),
            $1, 0)
    ON CONFLICT ("name") DO UPDATE
       SET "owner" = excluded."owner", "token" = excluded."token",
           "acquired_at" = excluded."acquired_at", "renewed_at" = excluded."renewed_at",
           "expires_at" = excluded."expires_at", "hold_until" = excluded."hold_until",
           "ttl" = excluded."ttl", "session_pid" = excluded."session_pid",
           "session_server" = excluded."session_server", "metadata" = excluded."metadata",
           "semaphore" = excluded."semaphore", "slots" = excluded."slots",
           "stepdown_at" = NULL
    RETURNING l."name", l."token", l."session_pid" IS NOT NULL INTO o_name, o_token, o_session_bound;
    o_acquired := true;
    IF $10 THEN
        DELETE FROM "pglease_fixture"."leases_waiters" AS w WHERE w."name" = $1 AND w."client" = $8;
    END IF;
    v_setting := set_config('synchronous_commit',
           CASE WHEN current_setting('synchronous_commit') IN ('off', 'local') THEN 'on'
                ELSE current_setting('synchronous_commit') END,
           true);
END
$pglease$;

CREATE OR REPLACE FUNCTION "pglease_fixture"."leases_fence"() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $pglease$
BEGIN
    IF current_setting('pglease.writer', true) IS DISTINCT FROM '9' THEN
        RAISE EXCEPTION USING
            MESSAGE = format('pglease: table %I.%I has schema version 9, and a client of an earlier pglease release may not acquire leases in it',
                             TG_TABLE_SCHEMA, TG_TABLE_NAME),
            HINT = 'upgrade this client to a pglease release of schema version 9 or later; until then its held leases still renew and release';
    END IF;
    RETURN NULL;
END
$pglease$;

DO $pglease$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_trigger
                    WHERE tgrelid = '"pglease_fixture"."leases"'::regclass AND tgname = 'pglease_fence') THEN
        CREATE TRIGGER "pglease_fence" BEFORE INSERT ON "pglease_fixture"."leases"
            FOR EACH STATEMENT EXECUTE FUNCTION "pglease_fixture"."leases_fence"();
    END IF;
END
$pglease$;

COMMENT ON TABLE "pglease_fixture"."leases" IS 'pglease lease table, schema version 9';
