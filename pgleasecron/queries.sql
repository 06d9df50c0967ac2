-- The SQL of pgleasecron, in one place.
--
-- Each statement starts with a "-- name: X" line. Identifiers are written as
-- {{jobs}} and {{runs}} (the scheduler's tables) and {{leases}} (the lease
-- table whose rows fence the runs); they are replaced once, when a
-- Scheduler is created, by schema-qualified names whose parts were checked
-- against [a-z_][a-z0-9_]{0,62} (pglease.Config.Validate) and then quoted.
-- Every value is a bind parameter; nothing a user types is spliced into SQL
-- text.
--
-- The lease table is read, never written: its layout (the columns "name",
-- "token" and "expires_at") is that of pglease.DDL, and a job's lease is held
-- through the pglease API. Its rows are named by pglease.Config.Plan.

-- name: LockSchema
-- Serializes the creation of the tables of one schema with every other
-- creation of pglease objects in it (the lease table's included), which
-- would otherwise race on the catalog's unique indexes. The key is the one
-- pglease takes to create a lease table: the schema as the server resolves
-- it, never as the client spells it; $1 is the schema the lease table
-- names, or '' for an unqualified table, which CREATE TABLE puts in the
-- first existing schema of the search_path, current_schema(). Returns the
-- schema, or NULL (and no lock taken) when the search_path names no existing
-- schema. Held until the transaction ends.
WITH s AS MATERIALIZED (
    SELECT CASE WHEN $1::text = '' THEN current_schema()::text ELSE $1::text END AS nsp
), l AS MATERIALIZED (
    SELECT s.nsp, pg_advisory_xact_lock(hashtextextended('pglease schema "' || replace(s.nsp, '"', '""') || '"', 0))
      FROM s
)
SELECT l.nsp FROM l

-- {{jobs}} holds one row per job and the last tick claimed for it, {{runs}}
-- a bounded history of ticks, one row per claimed tick. A tick is identified by (job, scheduled instant) and
-- claimed by moving the job's "last_tick" forward past it in one statement
-- (ClaimTick): replicas that race for a tick serialize on the job's row and
-- only the first moves it. Ticks are due by the server's clock (now()), so a
-- replica's own clock decides nothing.

-- name: CreateJobs
CREATE TABLE IF NOT EXISTS {{jobs}} (
    "job"           text        NOT NULL,
    "schedule"      text        NOT NULL,
    "last_tick"     timestamptz NOT NULL,
    "registered_at" timestamptz NOT NULL,
    "seen_at"       timestamptz NOT NULL,
    PRIMARY KEY ("job"),
    CHECK (octet_length("job") BETWEEN 1 AND 200)
)

-- name: CreateRuns
-- status: running, succeeded, failed, lost (the runner's lease ended while
-- it ran; run again under a retry policy, see OrphanedRuns), abandoned (the
-- runner died; see AbandonRun), skipped (the run
-- before was still going), missed (no replica ran it in time). "missed"
-- counts the earlier ticks this row stands for under the missed-tick policy.
CREATE TABLE IF NOT EXISTS {{runs}} (
    "job"        text        NOT NULL,
    "tick"       timestamptz NOT NULL,
    "status"     text        NOT NULL,
    "replica"    text        NOT NULL,
    "token"      bigint,
    "attempt"    integer     NOT NULL DEFAULT 1,
    "missed"     bigint      NOT NULL DEFAULT 0,
    "claimed_at" timestamptz NOT NULL,
    "started_at" timestamptz,
    "ended_at"   timestamptz,
    "error"      text,
    PRIMARY KEY ("job", "tick")
)

-- name: RegisterJob
-- $1 job, $2 schedule (its text, for people reading the table), $3 how far
-- back, in microseconds, a new job's ticks begin. A new job's first tick is
-- the first one after now less $3: ticks before a job existed are not
-- missed ticks ($3 is 0 for Run's jobs; for Wrap's, registered by the
-- firing of the tick robfig's Cron fired, the bound within which a firing
-- counts as its tick's). Returns the last tick claimed and the server's
-- time.
INSERT INTO {{jobs}} AS j ("job", "schedule", "last_tick", "registered_at", "seen_at")
VALUES ($1::text, $2::text, now() - make_interval(secs => $3::bigint / 1e6), now(), now())
ON CONFLICT ("job") DO UPDATE SET "schedule" = excluded."schedule", "seen_at" = excluded."seen_at"
RETURNING j."last_tick", clock_timestamp()

-- name: JobState
-- $1 job: the last tick claimed, and the server's time.
SELECT j."last_tick", clock_timestamp() FROM {{jobs}} AS j WHERE j."job" = $1::text

-- name: ClaimTick
-- $1 job, $2 tick, $3 replica, $4 status, $5 the claimer's lease token,
-- $6 missed ticks it stands for, $7 error text, $8 runs kept per job, $9 the
-- names of the job's lease rows (pglease.Config.Plan: one name). A
-- 'running' or 'missed' claim is made under the job's lease: only while a
-- row of $9 carries the token $5 unexpired by the server's clock (at the
-- statement's start), so that a holder resuming from a pause past its
-- lease's end claims nothing; the token is recorded in a 'running' row. A
-- 'skipped' claim is made by a replica that does not hold the lease ($5
-- NULL): only while the lease is held by the run of an earlier tick
-- (otherwise the lease may have been taken for this very tick, whose runner
-- has yet to claim it). The tick is claimed when it is due by the server's
-- clock and later than the job's last tick; then its row is written and the
-- oldest finished rows beyond $8 are dropped. Returns whether it was
-- claimed, the job's last tick (before this statement, when it claimed) and
-- the server's time.
WITH fence AS MATERIALIZED (
    SELECT CASE WHEN $5::bigint IS NULL THEN
               $4::text = 'skipped' AND EXISTS (
                   SELECT 1 FROM {{runs}} AS r JOIN {{leases}} AS l
                       ON l."name" = ANY($9::text[]) AND l."token" = r."token"
                    WHERE r."job" = $1::text AND r."status" = 'running' AND r."tick" < $2::timestamptz
                      AND l."expires_at" > now())
           ELSE
               $4::text <> 'skipped' AND EXISTS (
                   SELECT 1 FROM {{leases}} AS l
                    WHERE l."name" = ANY($9::text[]) AND l."token" = $5::bigint AND l."expires_at" > now())
           END AS ok
), adv AS (
    UPDATE {{jobs}} AS j SET "last_tick" = $2::timestamptz, "seen_at" = now()
     WHERE j."job" = $1::text AND j."last_tick" < $2::timestamptz AND $2::timestamptz <= now()
       AND (SELECT ok FROM fence)
    RETURNING 1
), ins AS (
    INSERT INTO {{runs}} ("job", "tick", "status", "replica", "token", "missed", "claimed_at",
                          "started_at", "ended_at", "error")
    SELECT $1::text, $2::timestamptz, $4::text, $3::text,
           CASE WHEN $4::text = 'running' THEN $5::bigint END, $6::bigint, now(),
           CASE WHEN $4::text = 'running' THEN now() END,
           CASE WHEN $4::text <> 'running' THEN now() END,
           nullif($7::text, '')
      FROM adv
    ON CONFLICT ("job", "tick") DO NOTHING
    RETURNING 1
), trim AS (
    DELETE FROM {{runs}} AS r
     WHERE EXISTS (SELECT 1 FROM adv) AND r."job" = $1::text AND r."status" <> 'running'
       AND r."tick" < (SELECT k."tick" FROM {{runs}} AS k WHERE k."job" = $1::text
                        ORDER BY k."tick" DESC OFFSET greatest($8::int - 1, 0) LIMIT 1)
), durable AS (
    -- A claimed tick lost in a crash or a failover could run twice: the
    -- commit waits for the WAL flush (and for synchronous standbys, as
    -- configured) even where a role, a database or the connection turned
    -- synchronous_commit off or to local; stronger settings are kept. The
    -- statement's result references this CTE, so it is evaluated.
    SELECT set_config('synchronous_commit',
                      CASE WHEN current_setting('synchronous_commit') IN ('off', 'local') THEN 'on'
                           ELSE current_setting('synchronous_commit') END,
                      true) AS ok
      FROM adv
)
SELECT EXISTS (SELECT 1 FROM adv),
       (SELECT j."last_tick" FROM {{jobs}} AS j WHERE j."job" = $1::text), clock_timestamp()
  FROM (SELECT count(*) FROM durable) AS d

-- name: AwaitClaims
-- $1 job. Waits for the claims of the job that the server is running (they
-- hold its row) to commit or roll back: run before ClaimedTick, in a
-- statement of its own, since a statement reads with the snapshot it
-- started with.
SELECT 1 FROM {{jobs}} AS j WHERE j."job" = $1::text FOR SHARE

-- name: ClaimedTick
-- $1 job, $2 tick, $3 the claimer's token. After a 'running' claim whose
-- reply was lost (the connection failed after the statement was sent):
-- whether it was made, that is whether the tick's row is running under $3;
-- then the job's last tick and the server's time.
SELECT EXISTS (SELECT 1 FROM {{runs}} AS r
                WHERE r."job" = $1::text AND r."tick" = $2::timestamptz
                  AND r."token" = $3::bigint AND r."status" = 'running'),
       j."last_tick", clock_timestamp()
  FROM {{jobs}} AS j WHERE j."job" = $1::text

-- name: FinishRun
-- $1 job, $2 tick, $3 the runner's token, $4 status, $5 error text. Only
-- the runner that still owns the row (by token) ends it: a row another
-- replica has since abandoned or retried is left alone.
UPDATE {{runs}} SET "status" = $4::text, "ended_at" = now(), "error" = nullif($5::text, '')
 WHERE "job" = $1::text AND "tick" = $2::timestamptz AND "token" = $3::bigint AND "status" = 'running'

-- name: OrphanedRuns
-- $1 job, $2 the names of the job's lease rows (pglease.Config.Plan), $3
-- how many attempts the abandoned-run policy allows in all. The runs whose
-- runner no longer holds the job's lease, by the server's clock: rows still
-- marked running, and rows marked lost (their lease ended while they ran)
-- with attempts left, whose token no unexpired row of $2 carries. A run is
-- judged by its own lease row, never by the caller's: whatever the caller
-- holds, a run whose holder's row lives is not an orphan.
SELECT r."tick", r."token", r."replica", r."attempt", r."status" FROM {{runs}} AS r
 WHERE r."job" = $1::text
   AND (r."status" = 'running' OR (r."status" = 'lost' AND r."attempt" < $3::int))
   AND NOT EXISTS (SELECT 1 FROM {{leases}} AS l
                    WHERE l."name" = ANY($2::text[]) AND l."token" = r."token" AND l."expires_at" > now())
 ORDER BY r."tick"

-- name: AbandonRun
-- $1 job, $2 tick, $3 the runner's token, $4 error text.
UPDATE {{runs}} SET "status" = 'abandoned', "ended_at" = now(), "error" = $4::text
 WHERE "job" = $1::text AND "tick" = $2::timestamptz AND "token" = $3::bigint AND "status" = 'running'

-- name: RetryRun
-- $1 job, $2 tick, $3 the token of the runner that died or lost its lease,
-- $4 the new runner's token, $5 the new replica, $6 the names of the job's
-- lease rows. The row (running, or lost) runs again, under the job's lease
-- as a claim is made (ClaimTick): only while a row of $6 carries $4
-- unexpired by the server's clock. Returns the attempt number; no row when
-- the run was taken over already or the new runner's lease has ended.
UPDATE {{runs}} SET "status" = 'running', "token" = $4::bigint, "replica" = $5::text,
                    "attempt" = "attempt" + 1, "started_at" = now(), "ended_at" = NULL, "error" = NULL
 WHERE "job" = $1::text AND "tick" = $2::timestamptz AND "token" = $3::bigint
   AND "status" IN ('running', 'lost')
   AND EXISTS (SELECT 1 FROM {{leases}} AS l
                WHERE l."name" = ANY($6::text[]) AND l."token" = $4::bigint AND l."expires_at" > now())
RETURNING "attempt"

-- name: Runs
-- $1 job, $2 how many: the newest runs first.
SELECT r."job", r."tick", r."status", r."replica", coalesce(r."token", 0), r."attempt", r."missed",
       r."claimed_at", r."started_at", r."ended_at", coalesce(r."error", '')
  FROM {{runs}} AS r WHERE r."job" = $1::text ORDER BY r."tick" DESC LIMIT $2::int

-- name: Jobs
-- Every job with its last tick claimed and its newest run.
SELECT j."job", j."schedule", j."last_tick", j."seen_at",
       r."tick", coalesce(r."status", ''), coalesce(r."replica", ''),
       coalesce(r."token", 0), coalesce(r."attempt", 0), coalesce(r."missed", 0),
       r."claimed_at", r."started_at", r."ended_at", coalesce(r."error", '')
  FROM {{jobs}} AS j
  LEFT JOIN LATERAL (SELECT * FROM {{runs}} AS x WHERE x."job" = j."job"
                      ORDER BY x."tick" DESC LIMIT 1) AS r ON true
 ORDER BY j."job"

-- name: JobTablesExist
-- $1 the jobs table, $2 the runs table, as to_regclass reads them.
SELECT to_regclass($1::text) IS NOT NULL AND to_regclass($2::text) IS NOT NULL
