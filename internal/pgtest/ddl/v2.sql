-- pglease.DDL("pglease_fixture.leases") as printed at commit 3afeff6 (schema version 2),
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
    PRIMARY KEY ("name"),
    CHECK (octet_length("name") BETWEEN 1 AND 255),
    CHECK ("token" > 0)
);

COMMENT ON TABLE "pglease_fixture"."leases" IS 'pglease lease table, schema version 2';
