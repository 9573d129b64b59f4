#!/usr/bin/env bash
# History beside Prometheus: the same readings (DAYS days × 8 simulated cards × 5 metrics at one
# reading a second) written to Lanes through its store and imported into Debian's Prometheus
# with promtool; bytes per raw sample on each side, then both servers asked over HTTP for
# 1 h, 24 h, 7 d and 30 d of every card's utilization at 1,000 points.
# Expects release builds (`cargo build --release -p lanes -p lanes-bench`) and prometheus and
# promtool on the PATH (`make tools` installs them). Prints Markdown for docs/benchmarks.md.
# Usage: bench/history-prometheus.sh [DAYS] [QUERIES]
set -euo pipefail
cd "$(dirname "$0")/.."
DAYS=${1:-30}
QUERIES=${2:-100}
BENCH=target/release/lanes-bench
LANES=target/release/lanes
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT

echo "## Lanes: loading ${DAYS} days (store, rollups, blocks, pruning)"
echo
echo "| what | figure |"
echo "|---|---|"
"$BENCH" history --days "$DAYS" --queries 20 --keep "$work/lanes" --openmetrics "$work/readings.om" \
  | tee "$work/lanes.md"
end=$(sed -n 's/^| end of the loaded range (Unix seconds) | \([0-9]*\) |$/\1/p' "$work/lanes.md")
echo

echo "## Prometheus $(prometheus --version 2>&1 | head -1 | awk '{print $3}'): the same readings through promtool"
echo
mkdir -p "$work/prometheus"
started=$(date +%s)
# One block for the whole range (promtool reads its input once per block it writes).
promtool tsdb create-blocks-from openmetrics --max-block-duration="$((DAYS * 24 + 24))h" \
  "$work/readings.om" "$work/prometheus" > "$work/promtool.log"
imported=$(( $(date +%s) - started ))
samples=$(grep -c '^lanes_gpu' "$work/readings.om")
rm "$work/readings.om"
bytes=$(du -sb "$work/prometheus" | cut -f1)
echo "| what | figure |"
echo "|---|---|"
echo "| samples imported | $samples (${imported} s with promtool) |"
echo "| TSDB on disk (chunks, index, meta) | $bytes bytes |"
echo "| bytes per sample | $(awk -v b="$bytes" -v s="$samples" 'BEGIN { printf "%.2f", b / s }') |"
echo

cat > "$work/prometheus.yml" <<'YML'
global: {}
scrape_configs: []
YML
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/prometheus" \
  --storage.tsdb.retention.time=10y --web.listen-address=127.0.0.1:19090 \
  > "$work/prometheus.log" 2>&1 &
pids+=($!)
# The node the readings were loaded as (SQLite keeps one node): the same simulated cards, whose
# new readings land after the loaded range.
"$LANES" serve --gpus sim:8 --node-name bench --sim-seed 7 --listen 127.0.0.1:0 --data-dir "$work/lanes" \
  > "$work/lanes.out" 2> "$work/lanes.err" &
pids+=($!)
for _ in $(seq 600); do
  grep -q listening "$work/lanes.out" && curl -sf http://127.0.0.1:19090/-/ready > /dev/null && break
  sleep 0.1
done
addr=$(sed -n 's#.*listening on http://##p' "$work/lanes.out")
[ -n "$addr" ] || { echo "lanes serve did not start:" >&2; cat "$work/lanes.err" >&2; exit 1; }
token=$(bench_token "$addr" "$work/lanes" "$LANES")

echo "## Over HTTP: every card's utilization at 1,000 points, ${QUERIES} queries per range and server"
echo
"$BENCH" history-http --lanes "$addr" --token "$token" --prometheus http://127.0.0.1:19090 \
  --end "$end" --days "$DAYS" --queries "$QUERIES"
