#!/usr/bin/env bash
# Local development stack for warmcache, all on 127.0.0.1, on ports of its
# own so that it never collides with servers the machine already runs:
#   - its own PostgreSQL cluster with wal_level=logical on 55432 (change
#     capture works);
#   - Redis on 6379 (the one there when it answers, otherwise its own);
#   - a PgBouncer sidecar in transaction pooling on 56432, in front of that
#     PostgreSQL.
#
#   deploy/local/stack.sh up       start whatever is missing (idempotent)
#   deploy/local/stack.sh down     stop only what this script started
#   deploy/local/stack.sh env      print export lines for the Go tests
#   deploy/local/stack.sh run-env  print export lines for the service (make run)
#   deploy/local/stack.sh seed     load deploy/local/sample-widgets.sql (after migrate up)
#
# The servers run as the postgres user when this runs as root (both refuse
# root), so their state cannot live inside the repository: a clone under a
# private directory (a home directory, mktemp -d) is not reachable by that
# user. It lives in $WARMCACHE_STACK_DIR, by default
# /var/tmp/warmcache-stack-<user>. Every address here is written once; the
# Makefile and .ci/run take them from `env` and `run-env`.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
STATE="${WARMCACHE_STACK_DIR:-/var/tmp/warmcache-stack-$(id -un)}"

HOST=127.0.0.1
PG_PORT="${WARMCACHE_STACK_PG_PORT:-55432}"
REDIS_PORT="${WARMCACHE_STACK_REDIS_PORT:-6379}"
PGB_PORT="${WARMCACHE_STACK_PGBOUNCER_PORT:-56432}"
DB_NAME=warmcache
WAIT_SECONDS=30

PG_DIR="$STATE/postgres"   # own cluster
PG_DATA="$PG_DIR/data"
REDIS_DIR="$STATE/redis"   # own redis-server, only when none answers
PGB_DIR="$STATE/pgbouncer" # generated config, userlist, log, pid
PGB_INI="$PGB_DIR/pgbouncer.ini"
PGB_PID="$PGB_DIR/pgbouncer.pid"
PGB_LOG="$PGB_DIR/pgbouncer.log"

# Service account for PostgreSQL and PgBouncer, which both refuse to run as root.
SVC_USER=postgres

# psql: no ~/.psqlrc, never prompt for a password, fail fast.
export PGCONNECT_TIMEOUT=5
PSQL=(psql -X -w -q -v ON_ERROR_STOP=1 -h "$HOST" -U postgres)

log() { printf '==> %s\n' "$*"; }
die() { printf 'stack.sh: error: %s\n' "$*" >&2; exit 1; }
is_root() { [[ $EUID -eq 0 ]]; }

# Run a command as the service account when root, as ourselves otherwise.
as_svc() {
	if is_root; then runuser -u "$SVC_USER" -- "$@"; else "$@"; fi
}

# apt-get install, only possible as root; runs `apt-get update` and retries
# once if the first attempt fails (e.g. stale or empty package lists).
apt_install() {
	is_root || die "$* not installed; install it (apt-get install -y $*) or re-run as root"
	log "installing $* with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -q "$@" </dev/null ||
		{ apt-get update -q </dev/null && apt-get install -y -q "$@" </dev/null; } ||
		die "apt-get install $* failed"
}

# True when something accepts TCP connections on $HOST:$1.
port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# True when the pid in file $1 is alive (not a zombie) and its command name
# is $2. Guards against stale pid files and recycled pids.
pid_alive() {
	[[ -s $1 ]] && proc_alive "$(head -n1 "$1")" "$2"
}
proc_alive() {
	local stat
	[[ $1 =~ ^[0-9]+$ ]] || return 1
	stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
	# /proc/PID/stat is "PID (COMM) STATE ..."; Z = exited, not yet reaped.
	[[ $stat == "$1 ($2"*")"* && ${stat##*) } != Z* ]]
}

# wait_for COMMAND...: retry COMMAND until it succeeds, for up to WAIT_SECONDS.
wait_for() {
	local i
	for ((i = 0; i < WAIT_SECONDS * 2; i++)); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.5
	done
	return 1
}

pg_answers() { pg_isready -q -h "$HOST" -p "$PG_PORT"; }
pg_sql() { "${PSQL[@]}" -p "$PG_PORT" "$@"; }
pgb_sql() { "${PSQL[@]}" -p "$PGB_PORT" "$@"; }
redis_answers() { [[ "$(redis-cli -h "$HOST" -p "$REDIS_PORT" ping 2>/dev/null)" == PONG ]]; }

# ---------------------------------------------------------------- PostgreSQL

# Newest installed server bin directory (or the one matching an existing
# cluster's PG_VERSION).
pg_bindir() {
	if [[ -s $PG_DATA/PG_VERSION ]]; then
		local v
		v="$(cat "$PG_DATA/PG_VERSION")"
		[[ -x /usr/lib/postgresql/$v/bin/postgres ]] ||
			die "$PG_DATA is a PostgreSQL $v cluster but /usr/lib/postgresql/$v is not installed"
		echo "/usr/lib/postgresql/$v/bin"
		return
	fi
	local d
	d="$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n1)"
	[[ -x $d/initdb ]] && echo "$d"
}

# state_dir creates $STATE, readable and searchable by the service account,
# and refuses one that another user owns.
state_dir() {
	if [[ ! -d $STATE ]]; then
		mkdir -p "$STATE"
		chmod 755 "$STATE"
	fi
	[[ -O $STATE ]] || die "$STATE belongs to another user; set WARMCACHE_STACK_DIR to a directory of your own"
	if is_root; then
		runuser -u "$SVC_USER" -- test -x "$STATE" ||
			die "$SVC_USER cannot reach $STATE; set WARMCACHE_STACK_DIR to a directory every user can search (such as one under /var/tmp)"
	fi
}

postgres_up() {
	if ! command -v psql >/dev/null || ! command -v pg_isready >/dev/null; then
		apt_install postgresql-client
	fi
	if pg_answers; then
		if [[ -s $PG_DATA/postmaster.pid ]]; then
			PG_STATUS="own cluster $PG_DATA, started earlier by stack.sh"
		else
			PG_STATUS="already running, not managed by stack.sh"
		fi
	else
		local bindir
		bindir="$(pg_bindir || true)"
		if [[ -z $bindir ]]; then
			apt_install postgresql
			bindir="$(pg_bindir || true)"
			[[ -n $bindir ]] || die "no PostgreSQL server found in /usr/lib/postgresql after install"
		fi
		start_own_postgres "$bindir"
	fi
	# Everything below relies on trust auth for user postgres over TCP.
	pg_sql -d postgres -c 'select 1' >/dev/null 2>&1 ||
		die "PostgreSQL on $HOST:$PG_PORT does not accept user postgres without a password; allow 'trust' for 127.0.0.1 in pg_hba.conf"
	PG_SERVER_VERSION="$(pg_sql -d postgres -tAc 'show server_version')"
	local wal_level
	wal_level="$(pg_sql -d postgres -tAc 'show wal_level')"
	[[ $wal_level == logical ]] ||
		die "PostgreSQL on $HOST:$PG_PORT runs wal_level=$wal_level; change capture needs logical (stop it, or set WARMCACHE_STACK_PG_PORT to a free port)"
}

start_own_postgres() {
	local bindir="$1"
	if is_root; then id "$SVC_USER" >/dev/null 2>&1 || die "user $SVC_USER missing (needed to run PostgreSQL as non-root)"; fi
	mkdir -p "$PG_DIR"
	is_root && chown "$SVC_USER:" "$PG_DIR"
	as_svc test -w "$PG_DIR" || die "$SVC_USER cannot write $PG_DIR"
	if [[ ! -s $PG_DATA/PG_VERSION ]]; then
		log "initdb $PG_DATA"
		as_svc "$bindir/initdb" -D "$PG_DATA" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$PG_DIR/initdb.log" 2>&1 ||
			die "initdb failed, see $PG_DIR/initdb.log"
	fi
	log "starting own PostgreSQL cluster in $PG_DATA on $HOST:$PG_PORT"
	# wal_level=logical: the service follows the replication stream.
	# No unix socket: everything connects over TCP.
	as_svc "$bindir/pg_ctl" -D "$PG_DATA" -l "$PG_DIR/postgres.log" -w -t "$WAIT_SECONDS" \
		-o "-c listen_addresses=$HOST -p $PG_PORT -c unix_socket_directories='' -c wal_level=logical -c max_wal_senders=20 -c max_replication_slots=20 -c max_connections=200 -c max_slot_wal_keep_size=1GB" start >/dev/null ||
		die "PostgreSQL did not start, see $PG_DIR/postgres.log"
	wait_for pg_answers || die "PostgreSQL did not answer on $HOST:$PG_PORT within ${WAIT_SECONDS}s"
	# The pgbouncer userlist also admits root; give it a role here too.
	pg_sql -d postgres -c "do \$\$ begin if not exists (select from pg_roles where rolname = 'root') then create role root login superuser; end if; end \$\$" >/dev/null
	PG_STATUS="own cluster $PG_DATA, started by stack.sh"
}

create_database() {
	if [[ "$(pg_sql -d postgres -tAc "select 1 from pg_database where datname = '$DB_NAME'")" == 1 ]]; then
		DB_STATUS="exists"
	else
		pg_sql -d postgres -c "create database $DB_NAME" >/dev/null
		DB_STATUS="created"
	fi
}

# --------------------------------------------------------------------- Redis

redis_up() {
	command -v redis-cli >/dev/null || apt_install redis-tools
	if redis_answers; then
		REDIS_STATUS="already running"
		pid_alive "$REDIS_DIR/redis.pid" redis-server && REDIS_STATUS="started earlier by stack.sh, dir $REDIS_DIR"
	else
		command -v redis-server >/dev/null || apt_install redis-server
		# Installing the package may itself have started Debian's redis.
		if redis_answers; then
			REDIS_STATUS="already running"
		else
			log "starting redis-server on $HOST:$REDIS_PORT"
			mkdir -p "$REDIS_DIR"
			redis-server --daemonize yes --bind "$HOST" --port "$REDIS_PORT" --save "" --appendonly no \
				--dir "$REDIS_DIR" --pidfile "$REDIS_DIR/redis.pid" --logfile "$REDIS_DIR/redis.log" >/dev/null
			wait_for redis_answers || die "redis-server did not answer on $HOST:$REDIS_PORT, see $REDIS_DIR/redis.log"
			REDIS_STATUS="started by stack.sh, dir $REDIS_DIR"
		fi
	fi
	REDIS_VERSION="$(redis-cli -h "$HOST" -p "$REDIS_PORT" info server | sed -n 's/^redis_version:\([^[:space:]]*\).*/\1/p')"
}

# ----------------------------------------------------------------- PgBouncer

pgbouncer_bin() { command -v pgbouncer 2>/dev/null || { [[ -x /usr/sbin/pgbouncer ]] && echo /usr/sbin/pgbouncer; }; }

# Writes the config into $PGB_DIR; sets PGB_CONFIG_CHANGED=1 when
# pgbouncer.ini differs from the previous one.
write_pgbouncer_config() {
	mkdir -p "$PGB_DIR"
	# Trust auth still needs every user name listed in auth_file.
	printf '"postgres" ""\n"root" ""\n' >"$PGB_DIR/userlist.txt"
	cat >"$PGB_INI.new" <<-EOF
		;; Generated by deploy/local/stack.sh; edits are overwritten by "stack.sh up".
		[databases]
		; Any database name passes through to the local PostgreSQL.
		* = host=$HOST port=$PG_PORT

		[pgbouncer]
		listen_addr = $HOST
		listen_port = $PGB_PORT
		; TCP only: socket paths under a deep repository path can exceed 107 bytes.
		unix_socket_dir =
		auth_type = trust
		auth_file = $PGB_DIR/userlist.txt
		; Admin console: psql -h $HOST -p $PGB_PORT -U postgres pgbouncer -c 'show pools'
		admin_users = postgres, root
		pool_mode = transaction
		max_client_conn = 1000
		default_pool_size = 20
		ignore_startup_parameters = extra_float_digits
		logfile = $PGB_LOG
		pidfile = $PGB_PID
	EOF
	PGB_CONFIG_CHANGED=0
	cmp -s "$PGB_INI.new" "$PGB_INI" || PGB_CONFIG_CHANGED=1
	mv "$PGB_INI.new" "$PGB_INI"
	touch "$PGB_LOG"
	# pgbouncer runs as $SVC_USER and must read its config (also on reload)
	# and write its log and pid file.
	if is_root; then
		chown -R "$SVC_USER:" "$PGB_DIR"
		runuser -u "$SVC_USER" -- test -r "$PGB_INI" -a -w "$PGB_DIR" ||
			die "$SVC_USER cannot use $PGB_DIR"
	fi
}

pgbouncer_port_closed() { ! port_open "$PGB_PORT"; }
# True when PgBouncer answers and passes connections on to our PostgreSQL.
pgbouncer_answers() { [[ "$(pgb_sql -d postgres -tAc 'show port' 2>/dev/null)" == "$PG_PORT" ]]; }

pgbouncer_up() {
	local bin
	bin="$(pgbouncer_bin || true)"
	if [[ -z $bin ]]; then
		apt_install pgbouncer
		stop_packaged_pgbouncer
		bin="$(pgbouncer_bin)" || die "pgbouncer still not found after install"
	fi
	if is_root; then id "$SVC_USER" >/dev/null 2>&1 || die "user $SVC_USER missing (pgbouncer refuses to run as root)"; fi

	if pid_alive "$PGB_PID" pgbouncer; then
		# Ours is running: refresh the config and reload it if it changed.
		write_pgbouncer_config
		if ((PGB_CONFIG_CHANGED)); then
			log "pgbouncer config changed, reloading"
			kill -HUP "$(head -n1 "$PGB_PID")"
		fi
		PGB_STATUS="running (pid $(head -n1 "$PGB_PID"), started earlier by stack.sh)"
	elif pgbouncer_answers; then
		PGB_STATUS="already running, not managed by stack.sh"
		return 0
	elif port_open "$PGB_PORT" && ! stop_legacy_pgbouncer; then
		die "something listens on $HOST:$PGB_PORT but does not pass connections through to the PostgreSQL on port $PG_PORT as user postgres; stop it (a packaged pgbouncer: service pgbouncer stop), or set WARMCACHE_STACK_PGBOUNCER_PORT, and retry"
	else
		write_pgbouncer_config
		rm -f "$PGB_PID" # stale
		# max_client_conn = 1000 needs more descriptors than a 1024 soft limit.
		if [[ "$(ulimit -n)" != unlimited ]] && (($(ulimit -n) < 2048)); then
			ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
		fi
		log "starting pgbouncer on $HOST:$PGB_PORT"
		local user_opt=()
		is_root && user_opt=(-u "$SVC_USER")
		"$bin" -d -q "${user_opt[@]}" "$PGB_INI" ||
			die "pgbouncer failed to start; see $PGB_LOG"
	fi
	wait_for pgbouncer_answers || {
		tail -n 20 "$PGB_LOG" >&2 || true
		die "pgbouncer on $HOST:$PGB_PORT did not accept connections within ${WAIT_SECONDS}s (log: $PGB_LOG)"
	}
	: "${PGB_STATUS:=started by stack.sh (pid $(head -n1 "$PGB_PID"))}"
}

# Earlier versions of this script kept PgBouncer's state in <clone>/.local
# and pointed it at the PostgreSQL on 5432. Stop such an instance (true when
# one was stopped), so that ours can take the port.
stop_legacy_pgbouncer() {
	local pid stopped=1
	for pid in $(pgrep -f '/\.local/pgbouncer/pgbouncer\.ini' 2>/dev/null); do
		proc_alive "$pid" pgbouncer || continue
		log "stopping pgbouncer $pid started by an earlier version of stack.sh"
		kill -TERM "$pid" && stopped=0
	done
	((stopped == 0)) && wait_for pgbouncer_port_closed
	return $stopped
}

# `apt-get install pgbouncer` starts Debian's own service where services may
# start (not in containers with policy-rc.d); it would hold port 6432 with an
# empty [databases] section, so stop the instance our install just started.
stop_packaged_pgbouncer() {
	local pidfile=/var/run/postgresql/pgbouncer.pid
	if pid_alive "$pidfile" pgbouncer; then
		log "stopping the pgbouncer service started by the package install"
		service pgbouncer stop >/dev/null 2>&1 || kill "$(head -n1 "$pidfile")" || true
		wait_for pgbouncer_port_closed || true
	fi
}

# ---------------------------------------------------------------- subcommands

cmd_up() {
	state_dir
	postgres_up
	redis_up
	pgbouncer_up
	create_database
	pgb_sql -d "$DB_NAME" -c 'select 1' >/dev/null ||
		die "cannot reach database $DB_NAME through pgbouncer on $HOST:$PGB_PORT"
	local pgb_version
	pgb_version="$(pgb_sql -d pgbouncer -tA -c 'show version' 2>/dev/null | sed -n 1p || true)"
	cat <<-EOF
		warmcache local stack is up:
		  postgres   $HOST:$PG_PORT  PostgreSQL ${PG_SERVER_VERSION}: $PG_STATUS
		  redis      $HOST:$REDIS_PORT  Redis ${REDIS_VERSION}: $REDIS_STATUS
		  pgbouncer  $HOST:$PGB_PORT  ${pgb_version:-PgBouncer}, pool_mode=transaction: $PGB_STATUS
		             config $PGB_INI
		  database   $DB_NAME ($DB_STATUS)
	EOF
}

# Stop a daemon from its pid file, waiting (bounded) for it to exit.
stop_pidfile() {
	local name="$1" pidfile="$2" comm="$3" pid i
	if ! pid_alive "$pidfile" "$comm"; then
		rm -f "$pidfile"
		return 1
	fi
	pid="$(head -n1 "$pidfile")"
	log "stopping $name (pid $pid)"
	kill -TERM "$pid"
	for ((i = 0; i < WAIT_SECONDS * 2; i++)); do
		proc_alive "$pid" "$comm" || { rm -f "$pidfile"; return 0; }
		sleep 0.5
	done
	die "$name (pid $pid) did not exit within ${WAIT_SECONDS}s"
}

cmd_down() {
	local stopped=0
	stop_pidfile pgbouncer "$PGB_PID" pgbouncer && stopped=1
	if [[ -s $PG_DATA/postmaster.pid ]]; then
		local bindir
		bindir="$(pg_bindir)"
		if as_svc "$bindir/pg_ctl" -D "$PG_DATA" status >/dev/null 2>&1; then
			log "stopping own PostgreSQL cluster $PG_DATA"
			as_svc "$bindir/pg_ctl" -D "$PG_DATA" -m fast -w stop >/dev/null
			stopped=1
		fi
	fi
	stop_pidfile redis-server "$REDIS_DIR/redis.pid" redis-server && stopped=1
	((stopped)) || log "nothing started by stack.sh is running"
	return 0
}

# print_exports NAME=VALUE...: export lines; values already set in the
# environment win.
print_exports() {
	local pair name value
	for pair in "$@"; do
		name="${pair%%=*}"
		value="${!name:-${pair#*=}}"
		printf "export %s='%s'\n" "$name" "${value//\'/\'\\\'\'}"
	done
}

# Export lines for the Go tests.
cmd_env() {
	print_exports \
		"WARMCACHE_TEST_POSTGRES_DSN=postgres://postgres@$HOST:$PG_PORT/postgres?sslmode=disable" \
		"WARMCACHE_TEST_PGBOUNCER_DSN=postgres://postgres@$HOST:$PGB_PORT/postgres?sslmode=disable" \
		"WARMCACHE_TEST_REDIS_ADDR=$HOST:$REDIS_PORT" \
		"WARMCACHE_STACK_PG_ADDR=$HOST:$PG_PORT" \
		"WARMCACHE_STACK_PGBOUNCER_ADDR=$HOST:$PGB_PORT"
}

# Export lines for the service: it reads the warehouse through PgBouncer;
# migrations and the replication stream go straight to PostgreSQL
# (WARMCACHE_STACK_DIRECT_DSN), which PgBouncer cannot carry.
cmd_run_env() {
	print_exports \
		"WARMCACHE_POSTGRES_DSN=postgres://postgres@$HOST:$PGB_PORT/$DB_NAME?sslmode=disable" \
		"WARMCACHE_PG_POOLER=pgbouncer" \
		"WARMCACHE_REDIS_ADDRS=$HOST:$REDIS_PORT" \
		"WARMCACHE_STACK_DIRECT_DSN=postgres://postgres@$HOST:$PG_PORT/$DB_NAME?sslmode=disable"
}

cmd_seed() {
	local sql="$ROOT/deploy/local/sample-widgets.sql"
	pg_answers || die "PostgreSQL is not running on $HOST:$PG_PORT; run: deploy/local/stack.sh up"
	[[ "$(pg_sql -d "$DB_NAME" -tAc "select to_regclass('widgets') is not null and to_regclass('warmcache_version_seq') is not null")" == t ]] ||
		die "table widgets or sequence warmcache_version_seq missing in $DB_NAME; run 'bin/warmcache migrate up --namespaces deploy/local/namespaces.yaml' first"
	log "seeding $DB_NAME.widgets from $sql"
	pg_sql -d "$DB_NAME" -f "$sql"
}

usage() {
	sed -n '2,11s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

case "${1:-}" in
up) cmd_up ;;
down) cmd_down ;;
env) cmd_env ;;
run-env) cmd_run_env ;;
seed) cmd_seed ;;
-h | --help | help) usage ;;
*)
	usage >&2
	exit 2
	;;
esac
