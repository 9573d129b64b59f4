#!/usr/bin/env bash
# Real-hardware check for a GPU host (run through the `device` tool or by hand). Expects a
# folder DEVRUN with `lanes`, `lanes-bench` and `site/` from a release build, and writes every
# output under OUT. Steps: doctor (plain and with a mask), `serve --gpus nvml` while PyTorch
# loads GPU 1 only, the poll benchmark, and websocket fan-out at 1 Hz x 8 simulated GPUs.
set -u
# shellcheck source=bench/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
enter_devrun 3999


nvidia-smi -L > "$OUT/nvidia-smi-L.txt" 2>&1
./lanes doctor > "$OUT/doctor.txt" 2>&1; echo "exit $?" >> "$OUT/doctor.txt"
GPU0_PREFIX=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1 | cut -c1-12)
CUDA_VISIBLE_DEVICES="1,$GPU0_PREFIX,7,0" ./lanes doctor > "$OUT/doctor-mask.txt" 2>&1
./lanes doctor --json > "$OUT/doctor.json" 2>&1

data=$(mktemp -d)
./lanes serve --gpus nvml --listen 127.0.0.1:$PORT --data-dir "$data" --site-root site \
  > "$OUT/serve.out" 2> "$OUT/serve.err" &
SERVER=$!
sleep 3
TOKEN=$(bench_token 127.0.0.1:$PORT "$data" ./lanes)
AUTH="Authorization: Bearer $TOKEN"
curl -s -H "$AUTH" $URL/api/v1/gpus > "$OUT/gpus-idle.json"
CUDA_VISIBLE_DEVICES=1 python3 -c "
import torch, time
x = torch.randn(16384, 16384, device='cuda')
end = time.time() + 40
while time.time() < end:
    y = x @ x
torch.cuda.synchronize()
" > "$OUT/torch.txt" 2>&1 &
PY=$!
sleep 20
curl -s -H "$AUTH" $URL/api/v1/gpus > "$OUT/gpus-load.json"
curl -s $URL/healthz > "$OUT/healthz.json"
curl -s $URL/metrics > "$OUT/metrics.txt"
curl -s -H "$AUTH" $URL/ > "$OUT/index.html"
ps -o pid,user,comm -p $PY > "$OUT/ps.txt"
nvidia-smi --query-compute-apps=pid,used_memory,gpu_uuid --format=csv > "$OUT/nvidia-smi-apps.csv"
nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv > "$OUT/nvidia-smi-util.csv"
# Poll cost while GPU 1 is loaded and lists one process (so /proc lookups are included).
./lanes-bench poll --rounds 20000 > "$OUT/poll-loaded.md" 2>&1
wait $PY
kill -TERM $SERVER; wait $SERVER; echo "serve exit status after SIGTERM: $?" >> "$OUT/serve.out"

./lanes-bench poll --rounds 20000 > "$OUT/poll-idle.md" 2>&1

./lanes serve --gpus sim:8 --listen 127.0.0.1:$PORT --data-dir "$data/sim" --site-root site \
  > "$OUT/sim.out" 2> "$OUT/sim.err" &
SERVER=$!
sleep 2
TOKEN=$(bench_token 127.0.0.1:$PORT "$data/sim" ./lanes)
for n in 100 1000; do
  ./lanes-bench fanout --addr 127.0.0.1:$PORT --pid $SERVER --clients $n --seconds 20 --token "$TOKEN" >> "$OUT/fanout.md" 2>&1
  sleep 2
done
kill -TERM $SERVER; wait $SERVER
rm -rf "$data"
