-- What keeps the cache fresh after writes that bypass it.
--
-- warmcache_generations: one row per namespace. Bumping a namespace's
-- generation retires every cached entry of the namespace at once: the
-- generation is part of every Redis key, and every instance reads this table
-- (a batch job bumps it after reloading a table).
--
-- warmcache_deletes: the keys deleted outside the service, each with a new
-- version, read by the watermark poll and the change capture; a delete in
-- the cache is an absent entry at that version. Rows older than an hour are
-- pruned by the service.
{{- if eq .Dialect "greenplum"}}
-- Greenplum has no triggers on distributed tables: a writer that deletes
-- rows inserts their keys here in the same transaction.
{{- end}}
CREATE TABLE IF NOT EXISTS warmcache_generations (
    namespace text NOT NULL,
    generation bigint NOT NULL DEFAULT 0,
    bumped_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace)
)
{{- if eq .Dialect "greenplum"}}
WITH (appendoptimized=false)
DISTRIBUTED BY (namespace)
{{- end}};
CREATE TABLE IF NOT EXISTS warmcache_deletes (
    namespace text NOT NULL,
    key text NOT NULL,
    version bigint NOT NULL DEFAULT nextval('warmcache_version_seq'),
    deleted_at timestamptz NOT NULL DEFAULT now()
)
{{- if eq .Dialect "greenplum"}}
WITH (appendoptimized=false)
DISTRIBUTED BY (namespace, key)
{{- end}};
CREATE INDEX IF NOT EXISTS warmcache_deletes_version_idx ON warmcache_deletes (version);
{{- if eq .Dialect "postgres"}}
-- The delete log is published (for its inserts); pruning it deletes rows,
-- which a published table allows only with a replica identity.
ALTER TABLE warmcache_deletes REPLICA IDENTITY FULL;
-- An UPDATE that leaves the version as it was gets a new one (TG_ARGV: the
-- version column); the trigger fires only for such updates.
CREATE OR REPLACE FUNCTION warmcache_new_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW := jsonb_populate_record(NEW, jsonb_build_object(TG_ARGV[0], nextval('warmcache_version_seq')));
    RETURN NEW;
END $$;
-- A DELETE logs its keys (TG_ARGV: namespace, key column) once per statement.
CREATE OR REPLACE FUNCTION warmcache_log_deletes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('INSERT INTO warmcache_deletes (namespace, key) SELECT %L, %I::text FROM warmcache_gone',
        TG_ARGV[0], TG_ARGV[1]);
    RETURN NULL;
END $$;
-- A TRUNCATE bumps the namespace's generation (TG_ARGV: namespace).
CREATE OR REPLACE FUNCTION warmcache_bump_generation() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO warmcache_generations AS g (namespace, generation) VALUES (TG_ARGV[0], 1)
    ON CONFLICT (namespace) DO UPDATE SET generation = g.generation + 1, bumped_at = now();
    RETURN NULL;
END $$;
-- The change capture's publication: the managed namespace tables join it as
-- they are created; partitioned tables publish under their own name.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'warmcache_changes') THEN
        CREATE PUBLICATION warmcache_changes FOR TABLE warmcache_generations, warmcache_deletes
            WITH (publish_via_partition_root = true);
    END IF;
END $$;
{{- end}}
