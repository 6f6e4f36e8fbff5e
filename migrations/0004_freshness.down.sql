{{- if eq .Dialect "postgres"}}
DROP PUBLICATION IF EXISTS warmcache_changes;
DROP FUNCTION IF EXISTS warmcache_bump_generation();
DROP FUNCTION IF EXISTS warmcache_log_deletes();
DROP FUNCTION IF EXISTS warmcache_new_version();
{{- end}}
DROP TABLE IF EXISTS warmcache_deletes;
DROP TABLE IF EXISTS warmcache_generations;
