#!/usr/bin/env bash
# Real-GPU check of jobs (run through the `device` tool or by hand, as root, on a host with at
# least two GPUs and PyTorch). Expects DEVRUN with a release `lanes` and `site/`; writes every
# output under OUT. A Lanes user whose jobs run as the Unix account `lanesjob` books GPU 1 for
# two minutes and submits a PyTorch job that outlives the slot; the script records what the job
# saw, what NVML lists while it runs, and how it was stopped at the slot's end. Meanwhile an
# admin sets the watchdog to `terminate`, another Unix account starts PyTorch on GPU 0 without
# a booking (reported, then ended after the grace period), and the server is killed with -9 and
# restarted (the job is re-adopted and still stopped at the slot's end).
set -u
# shellcheck source=bench/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
SLOT_SECONDS=${SLOT_SECONDS:-120}
enter_devrun 3998
PY=$(command -v python3)
echo "python: $PY" > "$OUT/env.txt"
id lanesjob > /dev/null 2>&1 || useradd --create-home --shell /bin/bash lanesjob
id lanesintruder > /dev/null 2>&1 || useradd --create-home --shell /bin/bash lanesintruder
su lanesjob -s /bin/sh -c "$PY -c 'import torch; print(torch.__version__)'" >> "$OUT/env.txt" 2>&1
nvidia-smi -L > "$OUT/nvidia-smi-L.txt" 2>&1
# What cgroups this host offers (for the device-filter design in docs/enforcement.md).
{ stat -fc %T /sys/fs/cgroup; cat /proc/self/cgroup; ls /sys/fs/cgroup; \
  cat /sys/fs/cgroup/cgroup.controllers /sys/fs/cgroup/cgroup.subtree_control; \
  own=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup); \
  mkdir "$own/lanes-probe" && echo "made a child cgroup under $own" && rmdir "$own/lanes-probe"; } \
  > "$OUT/cgroup.txt" 2>&1

data=$(mktemp -d)
printf 'job passphrase\n' | ./lanes user add --username lanesjob --unix-user lanesjob \
  --password-stdin --data-dir "$data" > /dev/null
printf 'boss passphrase\n' | ./lanes user add --username boss --admin \
  --password-stdin --data-dir "$data" > /dev/null
serve() {
  ./lanes serve --gpus nvml --listen 127.0.0.1:$PORT --data-dir "$data" --site-root site \
    --job-grace 5s >> "$OUT/jobs-serve.out" 2>> "$OUT/jobs-serve.err" &
  SERVER=$!
  sleep 3
}
serve
curl -s -c "$data/admin" -H 'content-type: application/json' \
  -d '{"username":"boss","password":"boss passphrase"}' $URL/api/v1/auth/login > /dev/null
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

# Unbooked use: terminate after 20 s; PyTorch on GPU 0 as an account with no booking.
curl -s -b "$data/admin" -X PUT -H 'content-type: application/json' \
  -d '{"watchdog":"terminate","violation_grace_s":20}' $URL/api/v1/policy > "$OUT/policy.json"
GPU0=$(curl -s -b "$data/c" $URL/api/v1/gpus \
  | $PY -c 'import json,sys; print([g["uuid"] for g in json.load(sys.stdin) if g["index"] == 0][0])')
su lanesintruder -s /bin/sh -c "CUDA_VISIBLE_DEVICES=$GPU0 $PY -u -c 'import torch, os; print(os.getpid(), flush=True); x = torch.randn(8192, 8192, device=\"cuda\")
while True: y = x @ x' > /tmp/intruder.out 2>&1" &
INTRUDER_SHELL=$!
sleep 15
curl -s -b "$data/admin" $URL/api/v1/violations > "$OUT/violations-seen.json"
curl -s -b "$data/admin" $URL/api/v1/gpus > "$OUT/violations-gpus.json"
nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv > "$OUT/violations-nvidia-smi-apps.csv"
sleep 20
curl -s -b "$data/admin" $URL/api/v1/violations > "$OUT/violations-after-grace.json"
nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv > "$OUT/violations-nvidia-smi-apps-after.csv"
for _ in $(seq 30); do kill -0 $INTRUDER_SHELL 2> /dev/null || break; sleep 1; done
if kill -0 $INTRUDER_SHELL 2> /dev/null; then
  echo "intruder STILL RUNNING 30 s after the grace period" > "$OUT/violations-intruder-exit.txt"
  pkill -KILL -u lanesintruder
else
  wait $INTRUDER_SHELL; echo "intruder shell exit $?" > "$OUT/violations-intruder-exit.txt"
fi
cat /tmp/intruder.out >> "$OUT/violations-intruder-exit.txt"

# Kill the server with -9 and start it again: the job runs on and is re-adopted.
kill -KILL $SERVER; wait $SERVER 2> /dev/null
ps -o pid,user,comm -u lanesjob > "$OUT/restart-ps-while-down.txt"
serve
sleep 2
curl -s -b "$data/c" $URL/api/v1/jobs/$JOB > "$OUT/job-readopted.json"
# Until the slot's end plus the grace period and a margin.
sleep $(($(date -d "$END" +%s) + 12 - $(date +%s)))
curl -s -b "$data/c" $URL/api/v1/jobs/$JOB > "$OUT/job-ended.json"
curl -s -b "$data/c" "$URL/api/v1/jobs/$JOB/log" > "$OUT/job-stdout.txt"
curl -s -b "$data/c" "$URL/api/v1/jobs/$JOB/log?stream=stderr" > "$OUT/job-stderr.txt"
nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv > "$OUT/jobs-nvidia-smi-apps-after.csv"
# The job's processes, killed at the slot's end, must not show up as unbooked use afterwards.
sleep 5
curl -s -b "$data/admin" $URL/api/v1/violations > "$OUT/violations-final.json"
ps -o pid,user,comm -u lanesjob > "$OUT/jobs-ps-after.txt"
kill -TERM $SERVER; wait $SERVER
echo done > "$OUT/jobs-done.txt"
