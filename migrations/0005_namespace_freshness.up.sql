{{- /*
What keeps one managed namespace fresh after writes that bypass the cache
(data: schema.tableData). Rows written in SQL take their version from the
sequence by default; the version index serves the watermark poll.
*/ -}}
-- Freshness of namespace {{printf "%q" .Namespace}} ({{.Dialect}}).
ALTER TABLE {{.Table}} ALTER COLUMN {{.VersionColumn}} SET DEFAULT nextval('warmcache_version_seq');
CREATE INDEX {{.VersionIndex}} ON {{.Table}} ({{.VersionColumn}});
INSERT INTO warmcache_generations (namespace) SELECT {{.NamespaceLiteral}}
WHERE NOT EXISTS (SELECT 1 FROM warmcache_generations WHERE namespace = {{.NamespaceLiteral}});
{{- if eq .Dialect "postgres"}}
CREATE TRIGGER {{.Trigger "version"}} BEFORE UPDATE ON {{.Table}} FOR EACH ROW
    WHEN (NEW.{{.VersionColumn}} = OLD.{{.VersionColumn}})
    EXECUTE FUNCTION warmcache_new_version({{.VersionColumnLiteral}});
CREATE TRIGGER {{.Trigger "deletes"}} AFTER DELETE ON {{.Table}} REFERENCING OLD TABLE AS warmcache_gone
    FOR EACH STATEMENT EXECUTE FUNCTION warmcache_log_deletes({{.NamespaceLiteral}}, {{.KeyColumnLiteral}});
CREATE TRIGGER {{.Trigger "truncate"}} AFTER TRUNCATE ON {{.Table}}
    FOR EACH STATEMENT EXECUTE FUNCTION warmcache_bump_generation({{.NamespaceLiteral}});
ALTER PUBLICATION warmcache_changes ADD TABLE {{.Table}};
{{- else}}
-- Greenplum has no triggers on distributed tables. A writer that updates
-- rows sets {{.VersionColumn}} = nextval('warmcache_version_seq'), and one that
-- deletes rows inserts their keys into warmcache_deletes in the same
-- transaction; a reload bumps the namespace's generation.
{{- end}}
