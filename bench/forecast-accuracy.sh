#!/usr/bin/env bash
# How often start-time forecasts came true (docs/scheduling.md, "When would it start?"): every
# shared trace at load 0.9, exact and noisy limits, FIFO, backfill and fair share, one process
# per trace × estimate × policy side by side (the large traces take long: give it cores).
# LANES: the lanes binary (a release or dev build; the scheduling crate is optimized in both).
set -euo pipefail
cd "$(dirname "$0")/.."
LANES=${LANES:-target/release/lanes}
T=${TRACES:-../shared/traces}
OUT=${OUT:-target/forecast-accuracy}
mkdir -p "$OUT"
run() { # name gpus every traces
  local name=$1 gpus=$2 every=$3 traces=$4
  for e in exact noisy; do
    for p in fifo backfill fairshare; do
      "$LANES" simulate --trace "$traces" --gpus "$gpus" --policy "$p" --load 0.9 --estimate "$e" \
        --forecast --forecast-every "$every" --forecast-samples 32 >"$OUT/$name-$e-$p.txt" 2>&1 &
    done
  done
}
run 2869ce 32 10 "$T/philly_vc_2869ce.csv"
run 0e4a51 64 100 "$T/philly_vc_0e4a51.csv"
run b436b2 128 400 "$T/philly_vc_b436b2.csv"
run merged 128 400 "$T/philly_vc_0e4a51.csv,$T/philly_vc_2869ce.csv,$T/philly_vc_b436b2.csv"
wait
for f in "$OUT"/*.txt; do echo "## $(basename "$f" .txt)"; grep '^|' "$f" | tail -n 1; done
