-- Statements of leasehold's Postgres migrator (migrate.go), not of the
-- coordination: they run on goose's migration connection, before goose's
-- own statements, and decide nothing between nodes. The migration lock
-- itself is goose's (lock.NewPostgresSessionLocker, pg_try_advisory_lock
-- and pg_advisory_unlock); its SQL lives in goose, its key comes from here.

-- name: MigrationSchema :one
-- Which schema goose's unqualified statements will use (current_schema(),
-- NULL when the search_path selects none), the key of that schema's
-- migration lock, and the first schema the
-- configured search_path lists before that one (or at all, when it is NULL)
-- which exists but which the role has no USAGE privilege on.
--
-- Postgres leaves such a schema out of the effective search_path without a
-- word. goose then finds leasehold_schema_version in pg_tables (which lists
-- every schema), queries it unqualified and reports `relation
-- "leasehold_schema_version" does not exist`; or, with a usable schema
-- later in the path, creates a second leasehold schema there. Naming the
-- missing privilege instead is what this statement is for.
--
-- lock_key is hashtextextended('leasehold.migrate:' || current_schema(), 0),
-- built like TryMaintenanceLock's key: one lock per schema the migrations
-- would create their tables in, whatever spelling of the search_path led
-- there ("app" and "app, public" give one key), so installations in
-- different schemas of one database never wait for each other, and one
-- schema is migrated by one session at a time. Its text prefix keeps it
-- apart from goose's default key (crc32 of "goose"), which an application's
-- own goose migrations take.
--
-- The search_path setting is split on commas (a schema name holding a comma
-- is not recognised, and then only the clear message is lost); "$user" is
-- the current role, a quoted name is taken verbatim, an unquoted one folded
-- to lower case, as Postgres resolves them.
WITH item AS (
    SELECT s.ord, btrim(s.raw) AS raw
    FROM unnest(string_to_array(current_setting('search_path'), ',')) WITH ORDINALITY AS s (raw, ord)
), path AS (
    SELECT ord,
           CASE
               WHEN raw IN ('$user', '"$user"') THEN current_user::text
               WHEN raw LIKE '"%"' THEN replace(substr(raw, 2, length(raw) - 2), '""', '"')
               ELSE lower(raw)
           END AS name
    FROM item
)
SELECT current_user::text AS role_name,
       current_setting('search_path') AS search_path,
       current_schema()::text AS current_schema,
       hashtextextended('leasehold.migrate:' || current_schema(), 0) AS lock_key,
       (SELECT p.name
        FROM path p
        JOIN pg_namespace n ON n.nspname = p.name
        WHERE NOT has_schema_privilege(n.oid, 'USAGE')
          AND p.ord < coalesce((SELECT min(q.ord) FROM path q WHERE q.name = current_schema()), 2147483647)
        ORDER BY p.ord
        LIMIT 1) AS unusable_schema;
