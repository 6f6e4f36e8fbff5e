{{- /*
The expiry of one managed namespace's rows (data: schema.tableData): a
nullable column that a write with a TTL sets to the warehouse's now() plus
the TTL, and an index on it, partial so that rows without a TTL cost it
nothing, through which the sweeper finds expired rows without a scan. A
row past its expiry reads as absent at once; the sweeper deletes it later.
*/ -}}
-- Expiry of namespace {{printf "%q" .Namespace}} ({{.Dialect}}).
ALTER TABLE {{.Table}} ADD COLUMN IF NOT EXISTS {{.ExpiresColumn}} timestamptz NULL;
CREATE INDEX {{.ExpiresIndex}} ON {{.Table}} ({{.ExpiresColumn}}) WHERE {{.ExpiresColumn}} IS NOT NULL;
