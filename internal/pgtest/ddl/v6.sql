-- pglease.DDL("pglease_fixture.leases") as printed at commit c56b4c5 (schema version 6),
-- for tests of upgrades (pgtest.CreateOldTable). Generated; do not edit.

CREATE SCHEMA IF NOT EXISTS "pglease_fixture";

CREATE SEQUENCE IF NOT EXISTS "pglease_fixture"."leases_token_seq" AS bigint MINVALUE 1 NO CYCLE;

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

CREATE INDEX IF NOT EXISTS "leases_semaphore_idx" ON "pglease_fixture"."leases" ("semaphore") WHERE "semaphore" IS NOT NULL;

CREATE UNLOGGED TABLE IF NOT EXISTS "pglease_fixture"."leases_waiters" (
    "name"       text        NOT NULL,
    "client"     text        NOT NULL,
    "since"       timestamptz NOT NULL,
    "expires_at"  timestamptz NOT NULL,
    "notified_at" timestamptz,
    PRIMARY KEY ("name", "client")
);

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
               CASE WHEN $5 THEN (extract(epoch FROM pg_postmaster_start_time())::text || ' ' || coalesce(extract(epoch FROM pg_stat_get_bgwriter_stat_reset_time())::text, '-')) END,
               $6 || jsonb_build_object('client', $8)
         WHERE NOT EXISTS (SELECT 1 FROM "pglease_fixture"."leases" AS s
                            WHERE s."semaphore" = $1 AND s."expires_at" > now())
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
            RETURN;
        END IF;
    END IF;

    WITH clash AS MATERIALIZED (
        SELECT l."slots" FROM "pglease_fixture"."leases" AS l
         WHERE l."semaphore" = coalesce($14, $1) AND l."expires_at" > now()
           AND ($14 IS NULL OR l."slots" <> $15)
        UNION ALL
        SELECT 1 FROM "pglease_fixture"."leases" AS l
         WHERE $14 IS NOT NULL AND l."name" = $14 AND l."semaphore" IS NULL
           AND l."expires_at" > now()
         LIMIT 1
    ), srv AS MATERIALIZED (
        SELECT (extract(epoch FROM pg_postmaster_start_time())::text || ' ' || coalesce(extract(epoch FROM pg_stat_get_bgwriter_stat_reset_time())::text, '-')) AS id
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
 WHERE w."name" = n."name" AND w."client" <> q."client"
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
        WHERE ahead.n = 0 AND NOT EXISTS (SELECT 1 FROM clash)
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
    ), queued AS (
        INSERT INTO "pglease_fixture"."leases_waiters" AS w ("name", "client", "since", "expires_at")
        SELECT $1, $8, me.since, now() + $11 * interval '1 millisecond'
          FROM me WHERE $10 AND NOT EXISTS (SELECT 1 FROM ins) AND NOT EXISTS (SELECT 1 FROM clash)
        ON CONFLICT ("name", "client") DO UPDATE SET "expires_at" = excluded."expires_at"
        RETURNING 1
    ), dequeued AS (
        DELETE FROM "pglease_fixture"."leases_waiters" AS w
         WHERE $10 AND EXISTS (SELECT 1 FROM ins)
           AND w."client" = $8 AND w."name" = $1
        RETURNING 1
    ), handed AS (
        SELECT pg_notify('pglease_' || w."client", $1) AS ok
          FROM (SELECT w."client" FROM "pglease_fixture"."leases_waiters" AS w
                 WHERE $5 AND $10 AND EXISTS (SELECT 1 FROM ins)
                   AND w."name" = $1 AND w."client" <> $8
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
         WHERE ahead.first IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM old
                            WHERE old."remaining_ms" > 0
                              AND NOT (old."session_bound" AND old."pid" <> pg_backend_pid()
                                       AND pg_try_advisory_xact_lock_shared(hashtextextended($7 || old."pid"::text, 3))))
    ), nowait AS (
        SELECT set_config('synchronous_commit', 'off', true) AS ok
         WHERE NOT EXISTS (SELECT 1 FROM ins) AND NOT $13
    )
    SELECT true, ins."token", ins."session_bound",
           coalesce(old."owner", ''), coalesce(old."token", 0), 0::bigint, 0::bigint, '',
           false, 0::bigint, 0, 0
      FROM ins LEFT JOIN old ON true LEFT JOIN handed ON true LEFT JOIN durable ON true
    UNION ALL
    SELECT false, 0::bigint, coalesce(old."session_bound", false),
           coalesce(old."owner", ''), coalesce(old."token", 0), coalesce(old."remaining_ms", -1),
           coalesce(old."heartbeat_ms", 0), coalesce(old."client", ''),
           CASE WHEN old."session_bound"
                THEN NOT pg_try_advisory_xact_lock_shared(hashtextextended($7 || old."pid"::text, 3))
                ELSE false END,
           (SELECT n FROM ahead), coalesce((SELECT "slots" FROM clash), 0), coalesce(old."pid", 0)
      FROM (SELECT 1) AS one LEFT JOIN old ON true LEFT JOIN nowait ON true LEFT JOIN nudge ON true
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
BEGIN
    o_released := 0;
    o_notified := 0;
    o_nowait := 1;
    DELETE FROM "pglease_fixture"."leases" AS l
     WHERE l."name" = $1 AND l."token" = $2 AND l."hold_until" <= now()
    RETURNING l."acquired_at",
              (SELECT CASE WHEN x.queue THEN true WHEN pg_notify($3, $1) IS NULL THEN false ELSE false END
                 FROM (SELECT EXISTS (SELECT 1 FROM "pglease_fixture"."leases_waiters" AS w WHERE w."name" = $1) AS queue) AS x),
              set_config('synchronous_commit', 'off', true)
         INTO v_acquired_at, v_waiters, v_setting;
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
 WHERE EXISTS (SELECT 1 FROM del) AND w."name" = $1::text
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

COMMENT ON TABLE "pglease_fixture"."leases" IS 'pglease lease table, schema version 6';
