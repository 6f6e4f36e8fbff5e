{{- /*
The table of one managed namespace. The data is schema.tableData: every
identifier in it is already quoted, and every clause that depends on the
dialect (primary key, WITH options, partitioning, distribution, compression,
indexes) is chosen in internal/schema/table.go by the rules of
internal/dialect; an empty clause is left out.
The compression is set before the partitions are created, which inherit it:
SET COMPRESSION on a partitioned table does not reach existing partitions.
*/ -}}
-- Table of namespace {{printf "%q" .Namespace}} ({{.Dialect}}).
{{- range .Notes}}
-- {{.}}
{{- end}}
CREATE TABLE {{.Table}} (
{{- range $i, $c := .Columns}}{{if $i}},{{end}}
    {{$c.Name}} {{$c.Type}} NOT NULL
{{- end}}
{{- with .PrimaryKey}},
    PRIMARY KEY ({{.}})
{{- end}}
)
{{- with .With}}
WITH ({{.}})
{{- end}}
{{- with .PartitionBy}}
PARTITION BY HASH ({{.}})
{{- end}}
{{- with .DistributedBy}}
DISTRIBUTED BY ({{.}})
{{- end}};
{{- if .CompressColumns}}
-- TOAST compresses only values over about 2 kB: smaller values are stored
-- uncompressed whatever the column's compression says.
ALTER TABLE {{.Table}}
{{- range $i, $c := .CompressColumns}}{{if $i}},{{end}}
    ALTER COLUMN {{$c}} SET COMPRESSION {{$.Compression}}
{{- end}};
{{- end}}
{{- range .Partitions}}
CREATE TABLE {{.Name}} PARTITION OF {{$.Table}} FOR VALUES WITH (MODULUS {{.Modulus}}, REMAINDER {{.Remainder}});
{{- end}}
{{- with .KeyIndex}}
CREATE INDEX {{.Name}} ON {{$.Table}} ({{.Column}});
{{- end}}
{{- with .GINIndex}}
CREATE INDEX {{.Name}} ON {{$.Table}} USING gin ({{.Column}} jsonb_path_ops);
{{- end}}
