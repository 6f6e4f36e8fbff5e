-- Every write takes its row version from this sequence, so versions grow
-- across all namespaces and the cache can order fills and invalidations.
CREATE SEQUENCE IF NOT EXISTS warmcache_version_seq;
