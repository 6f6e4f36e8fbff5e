-- Every write takes its row version from this sequence, so versions grow
-- across all namespaces and the cache can order fills and invalidations.
-- CACHE 1 is spelled out: Greenplum gives a sequence without a CACHE clause
-- CACHE 20, and each session then hands out values from its own block
-- (1, 21, 41, ...), so versions drawn on different connections go backwards.
CREATE SEQUENCE IF NOT EXISTS warmcache_version_seq CACHE 1;
