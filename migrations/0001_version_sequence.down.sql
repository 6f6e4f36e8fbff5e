DROP SEQUENCE IF EXISTS warmcache_version_seq;
