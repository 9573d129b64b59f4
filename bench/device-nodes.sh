#!/usr/bin/env bash
# Real-GPU check of a node that manages a subset of its cards (issue 17; run through the
# `device` tool or by hand, as root, with PyTorch). Expects DEVRUN with a release `lanes` and
# `site/`; writes every output under OUT. With two or more cards: `--gpus nvml:1` manages GPU 1
# only (GPU 0 shown unmanaged), a job booked there sees only GPU 1, and PyTorch on GPU 0
# without a booking is not reported (unmanaged). With one card: `--gpus nvml:0` and the same by
# UUID, a card list naming a card the host lacks is refused with the cards it has, and a job on
# the managed card sees it. Both: what the node registered (`GET /api/v1/nodes`).
set -u
# shellcheck source=bench/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
enter_devrun 3997
PY=$(command -v python3)
id lanesjob > /dev/null 2>&1 || useradd --create-home --shell /bin/bash lanesjob
id lanesother > /dev/null 2>&1 || useradd --create-home --shell /bin/bash lanesother
nvidia-smi -L > "$OUT/nodes-nvidia-smi-L.txt" 2>&1
COUNT=$(nvidia-smi -L | grep -c '^GPU')
UUID0=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
if [ "$COUNT" -ge 2 ]; then MANAGED=1; SELECT=nvml:1; else MANAGED=0; SELECT=nvml:$UUID0; fi
{
  echo "cards: $COUNT; asking for --gpus $SELECT"
  echo "--- --gpus nvml:$COUNT (a card this host lacks):"
  ./lanes serve --gpus "nvml:$COUNT" --listen 127.0.0.1:$PORT --data-dir "$(mktemp -d)/d" 2>&1
  echo "exit $?"
} > "$OUT/nodes-refusal.txt"

data=$(mktemp -d)
printf 'job passphrase\n' | ./lanes user add --username lanesjob --unix-user lanesjob \
  --password-stdin --data-dir "$data" > /dev/null
printf 'boss passphrase\n' | ./lanes user add --username boss --admin \
  --password-stdin --data-dir "$data" > /dev/null
./lanes serve --gpus "$SELECT" --node-name h200-node --listen 127.0.0.1:$PORT --data-dir "$data" \
  --site-root site --job-grace 5s > "$OUT/nodes-serve.out" 2> "$OUT/nodes-serve.err" &
SERVER=$!
sleep 3
curl -s -c "$data/admin" -H 'content-type: application/json' \
  -d '{"username":"boss","password":"boss passphrase"}' $URL/api/v1/auth/login > /dev/null
curl -s -c "$data/c" -H 'content-type: application/json' \
  -d '{"username":"lanesjob","password":"job passphrase"}' $URL/api/v1/auth/login > /dev/null
curl -s -b "$data/c" $URL/api/v1/nodes > "$OUT/nodes-nodes.json"
curl -s -b "$data/c" $URL/api/v1/gpus > "$OUT/nodes-gpus.json"
# The watchdog reports unbooked use at once (it would terminate after 20 s).
curl -s -b "$data/admin" -X PUT -H 'content-type: application/json' \
  -d '{"watchdog":"terminate","violation_grace_s":20}' $URL/api/v1/policy > /dev/null
GPU=$(curl -s -b "$data/c" $URL/api/v1/gpus \
  | $PY -c "import json,sys; print([g['uuid'] for g in json.load(sys.stdin) if g['index'] == $MANAGED][0])")
START=$(date -u +%Y-%m-%dT%H:%M:%SZ)
END=$(date -u -d "+90 sec" +%Y-%m-%dT%H:%M:%SZ)
curl -s -b "$data/c" -H 'content-type: application/json' \
  -d "{\"gpus\":[\"$GPU\"],\"start\":\"$START\",\"end\":\"$END\"}" $URL/api/v1/bookings > "$OUT/nodes-booking.json"
BOOKING=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$OUT/nodes-booking.json")
if [ "$COUNT" -ge 2 ]; then
  # Unbooked use of the unmanaged card: nobody's violation.
  su lanesother -s /bin/sh -c "CUDA_VISIBLE_DEVICES=$UUID0 $PY -u -c 'import torch, time; x = torch.randn(8192, 8192, device=\"cuda\")
end = time.time() + 40
while time.time() < end: y = x @ x' > /tmp/other.out 2>&1" &
  OTHER=$!
fi
cat > "$data/job.json" <<JSON
{"booking_id": $BOOKING, "name": "sees", "argv": ["$PY", "-u", "-c",
 "import os, torch\nprint('CUDA_VISIBLE_DEVICES', os.environ.get('CUDA_VISIBLE_DEVICES'))\nprint('device_count', torch.cuda.device_count())\nprint('uuid', torch.cuda.get_device_properties(0).uuid)\nx = torch.randn(8192, 8192, device='cuda')\nfor _ in range(200): y = x @ x\ntorch.cuda.synchronize()\nprint('done')\n"]}
JSON
curl -s -b "$data/c" -H 'content-type: application/json' -d @"$data/job.json" $URL/api/v1/jobs > "$OUT/nodes-job.json"
JOB=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$OUT/nodes-job.json")
sleep 25
curl -s -b "$data/c" $URL/api/v1/jobs/$JOB > "$OUT/nodes-job-after.json"
curl -s -b "$data/c" "$URL/api/v1/jobs/$JOB/log" > "$OUT/nodes-job-log.txt"
curl -s -b "$data/c" "$URL/api/v1/jobs/$JOB/log?stream=stderr" >> "$OUT/nodes-job-log.txt"
curl -s -b "$data/admin" $URL/api/v1/violations > "$OUT/nodes-violations.json"
curl -s -b "$data/admin" $URL/api/v1/gpus > "$OUT/nodes-gpus-load.json"
nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv > "$OUT/nodes-nvidia-smi-apps.csv"
[ -n "${OTHER:-}" ] && wait "$OTHER"
kill -TERM $SERVER; wait $SERVER
rm -rf "$data"
