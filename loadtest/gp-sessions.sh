#!/bin/bash
# gp-sessions.sh DSN DATADIR [SECONDS]: what a single-key statement costs a
# Greenplum cluster when each session keeps to one segment, alternates
# between two, or roams over all of them (docs/warehouse.md, "Segment
# lanes"). DSN is a database that the segment curve of make bench-scale
# loaded (its widgets table of 1M rows, DISTRIBUTED BY (key), and its write
# function), DATADIR the kit's GP_DATA of that cluster. For writes (the
# table's write function, as serve calls it) and for lookups (the lookup
# statement) it runs 8 pgbench clients at once, each with a script of 200
# keys:
#   one      each client the keys of one segment
#   two      each client alternating between the keys of two segments
#   all      each client keys of every segment, shuffled
# and prints, from /proc, the coordinator's and the segments' CPU per
# statement (the postmasters' reaped children included).
#
#   loadtest/gp-sessions.sh postgres://gpadmin@127.0.0.1:7200/warmcache_scale_seg_1000000_0 /var/lib/greenplum-12
set -euo pipefail
dsn=$1 datadir=$2 secs=${3:-6}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
segments=$(psql -X "$dsn" -Atc "SELECT count(*) FROM gp_segment_configuration WHERE content >= 0 AND role = 'p'")
fn=$(psql -X "$dsn" -Atc "SELECT p.oid::regproc FROM pg_proc p WHERE proname LIKE 'warmcache_write%' LIMIT 1")
((segments >= 2)) || { echo "gp-sessions.sh: $segments segment(s)" >&2; exit 1; }
for ((s = 0; s < segments; s++)); do
	psql -X "$dsn" -Atc "SELECT key FROM widgets WHERE gp_segment_id = $s ORDER BY random() LIMIT 200" >"$work/keys$s"
done
statement() { # KIND KEY
	case $1 in
	write) echo "SELECT * FROM $fn($2::bigint, '{\"id\": $2}'::text, NULL::bigint, false, 600000::bigint, false, 42::bigint, ARRAY[$2]::bigint[], '{}'::bigint[]);" ;;
	read) echo "SELECT value FROM widgets WHERE key = $2;" ;;
	esac
}
scripts() { # KIND MODE: one script per client, client$i.sql
	local kind=$1 mode=$2 i s
	for ((i = 0; i < 8; i++)); do
		s=$((i % segments))
		case $mode in
		one) cat "$work/keys$s" ;;
		two) paste -d'\n' "$work/keys$s" "$work/keys$(((s + segments / 2) % segments))" | head -n 200 ;;
		all) cat "$work"/keys* | shuf -n 200 ;;
		esac | while read -r k; do statement "$kind" "$k"; done >"$work/client$i.sql"
	done
}
for kind in write read; do
	for mode in one two all; do
		scripts "$kind" "$mode"
		rm -f "$work"/out*
		python3 "$here/gp-sessions/cpu.py" "$datadir" bash -c "
			for i in 0 1 2 3 4 5 6 7; do pgbench -n -M simple -c 1 -T $secs -f $work/client\$i.sql '$dsn' >$work/out\$i 2>&1 & done; wait" >"$work/cpu"
		n=$(cat "$work"/out* | sed -n 's/.*processed: \([0-9]*\).*/\1/p' | awk '{s += $1} END {print s * 200}')
		python3 - "$work/cpu" "$n" "$kind" "$mode" <<'PY'
import sys
cpu = dict(line.split() for line in open(sys.argv[1]))
n = int(sys.argv[2])
print(f"{sys.argv[3]:5s} {sys.argv[4]:3s} {n / float(cpu['wall']):7.0f}/s  coordinator {1e3 * float(cpu['coordinator']) / n:6.0f} µs  segments {1e3 * float(cpu['segments']) / n:6.0f} µs per statement")
PY
	done
done
