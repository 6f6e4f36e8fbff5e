-- Sample data for the local stack: 100,000 widgets, keys 1..100000.
--
-- Run after `warmcache migrate up` (which creates the hash-partitioned table
-- widgets(key bigint primary key, value jsonb, version bigint) and the
-- sequence warmcache_version_seq), as `make run` does with
-- `bin/localstack seed deploy/local/sample-widgets.sql`: plain SQL, run as
-- one transaction.
--
-- Idempotent: keys that already exist are left alone, and only new rows take a
-- version from the sequence, so running it again changes nothing.
--
-- The value is the "Sample Konfabulator Widget" JSON document from a Greenplum
-- blog post, with widget.id set to the key as a string (key 42 -> "id": "42").

INSERT INTO widgets (key, value, version)
SELECT g.key,
       jsonb_set(doc.value, '{widget,id}', to_jsonb(g.key::text)),
       nextval('warmcache_version_seq')
FROM generate_series(1::bigint, 100000::bigint) AS g(key)
CROSS JOIN (SELECT '{"widget": {
    "debug": "on",
    "id": "",
    "window": {
        "title": "Sample Konfabulator Widget",
        "name": "main_window",
        "width": 500,
        "height": 500
    },
    "image": {
        "src": "Images/Sun.png",
        "name": "sun1",
        "hOffset": 250,
        "vOffset": 250,
        "alignment": "center"
    },
    "text": {
        "data": "Click Here",
        "size": 36,
        "style": "bold",
        "name": "text1",
        "hOffset": 250,
        "vOffset": 100,
        "alignment": "center",
        "onMouseUp": "sun1.opacity = (sun1.opacity / 100) * 90;"
    }
}}'::jsonb AS value) AS doc
-- Skip existing keys before nextval() runs, so reruns don't burn versions;
-- ON CONFLICT still covers a concurrent seed.
WHERE NOT EXISTS (SELECT 1 FROM widgets w WHERE w.key = g.key)
ORDER BY g.key
ON CONFLICT (key) DO NOTHING;

ANALYZE widgets;

SELECT count(*) AS widgets, min(key) AS min_key, max(key) AS max_key FROM widgets;
