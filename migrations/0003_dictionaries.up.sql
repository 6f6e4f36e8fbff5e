-- The zstd dictionaries of the hot tier's zstd-dict codec, one row per
-- dictionary and namespace (warmcache dict train). The id is derived from the
-- dictionary's content and starts every value compressed with it; the newest
-- dictionary of a namespace encodes, and all of them decode.
{{- if eq .Dialect "greenplum"}}
-- A heap table whatever the server's default storage, so that it can have
-- its primary key; a handful of rows, on the segment of their namespace.
{{- end}}
CREATE TABLE IF NOT EXISTS warmcache_dictionaries (
    namespace text NOT NULL,
    id bigint NOT NULL,
    dict bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, id)
)
{{- if eq .Dialect "greenplum"}}
WITH (appendoptimized=false)
DISTRIBUTED BY (namespace)
{{- end}};
