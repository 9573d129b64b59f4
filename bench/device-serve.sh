#!/usr/bin/env bash
# On a GPU host: the release binary alone (its web pages inside), started as the package's unit
# starts it (`lanes serve --config FILE`) from an empty directory, reading the cards through
# NVML; the dashboard's bundle served from the binary; /metrics with the cards and the pool.
# Usage (bench/device-run.sh carries it): device-serve.sh LANES_BINARY; results in $OUT.
set -euo pipefail
lanes=$(realpath "$1")
OUT=${OUT:-$(mktemp -d)}
work=$(mktemp -d)
cd "$work"
cat >lanes.toml <<TOML
data_dir = "$work/data"
listen = "127.0.0.1:3100"
gpus = "nvml"
TOML
echo "device serve passphrase" | "$lanes" user add --config lanes.toml --username ada --admin --unix-user nobody --password-stdin
"$lanes" config check --config lanes.toml >"$OUT/config-check.txt"
"$lanes" serve --config lanes.toml >"$OUT/serve.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf http://127.0.0.1:3100/healthz >/dev/null && break; sleep 0.2; done
{
  echo "# ls of the directory it ran in:"; ls -A "$work"
  echo "# healthz:"; curl -s http://127.0.0.1:3100/healthz; echo
  bundle=$(curl -s http://127.0.0.1:3100/login | grep -o '/pkg/[0-9a-f]*/lanes_bg.wasm' | head -1)
  echo "# $bundle, brotli:"; curl -sI -H 'accept-encoding: br' "http://127.0.0.1:3100$bundle"
} >"$OUT/site.txt"
jar=$work/cookies
curl -s -c "$jar" -H 'content-type: application/json' \
  -d '{"username":"ada","password":"device serve passphrase"}' http://127.0.0.1:3100/api/v1/auth/login >/dev/null
uuid=$(curl -s -b "$jar" http://127.0.0.1:3100/api/v1/gpus | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["uuid"])')
start=$(date -u +%Y-%m-%dT%H:%M:%SZ); end=$(date -u -d '+10 min' +%Y-%m-%dT%H:%M:%SZ)
curl -s -b "$jar" -H 'content-type: application/json' -H 'origin: http://127.0.0.1:3100' \
  -d "{\"gpus\":[\"$uuid\"],\"start\":\"$start\",\"end\":\"$end\"}" http://127.0.0.1:3100/api/v1/bookings >"$OUT/booking.json"
# A PyTorch process on the booked card, as root
# (root's process is unbooked use: the booking is ada's, whose Unix account is nobody).
CUDA_VISIBLE_DEVICES=$uuid python3 -c 'import torch,time; x=torch.ones(4096,4096,device="cuda"); [x@x for _ in range(2000)]; torch.cuda.synchronize(); time.sleep(15)' &
torch=$!
sleep 12
curl -s http://127.0.0.1:3100/metrics >"$OUT/metrics.txt"
wait "$torch"
grep -E '^lanes_(gpu_up|gpu_utilization_ratio|gpu_power_watts|bookings_active|user_gpus_held|violations_open|node_up|database_up|queue_jobs)' "$OUT/metrics.txt"
