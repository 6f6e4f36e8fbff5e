{{- if eq .Dialect "postgres"}}
ALTER PUBLICATION warmcache_changes DROP TABLE {{.Table}};
DROP TRIGGER IF EXISTS {{.Trigger "truncate"}} ON {{.Table}};
DROP TRIGGER IF EXISTS {{.Trigger "deletes"}} ON {{.Table}};
DROP TRIGGER IF EXISTS {{.Trigger "version"}} ON {{.Table}};
{{- end}}
DELETE FROM warmcache_generations WHERE namespace = {{.NamespaceLiteral}};
DROP INDEX IF EXISTS {{.VersionIndexQualified}};
ALTER TABLE {{.Table}} ALTER COLUMN {{.VersionColumn}} DROP DEFAULT;
