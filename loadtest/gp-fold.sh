#!/bin/bash
# gp-fold.sh [ROUNDS]: whether folding single-key writes into one transaction
# pays on Greenplum (docs/warehouse.md#folded-writes-on-greenplum). On a
# database of its own (wc_gpfold, dropped at the end) of the Greenplum kit
# (../shared/greenplum/up.sh; GP_DSN, default
# postgres://gpadmin@127.0.0.1:7000/postgres), it creates widgets (key bigint
# PRIMARY KEY, value jsonb, version bigint) DISTRIBUTED BY (key) with 100,000
# rows of a document of about 200 bytes, and runs pgbench -M simple (the
# protocol of loadtest/cmd/gpbench's reference), 16 clients, 5 s each, in
# ROUNDS rounds (default 3) of:
#   single            the reference: one upsert of a random key per
#                     transaction, the version passed in, so that the
#                     coordinator sends it to the key's segment alone and
#                     commits it there in one phase
#   fold-across       BEGIN, FOLD upserts (default 8) of random keys, COMMIT:
#                     the keys span the segments, so the commit is a
#                     two-phase one. -M simple refuses \startpipeline, so the
#                     transaction is one multi-statement query (pgbench's \;):
#                     one round trip, as pgx sends a batch in the simple
#                     protocol
#   fold-statement    one INSERT ... SELECT ... FROM unnest(ARRAY[keys],
#                     ARRAY[versions]) ON CONFLICT (key) DO UPDATE of FOLD
#                     random keys: the shape of warmcache's fold on
#                     PostgreSQL (one statement over unnest of arrays), a
#                     plain upsert in place of the write function
#   fold-across-sets  fold-across over fixed sets of FOLD keys, each set's
#                     keys spread over every segment
#   fold-one-segment  fold-across over fixed sets of FOLD keys, each set's
#                     keys on one segment (read from gp_segment_id), so the
#                     commit involves one segment
# The fixed sets (SETS of each, default 120: pgbench takes at most 128
# scripts) are disjoint and the same in number and size, one pgbench script
# each, so the two differ only in the segments a transaction spans; two
# clients on the same set wait for each other, as they do in both. Every
# rate is of writes: transactions/s times the writes in one. The keys of a
# transaction are in ascending order (the i-th random key is drawn from the
# i-th of FOLD equal ranges), so that two folds of statements cannot
# deadlock; a single statement's keys are written by each segment at once,
# which no order protects, and the failed transactions of each variant are
# reported. Before the rounds it prints EXPLAIN of each statement and where
# Greenplum dispatches each statement and commit of each shape
# (test_print_direct_dispatch_info).
# Every process of the cluster (the coordinator's and the segments'
# postmasters and their children) runs on CPU 0, pgbench on CPU 1; the
# cluster gets every CPU back at the end.
#
#   flock /tmp/warmcache-bench.lock loadtest/gp-fold.sh 3
#   FOLD=16 flock /tmp/warmcache-bench.lock loadtest/gp-fold.sh 3
set -euo pipefail
export PGOPTIONS="-c client_min_messages=warning"
rounds=${1:-3}
fold=${FOLD:-8}
sets=${SETS:-120}
rows=100000
admin=${GP_DSN:-postgres://gpadmin@127.0.0.1:7000/postgres}
admin=${admin%%\?*}
dsn="${admin%/*}/wc_gpfold?sslmode=disable"
admin="$admin?sslmode=disable"
work=$(mktemp -d)
dropdb() { psql -X "$admin" -qc "DROP DATABASE IF EXISTS wc_gpfold" >/dev/null 2>&1 || true; }
trap 'rm -rf "$work"; dropdb' EXIT
(( sets <= 128 )) || { echo "gp-fold.sh: SETS is at most 128 (pgbench's scripts)" >&2; exit 1; }

psql -X "$admin" -q -v ON_ERROR_STOP=1 -c "DROP DATABASE IF EXISTS wc_gpfold" -c "CREATE DATABASE wc_gpfold"
psql -X "$dsn" -q -v ON_ERROR_STOP=1 <<EOF
CREATE TABLE widgets (key bigint PRIMARY KEY, value jsonb NOT NULL, version bigint NOT NULL) DISTRIBUTED BY (key);
INSERT INTO widgets
SELECT k, jsonb_build_object('id', 'widget-' || lpad(k::text, 8, '0'), 'name', 'Widget ' || k,
  'color', (ARRAY['teal', 'red', 'blue', 'amber'])[1 + k % 4], 'size', k % 13,
  'price', jsonb_build_object('amount', 100 + k % 9900, 'currency', 'EUR'),
  'tags', jsonb_build_array('small', 'sale'), 'stock', jsonb_build_object('warehouse', 'north', 'count', k % 500),
  'updated', '2024-05-01T12:00:00Z'), k
FROM generate_series(1, $rows) AS k;
ANALYZE widgets;
EOF
doc=$(psql -X "$dsn" -Atc "SELECT value::text FROM widgets WHERE key = 1")
lit="'${doc//\'/\'\'}'::jsonb"
nseg=$(psql -X "$dsn" -Atc "SELECT numsegments FROM gp_distribution_policy WHERE localoid = 'widgets'::regclass")
echo "widgets: $rows rows of a ${#doc}-byte document on $nseg segments; FOLD=$fold, SETS=$sets"

# upsert KEY VERSION: the reference upsert (loadtest/cmd/gpbench/writes.go)
upsert() { printf 'INSERT INTO widgets (key, value, version) VALUES (%s, %s, %s) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = EXCLUDED.version' "$1" "$lit" "$2"; }
# txn KEY...: BEGIN, an upsert of each key (the i-th with version :vi), COMMIT, one query
txn() {
	local i=0 k
	printf 'BEGIN \\;\n'
	for k in "$@"; do
		i=$((i + 1))
		upsert "$k" ":v$i"
		printf ' \\;\n'
	done
	printf 'COMMIT;\n'
}
# statement KEYS VERSIONS: one upsert of FOLD keys over unnest of two arrays
statement() { printf 'INSERT INTO widgets (key, value, version) SELECT u.k, %s, u.v FROM unnest(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[]) AS u(k, v) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = EXCLUDED.version;\n' "$lit" "$1" "$2"; }
versions=""
keys=""
draw=""
for i in $(seq "$fold"); do
	versions+=$(printf '\\set v%d random(1, 1000000000)' "$i")$'\n'
	draw+=$(printf '\\set k%d random(%d, %d)' "$i" $(((i - 1) * rows / fold + 1)) $((i * rows / fold)))$'\n'
	keys+=":k$i "
done
vars=$(printf ':v%d,' $(seq "$fold"))
{
	printf '\\set k random(1, %d)\n\\set v random(1, 1000000000)\n' "$rows"
	upsert :k :v
	printf ';\n'
} >"$work/single.sql"
{ printf '%s%s' "$draw" "$versions"; txn $keys; } >"$work/fold-across.sql"
{ printf '%s%s' "$draw" "$versions"; statement "$(echo $keys | tr ' ' ,)" "${vars%,}"; } >"$work/fold-statement.sql"

# The fixed sets: per segment, its keys in a fixed pseudo-random order; the
# first SETS/nseg*FOLD of each make the one-segment sets, the next ones the
# spread sets, whose i-th key is on segment (set + i) % nseg.
per=$((sets / nseg))
mkdir "$work/fold-one-segment" "$work/fold-across-sets"
psql -X "$dsn" -AtF ' ' -v ON_ERROR_STOP=1 >"$work/sets" <<EOF
WITH r AS (
  SELECT key, gp_segment_id AS seg, row_number() OVER (PARTITION BY gp_segment_id ORDER BY md5(key::text)) AS n FROM widgets
), one AS (
  SELECT 'fold-one-segment' AS v, s * $per + j AS set, (SELECT key FROM r WHERE r.seg = s AND r.n = j * $fold + i + 1) AS key
  FROM generate_series(0, $nseg - 1) AS s, generate_series(0, $per - 1) AS j, generate_series(0, $fold - 1) AS i
), spread AS (
  SELECT 'fold-across-sets', j, (SELECT key FROM r WHERE r.seg = (j + i) % $nseg
    AND r.n = $per * $fold + j * (($fold + $nseg - 1) / $nseg) + i / $nseg + 1)
  FROM generate_series(0, $per * $nseg - 1) AS j, generate_series(0, $fold - 1) AS i
)
SELECT v, set, string_agg(key::text, ' ' ORDER BY key) FROM (SELECT * FROM one UNION ALL SELECT * FROM spread) AS a
GROUP BY v, set ORDER BY v, set
EOF
while read -r v set ks; do
	# shellcheck disable=SC2086 # the keys are words
	{ printf '%s' "$versions"; txn $ks; } >"$work/$v/$set.sql"
done <"$work/sets"
check=$(psql -X "$dsn" -At -c "SELECT count(DISTINCT key), count(*) FROM widgets WHERE key IN ($(cut -d' ' -f3- "$work/sets" | tr ' \n' ,)0)")
[[ $check == "$((2 * per * nseg * fold))|$((2 * per * nseg * fold))" ]] || { echo "gp-fold.sh: the fixed sets are not $((2 * per * nseg * fold)) distinct keys ($check)" >&2; exit 1; }

# The dispatch of each shape: EXPLAIN of its statement, then where one
# transaction of it goes, with concrete keys and versions.
one=$(awk '$1 == "fold-one-segment" && $2 == 0 { $1 = $2 = ""; print; exit }' "$work/sets")
spread=$(awk '$1 == "fold-across-sets" && $2 == 0 { $1 = $2 = ""; print; exit }' "$work/sets")
concrete() { sed -E 's/:v[0-9]+/7/g'; }
sevens=$(printf '7,%.0s' $(seq "$fold"))
sevens=${sevens%,}
echo
echo "EXPLAIN (plan lines of the insert and its motions):"
explain() {
	echo "  $1:"
	psql -X "$dsn" -At -c "EXPLAIN $2" | grep -E 'Insert|Motion|Scan|Result|segments' | sed 's/  (cost=[^)]*)//; s/^/    /'
}
explain "single (also each statement of the folds)" "$(upsert 1 7)"
explain "fold-statement, keys on every segment" "$(statement "$(echo $spread | tr ' ' ,)" "$sevens" | sed 's/;$//')"
explain "fold-statement, keys on one segment" "$(statement "$(echo $one | tr ' ' ,)" "$sevens" | sed 's/;$//')"
echo
echo "Dispatch of one transaction (test_print_direct_dispatch_info; counts of each message):"
dispatch() {
	echo "  $1:"
	{ echo "SET test_print_direct_dispatch_info = on;"; cat; } | psql -X -q "$dsn" 2>&1 >/dev/null | sed 's/^INFO: *//; s/ [0-9 ]*$//' | sort | uniq -c | sed 's/^ */    /'
}
{ upsert 1 7; echo ';'; } | dispatch single
# shellcheck disable=SC2086
txn $spread | concrete | dispatch "fold-across, fold-across-sets"
# shellcheck disable=SC2086
txn $one | concrete | dispatch fold-one-segment
statement "$(echo $spread | tr ' ' ,)" "$sevens" | dispatch fold-statement

# pin MASK: every process of the cluster (each postmaster of
# gp_segment_configuration and its descendants) on the CPUs of MASK; a
# backend forked later inherits its postmaster's.
datadirs=$(psql -X "$dsn" -Atc "SELECT datadir FROM gp_segment_configuration")
. "$(dirname "$0")/pin/pin.sh"
cluster() { local d; for d in $datadirs; do pid_tree "$(head -n1 "$d/postmaster.pid")"; done; }
pin() { pin_pids "$1" $(cluster); }
pin 1
echo "pinned to CPU 0: $(cluster | wc -l) processes of the cluster; pgbench on CPU 1"
trap 'pin "$all_cpus"; rm -rf "$work"; dropdb' EXIT

files() {
	local f
	if [[ -d $work/$1 ]]; then
		for f in "$work/$1"/*.sql; do printf -- '-f\n%s\n' "$f"; done
	else
		printf -- '-f\n%s\n' "$work/$1.sql"
	fi
}
declare -A sum failed per=([single]=1)
variants=(single fold-across fold-statement fold-across-sets fold-one-segment)
echo
for r in $(seq "$rounds"); do
	for v in "${variants[@]}"; do
		mapfile -t args < <(files "$v")
		taskset -c 1 pgbench -n -M simple -c 16 -j 2 -T 5 "${args[@]}" "$dsn" >"$work/$v.out" 2>&1 || true
		w=$(awk -v n="${per[$v]:-$fold}" '/^tps/ {printf "%.0f", $3 * n}' "$work/$v.out")
		[[ -n $w ]] && ! grep -q 'Run was aborted' "$work/$v.out" || { echo "gp-fold.sh: pgbench of $v failed:" >&2; grep -v '^pgbench: client' "$work/$v.out" | tail -5 >&2; exit 1; }
		n=$(awk '/^number of failed transactions/ {print $5}' "$work/$v.out")
		sum[$v]=$((${sum[$v]:-0} + w))
		failed[$v]=$((${failed[$v]:-0} + ${n:-0}))
		echo "round $r: $v $w writes/s, ${n:-0} failed transactions"
	done
done
echo
echo "| variant | writes/s (mean of $rounds) | × single |"
echo "|---|---:|---:|"
for v in "${variants[@]}"; do
	awk -v v="$v" -v s="${sum[$v]}" -v u="${sum[single]}" -v n="$rounds" 'BEGIN { printf "| %s | %d | %.2f |\n", v, s / n, s / u }'
done
echo
echo -n "failed transactions:"
for v in "${variants[@]}"; do echo -n " $v ${failed[$v]}"; done
echo
