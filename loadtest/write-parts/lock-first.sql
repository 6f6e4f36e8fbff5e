-- The write function before it updated first (for loadtest/write-parts.sh):
-- every lock, then nextval, then the upsert; a set of one row.
CREATE OR REPLACE FUNCTION wc_parts.lock_first("wc$key" bigint, "wc$value" text, "wc$if_match" bigint, "wc$delete" boolean, "wc$ttl" bigint, "wc$absent_ok" boolean, "wc$table_lock" bigint, "wc$key_locks" bigint[], "wc$row_keys" bigint[])
 RETURNS TABLE("wc$out_value" text, "wc$out_version" bigint, "wc$out_expires" timestamp with time zone)
 LANGUAGE plpgsql
AS $function$
DECLARE
  wc$version bigint;
  wc$now timestamptz;
  wc$current bigint;
  wc$lock bigint;
  wc$row bigint;
BEGIN
  IF wc$table_lock IS NOT NULL THEN
    PERFORM pg_advisory_xact_lock_shared(wc$table_lock);
    FOREACH wc$lock IN ARRAY wc$key_locks LOOP
      PERFORM pg_advisory_xact_lock(wc$lock);
    END LOOP;
    FOREACH wc$row IN ARRAY wc$row_keys LOOP
      PERFORM 1 FROM "widgets" AS t WHERE t."key" = wc$row FOR UPDATE;
    END LOOP;
  END IF;
  wc$version := nextval('warmcache_version_seq');
  wc$now := clock_timestamp();
  IF wc$delete THEN
    IF wc$if_match IS NULL THEN
      DELETE FROM "widgets" AS t WHERE t."key" = wc$key::bigint AND (t."expires_at" IS NULL OR t."expires_at" > wc$now) RETURNING GREATEST(wc$version::bigint, t."version" + 1) INTO wc$out_version;
    ELSE
      DELETE FROM "widgets" AS t WHERE t."key" = wc$key::bigint AND t."version" + 0 = wc$if_match::bigint AND (t."expires_at" IS NULL OR t."expires_at" > wc$now) RETURNING GREATEST(wc$version::bigint, t."version" + 1) INTO wc$out_version;
    END IF;
  ELSIF wc$if_match IS NULL THEN
    INSERT INTO "widgets" AS t ("key", "value", "version", "expires_at") VALUES (wc$key::bigint, wc$value::jsonb, wc$version::bigint, date_trunc('milliseconds', wc$now + wc$ttl::bigint * interval '1 millisecond')) ON CONFLICT ("key") DO UPDATE SET "value" = EXCLUDED."value", "version" = GREATEST(EXCLUDED."version", t."version" + 1), "expires_at" = EXCLUDED."expires_at" RETURNING t."value"::text, t."version", t."expires_at" INTO wc$out_value, wc$out_version, wc$out_expires;
  ELSE
    UPDATE "widgets" AS t SET "value" = wc$value::jsonb, "version" = GREATEST(wc$version::bigint, t."version" + 1), "expires_at" = date_trunc('milliseconds', wc$now + wc$ttl::bigint * interval '1 millisecond') WHERE t."key" = wc$key::bigint AND t."version" + 0 = wc$if_match::bigint AND (t."expires_at" IS NULL OR t."expires_at" > wc$now) RETURNING t."value"::text, t."version", t."expires_at" INTO wc$out_value, wc$out_version, wc$out_expires;
  END IF;
  IF FOUND THEN
    RETURN NEXT;
    RETURN;
  END IF;
  IF NOT wc$delete THEN
    RAISE EXCEPTION 'the key is not at the expected version' USING ERRCODE = 'WC412';
  END IF;
  IF wc$if_match IS NULL THEN
    IF wc$absent_ok THEN
      RETURN;
    END IF;
    RAISE EXCEPTION 'the key does not exist' USING ERRCODE = 'WC404';
  END IF;
  SELECT "version" FROM "widgets" WHERE "key" = wc$key::bigint AND ("expires_at" IS NULL OR "expires_at" > wc$now) INTO wc$current;
  IF NOT FOUND AND NOT wc$absent_ok THEN
    RAISE EXCEPTION 'the key does not exist' USING ERRCODE = 'WC404';
  END IF;
  RAISE EXCEPTION 'the key is not at the expected version' USING ERRCODE = 'WC412';
END
$function$

;
