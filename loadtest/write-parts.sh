#!/bin/bash
# write-parts.sh [ROUNDS]: what each part of a PUT's write function costs the
# warehouse (docs/performance.md#where-a-puts-time-goes). On the database that
# make bench fills (warmcache_bench, after a run of its write scenarios, which
# creates the write function of widgets), it runs pgbench through the local
# stack's PgBouncer, 16 clients, 5 s each, in ROUNDS rounds (default 3) of:
#   upsert      the bench's reference: INSERT ... ON CONFLICT DO UPDATE with nextval
#   lock-first  the earlier write function (loadtest/write-parts/lock-first.sql):
#               the table's and the key's advisory locks, the row lock
#               (SELECT ... FOR UPDATE), nextval, the upsert, RETURNS TABLE
#   no-row-lock lock-first without its row lock
#   function    the write function as the service calls it for a PUT: update
#               first, the key's lock only for an insert or a delete, OUT
#               parameters (docs/consistency.md#how-reads-and-writes-work)
#   copy        the function on a copy of widgets (8 hash partitions, the key
#               and version indexes, fillfactor 100, no triggers)
#   hot         the function on a copy with fillfactor 90 and no version
#               index, as a namespace followed by change capture alone could
#               have: its updates can be HOT (heap-only tuples)
#   fold-calls  a fold of FOLD writes (default 8) as the service sent it
#               before: BEGIN, one call of the function per write, COMMIT,
#               in one round trip (a pgbench pipeline)
#   fold        a fold as the service sends it: one statement calling the
#               function for each write over unnest of arrays (FoldCall)
# A fold's keys come one from each of FOLD equal ranges of the keys, in
# order, as the service orders a fold's writes (by lock hash), so that two
# folds cannot deadlock. Every rate is of writes: a fold's transactions/s
# times FOLD.
# PostgreSQL (the postmaster and its backends) and PgBouncer on CPU 0, pgbench
# on CPU 1, so that each rate is what one core of the warehouse's side
# sustains. The variants live in a schema of their own (wc_parts), dropped at
# the end; the share of HOT updates of each copy comes from
# pg_stat_user_tables (n_tup_hot_upd / n_tup_upd) after the rounds.
#
#   loadtest/write-parts.sh 3
#   FOLD=16 loadtest/write-parts.sh 3
set -euo pipefail
export PGOPTIONS="-c client_min_messages=warning"
rounds=${1:-3}
pg=${WARMCACHE_STACK_PG_ADDR:-127.0.0.1:55432}
bouncer=${WARMCACHE_STACK_PGBOUNCER_ADDR:-127.0.0.1:56432}
direct="postgres://postgres@$pg/warmcache_bench?sslmode=disable"
pooled="postgres://postgres@$bouncer/warmcache_bench?sslmode=disable"
work=$(mktemp -d)
trap 'rm -rf "$work"; psql -X "$direct" -qc "DROP SCHEMA IF EXISTS wc_parts CASCADE" >/dev/null 2>&1 || true' EXIT

fn=$(psql -X "$direct" -Atc "SELECT p.oid::regprocedure FROM pg_proc p
  WHERE p.proname LIKE 'warmcache\\_write\\_%' AND p.prosrc LIKE '%FROM \"widgets\" AS t%'
  AND 'o' = ANY(p.proargmodes) ORDER BY p.oid DESC LIMIT 1")
[[ -n $fn ]] || { echo "write-parts.sh: no write function of widgets in warmcache_bench: run make bench's write scenarios first" >&2; exit 1; }
name=${fn%%(*}
def=$(psql -X "$direct" -Atc "SELECT pg_get_functiondef('$fn'::regprocedure)")
psql -X "$direct" -qc "DROP SCHEMA IF EXISTS wc_parts CASCADE" -c "CREATE SCHEMA wc_parts" >/dev/null
here=$(dirname "$0")/write-parts
psql -X "$direct" -q -v ON_ERROR_STOP=1 -f "$here/lock-first.sql" >/dev/null
sed '/FOREACH wc\$row IN ARRAY/,/END LOOP;/d; s/wc_parts\.lock_first(/wc_parts.no_row_lock(/' "$here/lock-first.sql" | psql -X "$direct" -q -v ON_ERROR_STOP=1 >/dev/null
# copy NAME FILLFACTOR VERSION_INDEX: widgets copied as wc_parts.NAME, and the
# service's function on it as wc_parts.NAME_write
copy() {
	local i
	{
		echo "CREATE TABLE wc_parts.$1 (LIKE widgets INCLUDING DEFAULTS) PARTITION BY HASH (key);"
		for i in 0 1 2 3 4 5 6 7; do
			echo "CREATE TABLE wc_parts.$1_p$i PARTITION OF wc_parts.$1 FOR VALUES WITH (MODULUS 8, REMAINDER $i) WITH (fillfactor = $2);"
		done
		echo "ALTER TABLE wc_parts.$1 ADD PRIMARY KEY (key);"
		[[ $3 == yes ]] && echo "CREATE INDEX ON wc_parts.$1 (version);"
		echo "INSERT INTO wc_parts.$1 SELECT * FROM widgets; VACUUM ANALYZE wc_parts.$1;"
	} | psql -X "$direct" -q -v ON_ERROR_STOP=1 >/dev/null
	printf '%s\n' "$def" | sed -e "s/FUNCTION public\.$name(/FUNCTION wc_parts.$1_write(/" -e "s/\"widgets\"/wc_parts.$1/g" |
		psql -X "$direct" -q -v ON_ERROR_STOP=1 >/dev/null
}
copy copy 100 yes
copy hot 90 no

doc=$(psql -X "$direct" -Atc "SELECT value::text FROM widgets WHERE key = 1")
lit="'${doc//\'/\'\'}'"
rows=$(psql -X "$direct" -Atc "SELECT max(key) FROM widgets")
# call FUNCTION ROW_KEYS: a PUT of a random key as the service calls it
call() { printf '\\set k random(1, %s)\nSELECT * FROM %s(:k, %s, NULL, false, NULL, false, 1, ARRAY[:k]::bigint[], %s);\n' "$rows" "$1" "$lit" "$2"; }
printf '\\set k random(1, %s)\nINSERT INTO widgets (key, value, version) VALUES (:k, %s::jsonb, nextval(%s))\nON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = EXCLUDED.version;\n' \
	"$rows" "$lit" "'warmcache_version_seq'" >"$work/upsert.sql"
call wc_parts.lock_first 'ARRAY[:k]::bigint[]' >"$work/lock-first.sql"
call wc_parts.no_row_lock 'ARRAY[:k]::bigint[]' >"$work/no-row-lock.sql"
call "$name" "'{}'::bigint[]" >"$work/function.sql"
call wc_parts.copy_write "'{}'::bigint[]" >"$work/copy.sql"
call wc_parts.hot_write "'{}'::bigint[]" >"$work/hot.sql"
# The folds: FOLD keys, the i-th drawn from the i-th of FOLD equal ranges.
fold=${FOLD:-8}
keys=""
args=""
for i in $(seq "$fold"); do
	keys+=$(printf '\\set k%d random(%d, %d)' "$i" $(( (i - 1) * rows / fold + 1 )) $(( i * rows / fold )))$'\n'
	args+=":k$i,"
done
{
	printf '%s\\startpipeline\nBEGIN;\n' "$keys"
	for i in $(seq "$fold"); do
		printf "SELECT * FROM %s(:k%d, %s, NULL, false, NULL, false, 1, ARRAY[:k%d]::bigint[], '{}'::bigint[]);\n" "$name" "$i" "$lit" "$i"
	done
	printf 'COMMIT;\n\\endpipeline\n'
} >"$work/fold-calls.sql"
{
	printf '%s' "$keys"
	printf "SELECT w.* FROM unnest(ARRAY[%s]::bigint[]) WITH ORDINALITY AS a(key, i), LATERAL %s(a.key, %s, NULL, false, NULL, false, 1, ARRAY[a.key], '{}'::bigint[]) AS w ORDER BY a.i;\n" "${args%,}" "$name" "$lit"
} >"$work/fold.sql"
declare -A per=([fold-calls]=$fold [fold]=$fold)

# pin MASK: the local stack's PostgreSQL (its postmaster and every backend)
# and PgBouncer on the CPUs of MASK; a backend forked later inherits it.
datadir=$(psql -X "$direct" -Atc "SHOW data_directory")
. "$(dirname "$0")/pin/pin.sh"
pin() {
	local pm
	pm=$(head -n1 "$datadir/postmaster.pid")
	pin_pids "$1" "$pm" $(pgrep -P "$pm") $(pgrep -x pgbouncer)
}
pin 1
trap 'pin "$all_cpus"; rm -rf "$work"; psql -X "$direct" -qc "DROP SCHEMA IF EXISTS wc_parts CASCADE" >/dev/null 2>&1 || true' EXIT

declare -A sum
parts=(upsert lock-first no-row-lock function copy hot fold-calls fold)
for r in $(seq "$rounds"); do
	for p in "${parts[@]}"; do
		tps=$(env -u PGOPTIONS taskset -c 1 pgbench -n -M extended -c 16 -j 2 -T 5 -f "$work/$p.sql" "$pooled" 2>"$work/$p.err" | awk '/^tps/ {printf "%d", $3}' || true)
		[[ -n $tps ]] || { echo "write-parts.sh: pgbench of $p failed:" >&2; tail -3 "$work/$p.err" >&2; exit 1; }
		tps=$(( tps * ${per[$p]:-1} ))
		sum[$p]=$(( ${sum[$p]:-0} + tps ))
		echo "round $r: $p $tps writes/s"
	done
done
echo
echo "| what | writes/s (mean of $rounds) | × the upsert |"
echo "|---|---:|---:|"
for p in "${parts[@]}"; do
	awk -v p="$p" -v s="${sum[$p]}" -v u="${sum[upsert]}" -v n="$rounds" 'BEGIN { printf "| %s | %d | %.2f |\n", p, s / n, s / u }'
done
echo
for c in copy hot; do
	psql -X "$direct" -Atc "SELECT '$c: ' || sum(n_tup_hot_upd) || ' of ' || sum(n_tup_upd) || ' updates HOT'
	  FROM pg_stat_user_tables WHERE schemaname = 'wc_parts' AND relname LIKE '${c}_p%'"
done
