-- One random key, as the single-key Lookup and the bench's pgbench baseline.
\set k random(1, 1000000)
SELECT value::text, version FROM widgets WHERE key = :k;
