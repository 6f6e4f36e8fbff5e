#!/bin/bash
# write-parts.sh [ROUNDS]: what each part of a PUT's write function costs the
# warehouse (docs/performance.md#where-a-puts-time-goes). On the database that
# make bench fills (warmcache_bench, after a run of its write scenarios, which
# creates the write function of widgets), it runs pgbench through the local
# stack's PgBouncer, 16 clients, 5 s each, in ROUNDS rounds (default 3) of:
#   upsert      the bench's reference: INSERT ... ON CONFLICT DO UPDATE with nextval
#   no-locks    the write function without its advisory locks and its row lock
#   no-row-lock the write function without its row lock (SELECT ... FOR UPDATE)
#   function    the write function as the service calls it for a PUT
# PostgreSQL (the postmaster and its backends) and PgBouncer on CPU 0, pgbench
# on CPU 1, so that each rate is what one core of the warehouse's side
# sustains. The two variants are made from the function's own definition in a
# schema of their own (wc_parts), dropped at the end.
#
#   loadtest/write-parts.sh 3
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
  WHERE p.proname LIKE 'warmcache\\_write\\_%' AND p.prosrc LIKE '%FROM \"widgets\" AS t%' ORDER BY p.oid DESC LIMIT 1")
[[ -n $fn ]] || { echo "write-parts.sh: no write function of widgets in warmcache_bench: run make bench's write scenarios first" >&2; exit 1; }
name=${fn%%(*}
def=$(psql -X "$direct" -Atc "SELECT pg_get_functiondef('$fn'::regprocedure)")
psql -X "$direct" -qc "DROP SCHEMA IF EXISTS wc_parts CASCADE" -c "CREATE SCHEMA wc_parts" >/dev/null
# variant NAME SED: the function's definition, edited by SED, as wc_parts.NAME
variant() {
	printf '%s\n' "$def" | sed -e "s/FUNCTION public\.$name(/FUNCTION wc_parts.$1(/" -e "$2" >"$work/$1.sql"
	psql -X "$direct" -q -v ON_ERROR_STOP=1 -f "$work/$1.sql" >/dev/null
}
variant no_row_lock '/FOREACH wc\$row IN ARRAY/,/END LOOP;/d'
variant no_locks '/IF wc\$table_lock IS NOT NULL THEN/,/^  END IF;/d'

doc=$(psql -X "$direct" -Atc "SELECT value::text FROM widgets WHERE key = 1")
lit="'${doc//\'/\'\'}'"
rows=$(psql -X "$direct" -Atc "SELECT max(key) FROM widgets")
call() { printf '\\set k random(1, %s)\nSELECT * FROM %s(:k, %s, NULL, false, NULL, false, 1, ARRAY[:k]::bigint[], ARRAY[:k]::bigint[]);\n' "$rows" "$1" "$lit"; }
printf '\\set k random(1, %s)\nINSERT INTO widgets (key, value, version) VALUES (:k, %s::jsonb, nextval(%s))\nON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = EXCLUDED.version;\n' \
	"$rows" "$lit" "'warmcache_version_seq'" >"$work/upsert.sql"
call wc_parts.no_locks >"$work/no-locks.sql"
call wc_parts.no_row_lock >"$work/no-row-lock.sql"
call "$name" >"$work/function.sql"

# pin MASK: the local stack's PostgreSQL (its postmaster and every backend)
# and PgBouncer on the CPUs of MASK; a backend forked later inherits it.
datadir=$(psql -X "$direct" -Atc "SHOW data_directory")
pin() {
	local pm pid
	pm=$(head -n1 "$datadir/postmaster.pid")
	for pid in "$pm" $(pgrep -P "$pm") $(pgrep -x pgbouncer); do
		taskset -a -p "$1" "$pid" >/dev/null 2>&1 || true
	done
}
all=$(printf %x $(( (1 << $(nproc)) - 1 )))
pin 1
trap 'pin "$all"; rm -rf "$work"; psql -X "$direct" -qc "DROP SCHEMA IF EXISTS wc_parts CASCADE" >/dev/null 2>&1 || true' EXIT

declare -A sum
parts=(upsert no-locks no-row-lock function)
for r in $(seq "$rounds"); do
	for p in "${parts[@]}"; do
		tps=$(taskset -c 1 pgbench -n -M extended -c 16 -j 2 -T 5 -f "$work/$p.sql" "$pooled" 2>/dev/null | awk '/^tps/ {printf "%d", $3}')
		sum[$p]=$(( ${sum[$p]:-0} + tps ))
		echo "round $r: $p $tps/s"
	done
done
echo
echo "| what | statements/s (mean of $rounds) | × the upsert |"
echo "|---|---:|---:|"
for p in "${parts[@]}"; do
	awk -v p="$p" -v s="${sum[$p]}" -v u="${sum[upsert]}" -v n="$rounds" 'BEGIN { printf "| %s | %d | %.2f |\n", p, s / n, s / u }'
done
