-- 1 random keys through the lookup function.
\set k0 random(1, 1000000)
SELECT * FROM wc_lookup(ARRAY[:k0]::bigint[]);
