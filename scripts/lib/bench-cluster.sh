# shellcheck shell=bash
# bench-cluster.sh: a throwaway PostgreSQL cluster with pg_stat_statements for the A/B benchmarks
# (scripts/bench-worker-ab, scripts/bench-budget), and the helpers they share. Source it after
# setting work (the benchmark's directory under .tmp) and port; it sets bindir, data and server
# (the cluster's postgres database URL) and starts the cluster when it is not running.
# 'bench_cluster_stop' stops it.

: "${work:?set work before sourcing bench-cluster.sh}" "${port:?set port before sourcing bench-cluster.sh}"
data=$PWD/$work/pg
mkdir -p "$work"
bindir=$(pg_config --bindir 2>/dev/null || true)
[[ -x "$bindir/initdb" ]] || bindir=$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -1)
[[ -x "$bindir/initdb" ]] || { echo "$(basename "$0"): no PostgreSQL server binaries (initdb) found" >&2; exit 1; }
as_pg() { if [[ $(id -u) == 0 ]]; then su postgres -s /bin/bash -c "$(printf '%q ' "$@")"; else "$@"; fi; }

bench_cluster_stop() {
	[[ -f "$data/postmaster.pid" ]] && as_pg "$bindir/pg_ctl" -D "$data" -m fast -w stop >/dev/null
	return 0
}

bench_cluster_start() {
	if [[ ! -f "$data/PG_VERSION" ]]; then
		mkdir -p "$data"
		[[ $(id -u) == 0 ]] && chown postgres "$data" "$work"
		as_pg "$bindir/initdb" -D "$data" -A trust -U postgres >/dev/null
		cat >>"$data/postgresql.conf" <<CONF
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$data'
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = all
pg_stat_statements.track_planning = on
max_connections = 200
CONF
	fi
	"$bindir/pg_isready" -q -h 127.0.0.1 -p "$port" || as_pg "$bindir/pg_ctl" -D "$data" -l "$data/log" -w start >/dev/null
	server="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
	psql "$server" -qAtc "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null 2>&1
	# Every fresh database gets the view from its template.
	psql "${server/\/postgres\?/\/template1?}" -qAtc "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null 2>&1
}

# dburl NAME: the cluster's URL of database NAME.
dburl() { sed -E "s#^([^?]*/)[^/?]*#\1$1#" <<<"$server"; }
# drop: drops the database of $db (the run's) and forgets it.
drop() { local name=${db##*/}; psql "$server" -qAtc "DROP DATABASE IF EXISTS ${name%%\?*} WITH (FORCE)" >/dev/null; db=; }
# json FIELD <<<'{...}' prints one field of a JSON line.
json() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read())[sys.argv[1]])' "$1"; }
calc() { python3 -c "print($1)"; }
# pgcpu: CPU seconds of the cluster so far: its processes alive, plus those the postmaster reaped.
pgcpu() {
	local pm
	pm=$(head -1 "$data/postmaster.pid")
	{
		awk '{print $14+$15+$16+$17}' "/proc/$pm/stat"
		for c in $(ps -o pid= --ppid "$pm"); do awk '{print $14+$15}' "/proc/$c/stat" 2>/dev/null || true; done
	} | awk -v hz="$(getconf CLK_TCK)" '{s+=$1} END {print s/hz}'
}
# proccpu PID: CPU seconds of a running process.
proccpu() { awk -v hz="$(getconf CLK_TCK)" '{print ($14+$15)/hz}' "/proc/$1/stat"; }
