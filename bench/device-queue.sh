#!/usr/bin/env bash
# Real-GPU check of the job queue (run through the `device` tool or by hand, as root, on a host
# with two GPUs and PyTorch). Expects DEVRUN with a release `lanes` and `site/`; writes every
# output under OUT. Another user books GPU 0; `lanesjob` queues a two-card PyTorch job (it must
# wait for the booking) and then a one-card job with a 15 s limit that never ends on its own (it
# is backfilled onto GPU 1 and stopped at its limit). The booking is given back: the script
# measures how soon the two-card job starts, and records what it saw and what NVML listed.
set -u
# shellcheck source=bench/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
enter_devrun 3997
PY=$(command -v python3)
id lanesjob > /dev/null 2>&1 || useradd --create-home --shell /bin/bash lanesjob
data=$(mktemp -d)
add() { printf '%s\n' "$2" | ./lanes user add --username "$1" "${@:3}" --password-stdin --data-dir "$data" > /dev/null; }
add lanesjob 'job passphrase' --unix-user lanesjob
add booker 'booker passphrase'
./lanes serve --gpus nvml --listen 127.0.0.1:$PORT --data-dir "$data" --site-root site \
  --job-grace 5s > "$OUT/queue-serve.out" 2> "$OUT/queue-serve.err" &
SERVER=$!
sleep 3
login() { curl -s -c "$data/$1" -H 'content-type: application/json' \
  -d "{\"username\":\"$1\",\"password\":\"$2\"}" $URL/api/v1/auth/login > /dev/null; }
login lanesjob 'job passphrase'
login booker 'booker passphrase'
as() { local who=$1; shift; curl -s -b "$data/$who" -H 'content-type: application/json' "$@"; }
GPU0=$(as booker $URL/api/v1/gpus | $PY -c 'import json,sys; print([g["uuid"] for g in json.load(sys.stdin) if g["index"] == 0][0])')
START=$(date -u +%Y-%m-%dT%H:%M:%SZ)
END=$(date -u -d "+600 sec" +%Y-%m-%dT%H:%M:%SZ)
as booker -d "{\"gpus\":[\"$GPU0\"],\"start\":\"$START\",\"end\":\"$END\"}" $URL/api/v1/bookings > "$OUT/queue-booking.json"
BOOKING=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$OUT/queue-booking.json")

cat > "$data/wide.json" <<JSON
{"gpus": 2, "time_limit_s": 120, "name": "two-card matmul", "argv": ["$PY", "-u", "-c",
 "import os, time, torch\nprint('CUDA_VISIBLE_DEVICES', os.environ.get('CUDA_VISIBLE_DEVICES'))\nprint('device_count', torch.cuda.device_count())\nfor i in range(torch.cuda.device_count()): print('uuid', i, torch.cuda.get_device_properties(i).uuid)\nprint('uid', os.getuid())\nxs = [torch.randn(16384, 16384, device=f'cuda:{i}') for i in range(torch.cuda.device_count())]\nend = time.time() + 20\nwhile time.time() < end:\n    for x in xs: y = x @ x\n    torch.cuda.synchronize()\nprint('done')\n"]}
JSON
cat > "$data/short.json" <<JSON
{"gpus": 1, "time_limit_s": 15, "name": "endless", "argv": ["$PY", "-u", "-c",
 "import os, torch\nprint('CUDA_VISIBLE_DEVICES', os.environ.get('CUDA_VISIBLE_DEVICES'))\nx = torch.randn(8192, 8192, device='cuda')\nwhile True: y = x @ x\n"]}
JSON
as lanesjob -d @"$data/wide.json" $URL/api/v1/queue > "$OUT/queue-wide-submitted.json"
WIDE=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$OUT/queue-wide-submitted.json")
as lanesjob -d @"$data/short.json" $URL/api/v1/queue > "$OUT/queue-short-submitted.json"
SHORT=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$OUT/queue-short-submitted.json")
sleep 6
as lanesjob $URL/api/v1/queue > "$OUT/queue-while-booked.json"
as lanesjob $URL/api/v1/gpus > "$OUT/queue-gpus-backfilled.json"
nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv > "$OUT/queue-nvidia-smi-backfilled.csv"
sleep 20  # past the short job's limit and grace
as lanesjob $URL/api/v1/jobs/$SHORT > "$OUT/queue-short-ended.json"
as lanesjob "$URL/api/v1/jobs/$SHORT/log" > "$OUT/queue-short-stdout.txt"

# Give the booking back and time how soon the two-card job starts.
released=$(date +%s.%N)
as booker -X DELETE $URL/api/v1/bookings/$BOOKING > "$OUT/queue-booking-released.json"
started=""
for _ in $(seq 500); do
  state=$(as lanesjob $URL/api/v1/jobs/$WIDE | $PY -c 'import json,sys; print(json.load(sys.stdin)["state"])')
  if [ "$state" != pending ]; then started=$(date +%s.%N); break; fi
  sleep 0.01
done
$PY -c "import sys; print('two-card job left pending %.3f s after the booking was released' % (float(sys.argv[2]) - float(sys.argv[1])))" "$released" "${started:-0}" > "$OUT/queue-start-latency.txt"
sleep 8
as lanesjob $URL/api/v1/queue > "$OUT/queue-running.json"
as lanesjob $URL/api/v1/gpus > "$OUT/queue-gpus-running.json"
nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv > "$OUT/queue-nvidia-smi-running.csv"
nvidia-smi --query-gpu=index,uuid,utilization.gpu,memory.used --format=csv > "$OUT/queue-nvidia-smi-util.csv"
ps -o pid,pgid,sid,user,comm -u lanesjob > "$OUT/queue-ps.txt"
for _ in $(seq 60); do
  state=$(as lanesjob $URL/api/v1/jobs/$WIDE | $PY -c 'import json,sys; print(json.load(sys.stdin)["state"])')
  case $state in pending|queued|running) sleep 1 ;; *) break ;; esac
done
as lanesjob $URL/api/v1/queue > "$OUT/queue-final.json"
as lanesjob "$URL/api/v1/jobs/$WIDE/log" > "$OUT/queue-wide-stdout.txt"
as lanesjob "$URL/api/v1/jobs/$WIDE/log?stream=stderr" > "$OUT/queue-wide-stderr.txt"
as lanesjob "$URL/api/v1/bookings?user=lanesjob" > "$OUT/queue-bookings-after.json"
kill -TERM $SERVER; wait $SERVER
echo done > "$OUT/queue-done.txt"
