#!/usr/bin/env bash
# Real-GPU check of jobs (run through the `device` tool or by hand, as root, on a host with at
# least two GPUs and PyTorch). Expects DEVRUN with a release `lanes` and `site/`; writes every
# output under OUT. A Lanes user whose jobs run as the Unix account `lanesjob` books GPU 1 for
# two minutes and submits a PyTorch job that outlives the slot; the script records what the job
# saw, what NVML lists while it runs, and how it was stopped at the slot's end.
set -u
# shellcheck source=bench/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
DEVRUN=${DEVRUN:-devrun}
OUT=${OUT:-/tmp/lanes-device}
SLOT_SECONDS=${SLOT_SECONDS:-120}
mkdir -p "$OUT"
cd "$DEVRUN"
PORT=3998
URL=http://127.0.0.1:$PORT
PY=$(command -v python3)
echo "python: $PY" > "$OUT/env.txt"
id lanesjob > /dev/null 2>&1 || useradd --create-home --shell /bin/bash lanesjob
su lanesjob -s /bin/sh -c "$PY -c 'import torch; print(torch.__version__)'" >> "$OUT/env.txt" 2>&1
nvidia-smi -L > "$OUT/nvidia-smi-L.txt" 2>&1

data=$(mktemp -d)
printf 'job passphrase\n' | ./lanes user add --username lanesjob --unix-user lanesjob \
  --password-stdin --data-dir "$data" > /dev/null
./lanes serve --gpus nvml --listen 127.0.0.1:$PORT --data-dir "$data" --site-root site \
  --job-grace 5s > "$OUT/jobs-serve.out" 2> "$OUT/jobs-serve.err" &
SERVER=$!
sleep 3
curl -s -c "$data/c" -H 'content-type: application/json' \
  -d '{"username":"lanesjob","password":"job passphrase"}' $URL/api/v1/auth/login > /dev/null
GPU1=$(curl -s -b "$data/c" $URL/api/v1/gpus \
  | $PY -c 'import json,sys; print([g["uuid"] for g in json.load(sys.stdin) if g["index"] == 1][0])')
START=$(date -u +%Y-%m-%dT%H:%M:%SZ)
END=$(date -u -d "+$SLOT_SECONDS sec" +%Y-%m-%dT%H:%M:%SZ)
curl -s -b "$data/c" -H 'content-type: application/json' \
  -d "{\"gpus\":[\"$GPU1\"],\"start\":\"$START\",\"end\":\"$END\"}" $URL/api/v1/bookings > "$OUT/booking.json"
BOOKING=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$OUT/booking.json")
cat > "$data/job.json" <<JSON
{"booking_id": $BOOKING, "name": "matmul", "argv": ["$PY", "-u", "-c",
 "import os, time, signal, torch\nsignal.signal(signal.SIGTERM, lambda *a: print('got SIGTERM at', time.strftime('%H:%M:%S'), flush=True))\nprint('CUDA_VISIBLE_DEVICES', os.environ.get('CUDA_VISIBLE_DEVICES'))\nprint('device_count', torch.cuda.device_count())\nprint('uuid', torch.cuda.get_device_properties(0).uuid)\nprint('uid', os.getuid())\nx = torch.randn(16384, 16384, device='cuda')\nwhile True:\n    y = x @ x\n    torch.cuda.synchronize()\n"]}
JSON
curl -s -b "$data/c" -H 'content-type: application/json' -d @"$data/job.json" $URL/api/v1/jobs > "$OUT/job-submitted.json"
JOB=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$OUT/job-submitted.json")
sleep 30
curl -s -b "$data/c" $URL/api/v1/jobs/$JOB > "$OUT/job-running.json"
nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv > "$OUT/jobs-nvidia-smi-apps.csv"
nvidia-smi --query-gpu=index,uuid,utilization.gpu,memory.used --format=csv > "$OUT/jobs-nvidia-smi-util.csv"
ps -o pid,pgid,sid,user,comm -u lanesjob > "$OUT/jobs-ps.txt"
curl -s -b "$data/c" $URL/api/v1/gpus > "$OUT/jobs-gpus.json"
# Until the slot's end plus the grace period and a margin.
sleep $((SLOT_SECONDS - 30 + 12))
curl -s -b "$data/c" $URL/api/v1/jobs/$JOB > "$OUT/job-ended.json"
curl -s -b "$data/c" "$URL/api/v1/jobs/$JOB/log" > "$OUT/job-stdout.txt"
curl -s -b "$data/c" "$URL/api/v1/jobs/$JOB/log?stream=stderr" > "$OUT/job-stderr.txt"
nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv > "$OUT/jobs-nvidia-smi-apps-after.csv"
ps -o pid,user,comm -u lanesjob > "$OUT/jobs-ps-after.txt"
kill -TERM $SERVER; wait $SERVER
echo done > "$OUT/jobs-done.txt"
