#!/usr/bin/env bash
# Replays every shared trace at loads 0.7, 0.9 and 1.1 through every policy and prints the
# Markdown tables of docs/scheduling.md (and draws its plots). Expects a release build.
set -euo pipefail
cd "$(dirname "$0")/.."
LANES=${LANES:-target/release/lanes}
T=${TRACES:-../shared/traces}
ESTIMATE=${ESTIMATE:-exact}
run() { # title, gpus, traces, extra...
  local title=$1 gpus=$2 traces=$3; shift 3
  echo "### $title on $gpus GPUs (estimates: $ESTIMATE)"
  echo
  echo '```'
  echo "lanes simulate --trace $traces --gpus $gpus --policy all --load 0.7,0.9,1.1 --estimate $ESTIMATE $*"
  echo '```'
  echo
  "$LANES" simulate --trace "$traces" --gpus "$gpus" --policy all --load 0.7,0.9,1.1 \
    --estimate "$ESTIMATE" "$@" | sed '1s/^/> /'
  echo
}
run "philly_vc_0e4a51" 64 "$T/philly_vc_0e4a51.csv"
run "philly_vc_2869ce" 32 "$T/philly_vc_2869ce.csv"
run "philly_vc_b436b2" 128 "$T/philly_vc_b436b2.csv"
run "All three teams merged" 128 "$T/philly_vc_0e4a51.csv,$T/philly_vc_2869ce.csv,$T/philly_vc_b436b2.csv"
