#!/usr/bin/env bash
# Many nodes on one PostgreSQL: NODES nodes (default 32) of 8 simulated cards polling at 1 Hz,
# one process each, and a portal without cards; 100 websocket viewers on the portal. Prints the
# portal's CPU, the database's transactions per second (every statement of Lanes' is its own
# transaction or part of one; NOTIFYs included) and tick-to-browser latency, beside the same
# viewers on a single node as the reference. It starts its own PostgreSQL (Debian's server
# binaries, run as the postgres account, so as root) with room for every process's
# connections (docs/multi-node.md, "Connections"). Expects release builds. IDLE_SECONDS=60 first
# measures the pool with nobody watching.
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH=target/release/lanes-bench
LANES=target/release/lanes
NODES=${NODES:-32}
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-20}
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

work=$(mktemp -d)
chown postgres "$work"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
runuser -u postgres -- "$PG_BIN/initdb" -D "$work/pg" -U postgres --auth=trust > /dev/null
runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$work/pg" -w -l "$work/pg.log" \
  -o "-p $port -k $work -c listen_addresses=127.0.0.1 -c max_connections=$((NODES * 20 + 50)) -c fsync=off" \
  start > /dev/null
PG=postgres://postgres@127.0.0.1:$port/postgres
url=postgres://postgres@127.0.0.1:$port/lanes
psql "$PG" -qc "CREATE DATABASE lanes"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null;
      runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$work/pg" -m immediate stop > /dev/null; rm -rf "$work"' EXIT

start() { # start NAME GPUS: starts a node and waits until it listens
  mkdir -p "$work/$1"
  "$LANES" serve --gpus "$2" --node-name "$1" --listen 127.0.0.1:0 --data-dir "$work/$1" \
    --database-url "$url" --site-root target/site --poll-interval 1s \
    > "$work/$1/out" 2> "$work/$1/err" &
  pids+=($!)
  for _ in $(seq 300); do grep -q listening "$work/$1/out" && break; sleep 0.1; done
}

start portal none
portal_pid=${pids[0]}
portal_addr=$(sed -n 's#.*listening on http://##p' "$work/portal/out")
for i in $(seq "$NODES"); do start "n$i" sim:8; done
token=$(bench_tokens 1 "$portal_addr" "$work/portal" "$LANES" "$url")
# Every node's cards reach the portal before measuring.
for _ in $(seq 300); do
  n=$(curl -s -H "authorization: Bearer $token" "http://$portal_addr/api/v1/gpus" | { grep -o '"uuid"' || true; } | wc -l)
  [ "$n" -ge $((NODES * 8)) ] && break
  sleep 0.2
done

xacts() { psql "$PG" -tAc "SELECT sum(xact_commit + xact_rollback) FROM pg_stat_database"; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

# IDLE_SECONDS > 0: first the pool with nobody watching, as most of a pool's day is: the
# database's transactions a second and the nodes' CPU over that long (autovacuum off for it, so
# the count is Lanes' own; bench/idle.sh does the same for one node).
IDLE_SECONDS=${IDLE_SECONDS:-0}
if [ "$IDLE_SECONDS" -gt 0 ]; then
  psql "$PG" -qc "ALTER SYSTEM SET autovacuum = off" -c "SELECT pg_reload_conf()" > /dev/null
  sleep 35 # past the 30 s that ticks keep crossing nodes after someone last watched
  nodes_cpu() { local sum=0 p; for p in "${pids[@]:1}"; do sum=$((sum + $(cpu_ticks "$p"))); done; echo "$sum"; }
  ix0=$(xacts); ic0=$(nodes_cpu); it0=$(date +%s.%N)
  sleep "$IDLE_SECONDS"
  ix1=$(xacts); ic1=$(nodes_cpu); it1=$(date +%s.%N)
  echo "## Idle pool: $NODES nodes × 8 simulated cards, nobody watching, ${IDLE_SECONDS} s (autovacuum off)"
  echo
  echo "| what | figure |"
  echo "|---|---|"
  awk -v c0="$ic0" -v c1="$ic1" -v hz="$hz" -v t0="$it0" -v t1="$it1" -v x0="$ix0" -v x1="$ix1" -v n="$NODES" 'BEGIN {
    s = t1 - t0
    printf "| database transactions per second (all %d processes) | %.1f |\n", n + 1, (x1 - x0) / s
    printf "| of which per node per second | %.2f |\n", (x1 - x0) / s / n
    printf "| CPU per node, share of one core | %.2f %% |\n", 100 * (c1 - c0) / hz / s / n
  }'
  echo
  psql "$PG" -qc "ALTER SYSTEM RESET autovacuum" -c "SELECT pg_reload_conf()" > /dev/null
fi
x0=$(xacts); c0=$(cpu_ticks "$portal_pid"); t0=$(date +%s.%N)
echo "## Many nodes: $NODES nodes × 8 simulated cards at 1 Hz (one process each) and a portal, one PostgreSQL, ${SECONDS_PER_RUN} s"
echo
echo "| viewers on the portal | latencies measured | p50 ms | p99 ms | max ms | portal RSS before, MiB | portal RSS peak, MiB |"
echo "|---|---|---|---|---|---|---|"
"$BENCH" fanout --addr "$portal_addr" --pid "$portal_pid" --clients 100 --seconds "$SECONDS_PER_RUN" --token "$token" \
  --ticks-per-second "$NODES"
x1=$(xacts); c1=$(cpu_ticks "$portal_pid"); t1=$(date +%s.%N)
echo
echo "| what | figure |"
echo "|---|---|"
awk -v c0="$c0" -v c1="$c1" -v hz="$hz" -v t0="$t0" -v t1="$t1" -v x0="$x0" -v x1="$x1" -v n="$NODES" 'BEGIN {
  s = t1 - t0
  printf "| portal CPU (100 viewers, %d nodes of ticks) | %.0f %% of one core |\n", n, 100 * (c1 - c0) / hz / s
  printf "| database transactions per second (all %d processes) | %.0f |\n", n + 1, (x1 - x0) / s
  printf "| of which per node per second | %.1f |\n", (x1 - x0) / s / n
}'

# The reference, same machine and run: the same 100 viewers on one server of 8 cards, alone.
kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null || true
pids=()
url=${url%/*}/single
psql "$PG" -qc "CREATE DATABASE single"
start single sim:8
single_addr=$(sed -n 's#.*listening on http://##p' "$work/single/out")
single_token=$(bench_tokens 1 "$single_addr" "$work/single" "$LANES" "$url")
echo
echo "Reference: one server alone, sim:8 at 1 Hz, 100 viewers, on the same PostgreSQL server:"
echo
echo "| viewers | latencies measured | p50 ms | p99 ms | max ms | RSS before, MiB | RSS peak, MiB |"
echo "|---|---|---|---|---|---|---|"
"$BENCH" fanout --addr "$single_addr" --pid "${pids[0]}" --clients 100 --seconds "$SECONDS_PER_RUN" \
  --token "$single_token"
