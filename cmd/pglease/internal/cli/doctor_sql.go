package cli

// The statements of pglease doctor. They read the catalog and the
// settings only, so that any role that may connect can run them; table
// names come as parameters, never spliced in.

const (
	// doctorTableSQL: $1 the table as --table gives it. The role, the
	// table's schema (where it is, else where it would be created: the
	// schema named, or the first of the search_path), its name in it, and
	// whether it exists, found in the catalog (which any role may read,
	// also without USAGE on the schema).
	doctorTableSQL = `
WITH t AS (
  SELECT CASE WHEN strpos($1::text, '.') > 0 THEN split_part($1::text, '.', 1) END AS s,
         CASE WHEN strpos($1::text, '.') > 0 THEN split_part($1::text, '.', 2) ELSE $1::text END AS r
)
SELECT current_user::text, coalesce(x.nspname::text, t.s, current_schema()::text, ''), t.r, x.nspname IS NOT NULL
FROM t
LEFT JOIN LATERAL (
  SELECT n.nspname
  FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
  WHERE c.relname = t.r AND c.relkind IN ('r', 'p')
    AND (n.nspname = t.s OR (t.s IS NULL AND n.nspname = ANY (current_schemas(false))))
  ORDER BY array_position(current_schemas(false), n.nspname) NULLS FIRST
  LIMIT 1
) x ON true`

	// doctorSchemaSQL: $1 a schema. Whether it exists, the role's USAGE
	// and CREATE on it, and CREATE on the database (to create it).
	doctorSchemaSQL = `
SELECT n.oid IS NOT NULL,
       coalesce(has_schema_privilege(n.oid, 'USAGE'), false),
       coalesce(has_schema_privilege(n.oid, 'CREATE'), false),
       has_database_privilege(current_database(), 'CREATE')
FROM (SELECT 1) one
LEFT JOIN pg_catalog.pg_namespace n ON n.nspname = $1::text`

	// doctorPrivilegesSQL: $1 the table's schema, $2 its name. A GRANT
	// statement for each privilege the role lacks on an object of the
	// table that exists ({role} stands for the role): the lease, waiters,
	// jobs and runs tables, the token sequence and the functions (not the
	// fence's trigger function, nor the incarnation table, which its
	// SECURITY DEFINER function reads). See docs/OPERATIONS.md.
	doctorPrivilegesSQL = `
WITH ns AS (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = $1::text)
SELECT format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %I.%I TO {role};', $1::text, c.relname)
FROM pg_catalog.pg_class c JOIN ns ON c.relnamespace = ns.oid
WHERE c.relkind IN ('r', 'p')
  AND c.relname IN ($2::text, $2::text || '_waiters', $2::text || '_jobs', $2::text || '_runs')
  AND NOT (has_table_privilege(c.oid, 'SELECT') AND has_table_privilege(c.oid, 'INSERT')
       AND has_table_privilege(c.oid, 'UPDATE') AND has_table_privilege(c.oid, 'DELETE'))
UNION ALL
SELECT format('GRANT USAGE ON SEQUENCE %I.%I TO {role};', $1::text, c.relname)
FROM pg_catalog.pg_class c JOIN ns ON c.relnamespace = ns.oid
WHERE c.relkind = 'S' AND c.relname = $2::text || '_token_seq' AND NOT has_sequence_privilege(c.oid, 'USAGE')
UNION ALL
SELECT format('GRANT EXECUTE ON FUNCTION %s TO {role};', p.oid::regprocedure)
FROM pg_catalog.pg_proc p JOIN ns ON p.pronamespace = ns.oid
WHERE left(p.proname, length($2::text) + 1) = $2::text || '_'
  AND p.prorettype <> 'pg_catalog.trigger'::regtype
  AND NOT has_function_privilege(p.oid, 'EXECUTE')`

	// doctorTimeoutsSQL: the session's idle_session_timeout (0 before
	// PostgreSQL 14, which has none), idle_in_transaction_session_timeout
	// and statement_timeout, in milliseconds, and its TCP keep-alive
	// settings (tcp_keepalives_idle and _interval in seconds, _count; 0:
	// the operating system's default, or a Unix socket).
	doctorTimeoutsSQL = `
SELECT coalesce((SELECT setting::bigint FROM pg_catalog.pg_settings WHERE name = 'idle_session_timeout'), 0),
       (SELECT setting::bigint FROM pg_catalog.pg_settings WHERE name = 'idle_in_transaction_session_timeout'),
       (SELECT setting::bigint FROM pg_catalog.pg_settings WHERE name = 'statement_timeout'),
       current_setting('tcp_keepalives_idle')::int, current_setting('tcp_keepalives_interval')::int,
       current_setting('tcp_keepalives_count')::int`

	// doctorReplicationSQL: synchronous_commit, synchronous_standby_names
	// and how many standbys stream from this server.
	doctorReplicationSQL = `
SELECT current_setting('synchronous_commit'), current_setting('synchronous_standby_names'),
       (SELECT count(*)::int FROM pg_catalog.pg_stat_replication)`

	// doctorHeadroomSQL: how many more connections the server, the
	// database and the role have room for (the least), how many client
	// connections the server has, and the limits that apply.
	doctorHeadroomSQL = `
WITH s AS (
  SELECT current_setting('max_connections')::int
           - current_setting('superuser_reserved_connections')::int
           - coalesce((SELECT setting::int FROM pg_catalog.pg_settings WHERE name = 'reserved_connections'), 0) AS server_max,
         (SELECT count(*)::int FROM pg_catalog.pg_stat_activity WHERE backend_type = 'client backend') AS used,
         (SELECT count(*)::int FROM pg_catalog.pg_stat_activity WHERE backend_type = 'client backend' AND datname = current_database()) AS db_used,
         (SELECT count(*)::int FROM pg_catalog.pg_stat_activity WHERE backend_type = 'client backend' AND usename = current_user) AS role_used,
         (SELECT datconnlimit FROM pg_catalog.pg_database WHERE datname = current_database()) AS db_limit,
         (SELECT rolconnlimit FROM pg_catalog.pg_roles WHERE rolname = current_user) AS role_limit
)
SELECT least(server_max - used,
             CASE WHEN db_limit >= 0 THEN db_limit - db_used END,
             CASE WHEN role_limit >= 0 THEN role_limit - role_used END),
       used,
       concat_ws(', ', 'max_connections ' || current_setting('max_connections'),
                 CASE WHEN db_limit >= 0 THEN 'database limit ' || db_limit END,
                 CASE WHEN role_limit >= 0 THEN 'role limit ' || role_limit END)
FROM s`
)
