DROP TABLE IF EXISTS warmcache_dictionaries;
