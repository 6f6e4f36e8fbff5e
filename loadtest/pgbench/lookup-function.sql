-- The benchmark table's lookup function under a fixed name, with the body
-- the service gives warmcache_lookup_<digest> (StatementSet.LookupFunction).
DROP FUNCTION IF EXISTS wc_lookup(bigint[]);
CREATE FUNCTION wc_lookup(bigint[])
RETURNS TABLE (warmcache_position bigint, warmcache_value text, warmcache_version bigint)
LANGUAGE plpgsql STABLE AS $warmcache_lookup$
BEGIN
RETURN QUERY SELECT k.i, t."value"::text, t."version" FROM unnest($1::bigint[]) WITH ORDINALITY AS k(key, i) JOIN "widgets" AS t ON t."key" = k.key;
END
$warmcache_lookup$;
