#!/usr/bin/env bash
# Runs every benchmark that this machine can run and prints Markdown tables for
# docs/benchmarks.md. Expects release builds (`make bench` does them).
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH=target/release/lanes-bench
LANES=target/release/lanes
SECONDS_PER_RUN=${SECONDS_PER_RUN:-20}

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

echo "## Hydrate bundle: what a first visit of the dashboard loads (target/site/pkg, release build)"
echo
echo "| file | raw | gzip -9 | brotli q11 |"
echo "|---|---|---|---|"
for f in target/site/pkg/lanes_bg.wasm target/site/pkg/lanes.js target/site/pkg/__wasm_split.js target/site/pkg/lanes.css; do
  node -e '
    const fs = require("fs"), z = require("zlib");
    const b = fs.readFileSync(process.argv[1]);
    const kb = (n) => (n / 1024).toFixed(1) + " KiB";
    const br = z.brotliCompressSync(b, { params: { [z.constants.BROTLI_PARAM_QUALITY]: 11 } });
    console.log(`| ${process.argv[1].split("/").pop()} | ${kb(b.length)} | ${kb(z.gzipSync(b, { level: 9 }).length)} | ${kb(br.length)} |`);
  ' "$f"
done
echo

echo "## First visit on a throttled network (1.6 Mbit/s, 150 ms): time until the page is live"
echo
LANES_BINS=$LANES node bench/first-load.mjs
echo

echo "## Websocket fan-out: sim:8 at 1 Hz, loopback, ${SECONDS_PER_RUN} s per run"
echo
data=$(mktemp -d)
"$LANES" serve --gpus sim:8 --listen 127.0.0.1:0 --data-dir "$data" --site-root target/site \
  > "$data/out" 2> "$data/err" &
pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "$data"' EXIT
for _ in $(seq 100); do grep -q listening "$data/out" && break; sleep 0.1; done
addr=$(sed -n 's#.*listening on http://##p' "$data/out")
token=$(bench_token "$addr" "$data" "$LANES")
echo "| clients | latencies measured | p50 ms | p99 ms | max ms | server RSS before, MiB | server RSS peak, MiB |"
echo "|---|---|---|---|---|---|---|"
for n in 100 1000; do
  "$BENCH" fanout --addr "$addr" --pid "$pid" --clients "$n" --seconds "$SECONDS_PER_RUN" --token "$token"
  sleep 2
done
echo

echo "## Booking creation: sim:8, loopback, 32 concurrent clients"
echo
echo "| server | clients | bookings | per second | p50 ms | p99 ms | failures |"
echo "|---|---|---|---|---|---|---|"
"$BENCH" bookings --addr "$addr" --token "$token" --requests 4000 --concurrency 32
echo

echo "## Poll cost per GPU against raw NVML"
echo
if "$BENCH" poll --rounds 2000 2>/dev/null; then :; else
  echo "(no NVIDIA driver here: run \`target/release/lanes-bench poll\` on a GPU host)"
fi
echo

# PostgreSQL: BENCH_POSTGRES names a server where this run may create and drop databases.
PG=${BENCH_POSTGRES:-postgres://postgres@127.0.0.1:5432/postgres}
if psql "$PG" -tAc 'SELECT 1' > /dev/null 2>&1; then
  pg_base=${PG%/*}
  suffix=$$
  for db in lanes_bench_$suffix lanes_bench_bare_$suffix lanes_bench_history_$suffix; do
    psql "$PG" -qc "CREATE DATABASE $db"
  done
  pg_data=$(mktemp -d)
  "$LANES" serve --gpus sim:8 --listen 127.0.0.1:0 --data-dir "$pg_data" \
    --database-url "$pg_base/lanes_bench_$suffix" > "$pg_data/out" 2> "$pg_data/err" &
  pg_pid=$!
  trap 'kill $pid $pg_pid 2>/dev/null; rm -rf "$data" "$pg_data";
        for db in lanes_bench_$suffix lanes_bench_bare_$suffix lanes_bench_history_$suffix; do
          psql "$PG" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)"; done' EXIT
  for _ in $(seq 100); do grep -q listening "$pg_data/out" && break; sleep 0.1; done
  pg_addr=$(sed -n 's#.*listening on http://##p' "$pg_data/out")
  tokens=$(bench_tokens 8 "$pg_addr" "$pg_data" "$LANES" "$pg_base/lanes_bench_$suffix")
  echo "## Booking creation on PostgreSQL: sim:8, loopback, 32 concurrent clients"
  echo
  echo "| server | clients | bookings | per second | p50 ms | p99 ms | failures |"
  echo "|---|---|---|---|---|---|---|"
  "$BENCH" bookings --addr "$pg_addr" --token "${tokens%%,*}" --requests 4000 --concurrency 32 \
    --postgres "$pg_base/lanes_bench_bare_$suffix"
  echo
  echo "| server | clients | bookings | per second | p50 ms | p99 ms | failures |"
  echo "|---|---|---|---|---|---|---|"
  "$BENCH" bookings --addr "$pg_addr" --token "$tokens" --requests 4000 --concurrency 32 --days-ahead 40 \
    --postgres "$pg_base/lanes_bench_bare_$suffix"
  echo
  echo "## History on PostgreSQL: 30 days × 8 cards, 1,000 points"
  echo
  echo "| what | figure |"
  echo "|---|---|"
  "$BENCH" history --days 30 --queries 200 --database-url "$pg_base/lanes_bench_history_$suffix"
else
  echo "(no PostgreSQL at $PG: set BENCH_POSTGRES for the PostgreSQL figures)"
fi

if [ "$(id -u)" = 0 ] && [ -x /usr/lib/postgresql/15/bin/initdb ]; then
  echo
  bench/multinode.sh
else
  echo "(many nodes: needs root and Debian's PostgreSQL server binaries)"
fi
