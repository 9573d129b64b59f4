#!/usr/bin/env bash
# Real-GPU check of issue 15 (run through the `device` tool or by hand, as root, on a cgroup v2
# host with NVIDIA GPUs and PyTorch in /opt/torch/.venv). Expects DEVRUN with a release `lanes`;
# writes every output under OUT.
#
# A Unix account `lanesuser` whose login profile puts the PyTorch venv on PATH (as a user's
# `source venv/bin/activate` in ~/.profile would) books the last GPU (GPU 1 on a two-card host)
# and submits, through the API, jobs typed as they would be in a shell:
#   as-typed  `python3 -c …`: which python, uid, the mask, what torch sees;
#   override  sets CUDA_VISIBLE_DEVICES=0,1 inside the script before importing torch, opens
#             /dev/nvidia0 by hand, and holds memory on every card it can reach while
#             nvidia-smi is read from outside;
#   escape    `setsid python3 …` holding the GPU, double-forked out of the job's session; the
#             slot's end must still kill it, and its cgroup must go.
# On a one-card host no other card exists to wall off, so a second server then runs a
# simulated two-card node whose card 0 stands for the real /dev/nvidia0 (card 1 for /dev/null)
# and the override job runs booked on card 1: the wall must keep it off the real GPU.
set -u
# shellcheck source=bench/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
SLOT_SECONDS=${SLOT_SECONDS:-75}
enter_devrun 3997
PY=/usr/bin/python3
id lanesuser > /dev/null 2>&1 || useradd --create-home --shell /bin/bash lanesuser
# The user's own profile: their venv first on PATH.
printf '%s\n' 'export PATH="/opt/torch/.venv/bin:$PATH"' >> /home/lanesuser/.profile
chown lanesuser: /home/lanesuser/.profile
{ nvidia-smi -L; ls -l /dev/nvidia*; stat -fc %T /sys/fs/cgroup; cat /proc/self/cgroup; } \
  > "$OUT/wall-host.txt" 2>&1
su - lanesuser -c 'command -v python3' > "$OUT/wall-login-python3.txt" 2>&1

# A fresh server (`lanes serve` with NAME's outputs and the extra flags), user ada (Unix account
# lanesuser) logged in, and its cards in $OUT/wall-NAME-gpus.json.
serve_as_ada() { # NAME FLAGS...
  local name=$1; shift
  data=$(mktemp -d)
  printf 'ada passphrase\n' | ./lanes user add --username ada --unix-user lanesuser \
    --password-stdin --data-dir "$data" > /dev/null
  ./lanes serve "$@" --listen 127.0.0.1:$PORT --data-dir "$data" --site-root site \
    --job-grace 5s > "$OUT/wall-$name-serve.out" 2> "$OUT/wall-$name-serve.err" &
  SERVER=$!
  sleep 3
  curl -s -c "$data/c" -H 'content-type: application/json' \
    -d '{"username":"ada","password":"ada passphrase"}' $URL/api/v1/auth/login > /dev/null
  curl -s -b "$data/c" $URL/api/v1/gpus > "$OUT/wall-$name-gpus.json"
}
./lanes doctor > "$OUT/wall-doctor.txt" 2>&1
serve_as_ada nvml --gpus nvml
LAST=$($PY -c 'import json,sys; g=json.load(open(sys.argv[1])); print(max(c["index"] for c in g))' "$OUT/wall-nvml-gpus.json")
CARD=$($PY -c 'import json,sys; g=json.load(open(sys.argv[1])); print([c["uuid"] for c in g if c["index"]==int(sys.argv[2])][0])' "$OUT/wall-nvml-gpus.json" "$LAST")
echo "booked GPU $LAST = $CARD" > "$OUT/wall-booked.txt"
START=$(date -u +%Y-%m-%dT%H:%M:%SZ)
END=$(date -u -d "+$SLOT_SECONDS sec" +%Y-%m-%dT%H:%M:%SZ)
curl -s -b "$data/c" -H 'content-type: application/json' \
  -d "{\"gpus\":[\"$CARD\"],\"start\":\"$START\",\"end\":\"$END\"}" $URL/api/v1/bookings > "$OUT/wall-booking.json"
BOOKING=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$OUT/wall-booking.json")

submit() { # NAME ARGV_JSON
  curl -s -b "$data/c" -H 'content-type: application/json' \
    -d "{\"booking_id\": $BOOKING, \"name\": \"$1\", \"argv\": $2}" $URL/api/v1/jobs > "$OUT/wall-$1-submitted.json"
  $PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$OUT/wall-$1-submitted.json"
}
collect() { # NAME ID
  curl -s -b "$data/c" $URL/api/v1/jobs/$2 > "$OUT/wall-$1-job.json"
  curl -s -b "$data/c" "$URL/api/v1/jobs/$2/log" > "$OUT/wall-$1-stdout.txt"
  curl -s -b "$data/c" "$URL/api/v1/jobs/$2/log?stream=stderr" > "$OUT/wall-$1-stderr.txt"
}

AS_TYPED=$(submit as-typed '["python3", "-c", "import os, sys, torch; print(\"python\", sys.executable); print(\"uid\", os.getuid(), \"user\", os.environ[\"USER\"], \"cwd\", os.getcwd()); print(\"CUDA_VISIBLE_DEVICES\", os.environ[\"CUDA_VISIBLE_DEVICES\"]); print(\"device_count\", torch.cuda.device_count()); print(\"uuid\", torch.cuda.get_device_properties(0).uuid)"]')
OVERRIDE_ARGV='["python3", "-u", "-c", "import os, time\nos.environ[\"CUDA_VISIBLE_DEVICES\"] = \"0,1\"\ntry:\n    open(\"/dev/nvidia0\", \"rb\").close(); print(\"/dev/nvidia0 opened\")\nexcept OSError as e:\n    print(\"/dev/nvidia0 refused:\", e)\nimport torch\nn = torch.cuda.device_count()\nprint(\"device_count\", n)\nheld = []\nfor i in range(n):\n    try:\n        held.append(torch.ones(256 << 20, device=f\"cuda:{i}\"))\n        print(\"cuda:%d\" % i, torch.cuda.get_device_properties(i).uuid, \"holds 1 GiB\")\n    except Exception as e:\n        print(\"cuda:%d failed:\" % i, type(e).__name__, str(e).splitlines()[0])\nprint(\"holding\", flush=True)\ntime.sleep(20)"]'
OVERRIDE=$(submit override "$OVERRIDE_ARGV")
ESCAPE=$(submit escape '["bash", "-c", "setsid python3 -c \"import os, time, torch; x = torch.ones(1, device=\\\"cuda\\\"); print(\\\"escaped\\\", os.getpid(), \\\"sid\\\", os.getsid(0), flush=True); time.sleep(3600)\" & echo main $$; sleep 3600"]')
echo "as-typed $AS_TYPED override $OVERRIDE escape $ESCAPE" > "$OUT/wall-jobs.txt"
sleep 15
collect as-typed "$AS_TYPED"
nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv > "$OUT/wall-override-nvidia-smi-apps.csv"
ps -eo pid,sid,user,cgroup:60,args | grep -E 'python3|sleep 3600' | grep -v grep > "$OUT/wall-ps-during.txt"
ls /sys/fs/cgroup/lanes > "$OUT/wall-cgroups-during.txt" 2>&1
for j in /sys/fs/cgroup/lanes/job-*; do echo "$j: $(tr '\n' ' ' < "$j/cgroup.procs")"; done >> "$OUT/wall-cgroups-during.txt" 2>&1
sleep 15
collect override "$OVERRIDE"
# Until the slot's end plus the grace period and a margin.
sleep $(($(date -d "$END" +%s) + 12 - $(date +%s)))
collect escape "$ESCAPE"
nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv > "$OUT/wall-after-nvidia-smi-apps.csv"
ps -eo pid,sid,user,args | grep -E 'python3|sleep 3600' | grep -v grep > "$OUT/wall-ps-after.txt"
ls /sys/fs/cgroup/lanes > "$OUT/wall-cgroups-after.txt" 2>&1
kill -TERM $SERVER; wait $SERVER

if [ "$LAST" = 0 ]; then
  PORT=$((PORT + 1)); URL=http://127.0.0.1:$PORT
  serve_as_ada sim --gpus sim:2 --sim-background false --sim-device-files /dev/nvidia0,/dev/null
  CARD=$($PY -c 'import json,sys; print([c["uuid"] for c in json.load(open(sys.argv[1])) if c["index"]==1][0])' "$OUT/wall-sim-gpus.json")
  START=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  END=$(date -u -d "+60 sec" +%Y-%m-%dT%H:%M:%SZ)
  curl -s -b "$data/c" -H 'content-type: application/json' \
    -d "{\"gpus\":[\"$CARD\"],\"start\":\"$START\",\"end\":\"$END\"}" $URL/api/v1/bookings > "$OUT/wall-sim-booking.json"
  BOOKING=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$OUT/wall-sim-booking.json")
  SIMJOB=$(submit sim-override "$OVERRIDE_ARGV")
  sleep 12
  nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv > "$OUT/wall-sim-override-nvidia-smi-apps.csv"
  sleep 15
  collect sim-override "$SIMJOB"
  kill -TERM $SERVER; wait $SERVER
fi
echo done > "$OUT/wall-done.txt"
