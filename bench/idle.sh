#!/usr/bin/env bash
# What an idle node costs: `lanes serve --gpus sim:8` with no viewers, no bookings and no
# jobs, over IDLE_SECONDS (60) after a 20 s settling time, on SQLite and on PostgreSQL. Prints
# the server's CPU (utime + stime from /proc, as a share of one core) on each backend and the
# PostgreSQL database's transactions per second (pg_stat_database of a database of its own on
# a PostgreSQL server of its own, with autovacuum off: its workers' transactions, about 20 to
# 30 a minute on this database whether one node or many use it, are PostgreSQL's own
# housekeeping and would be counted with Lanes' in pg_stat_database). Targets
# (issue 39): at most 1 % of one core on both backends, at most 1 transaction per second.
# Each argument is a binary to measure, in turn (default target/release/lanes): give an
# earlier build beside this one for a before → after in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- target/release/lanes
SECS=${IDLE_SECONDS:-60}
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}

work=$(mktemp -d)
chown postgres "$work"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
runuser -u postgres -- "$PG_BIN/initdb" -D "$work/pg" -U postgres --auth=trust > /dev/null
runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$work/pg" -w -l "$work/pg.log" \
  -o "-p $port -k $work -c listen_addresses=127.0.0.1 -c autovacuum=off" start > /dev/null
PG=postgres://postgres@127.0.0.1:$port/postgres
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null;
      runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$work/pg" -m immediate stop > /dev/null; rm -rf "$work"' EXIT

xacts() { psql "$PG" -tAc "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = 'idle'"; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

measure() { # measure BINARY NAME [serve flags...]: prints a table row
  local lanes=$1 name=$2; shift 2
  rm -rf "${work:?}/$name"; mkdir -p "$work/$name"
  "$lanes" serve --gpus sim:8 --listen 127.0.0.1:0 --data-dir "$work/$name" "$@" \
    > "$work/$name/out" 2> "$work/$name/err" &
  pid=$!
  for _ in $(seq 300); do grep -q listening "$work/$name/out" && break; sleep 0.1; done
  sleep 20
  local x0 c0 t0 x1 c1 t1
  x0=$(xacts); c0=$(cpu_ticks "$pid"); t0=$(date +%s.%N)
  sleep "$SECS"
  x1=$(xacts); c1=$(cpu_ticks "$pid"); t1=$(date +%s.%N)
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
  awk -v b="$lanes" -v n="$name" -v c0="$c0" -v c1="$c1" -v hz="$hz" -v t0="$t0" -v t1="$t1" -v x0="$x0" -v x1="$x1" 'BEGIN {
    s = t1 - t0
    tx = (n == "PostgreSQL") ? sprintf("%.2f", (x1 - x0) / s) : "—"
    printf "| %s | %s | %.0f | %.2f %% | %s |\n", b, n, s, 100 * (c1 - c0) / hz / s, tx
  }'
}

echo "## An idle node: sim:8, no viewers, no bookings, ${SECS} s"
echo
echo "| binary | backend | seconds | CPU, share of one core | database transactions per second |"
echo "|---|---|---:|---:|---:|"
for lanes in "$@"; do
  measure "$lanes" SQLite
  psql "$PG" -qc "DROP DATABASE IF EXISTS idle" -c "CREATE DATABASE idle"
  measure "$lanes" PostgreSQL --database-url "postgres://postgres@127.0.0.1:$port/idle"
done
