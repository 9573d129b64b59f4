#!/usr/bin/env bash
# Issue 13 on the real GPU host: a job under the new launch path (dir entered as the user, logs
# through keepers with a cap, children stopped when the main process ends), on NVML cards.
set -u
L=$PWD/devrun/lanes
chmod +x $L
useradd --system --no-create-home --shell /usr/sbin/nologin lanesjob 2>/dev/null
D=$(mktemp -d); mkdir -m 700 $D/data
echo "ada passphrase 1" | $L user add --username ada --unix-user lanesjob --password-stdin --data-dir $D/data >/dev/null
$L serve --listen 127.0.0.1:3700 --data-dir $D/data --gpus nvml --job-log-limit 1MiB --job-grace 2s --site-root /tmp > $OUT/server.log 2>&1 &
for i in $(seq 100); do curl -sf 127.0.0.1:3700/healthz >/dev/null && break; sleep 0.2; done
B=http://127.0.0.1:3700
curl -s $B/healthz > $OUT/healthz.json
curl -s -c $D/c -H 'content-type: application/json' -d '{"username":"ada","password":"ada passphrase 1"}' $B/api/v1/auth/login >/dev/null
G=$(curl -s -b $D/c $B/api/v1/gpus | python3 -c 'import json,sys; g=sorted(json.load(sys.stdin), key=lambda g: g["index"]); print(g[-1]["uuid"])')
S=$(date -u +%FT%TZ); E=$(date -u -d '+3 min' +%FT%TZ)
BK=$(curl -s -b $D/c -H 'content-type: application/json' -d "{\"gpus\":[\"$G\"],\"start\":\"$S\",\"end\":\"$E\"}" $B/api/v1/bookings | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
PY=/opt/torch/.venv/bin/python3
submit() { curl -s -b $D/c -H 'content-type: application/json' -d "$1" $B/api/v1/jobs; }
{
echo "booked $G as booking $BK"
echo "--- cwd /root (root-only):"; J1=$(submit "{\"booking_id\":$BK,\"argv\":[\"$PY\",\"-c\",\"print(1)\"],\"cwd\":\"/root\"}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
echo "--- relative cwd:"; submit "{\"booking_id\":$BK,\"argv\":[\"$PY\"],\"cwd\":\"../root\"}"; echo
SCRIPT='import os, subprocess, torch; print("uid", os.getuid(), "cwd", os.getcwd(), "devices", torch.cuda.device_count(), torch.cuda.get_device_name(0), flush=True); x = torch.ones(4096, 4096, device="cuda"); print("sum", (x @ x).sum().item(), flush=True); subprocess.Popen(["sleep", "777"]); print("y" * 3000000)'
J2=$(submit "$(python3 -c 'import json,sys; print(json.dumps({"booking_id": int(sys.argv[1]), "argv": [sys.argv[2], "-c", sys.argv[3]], "cwd": "/tmp"}))' $BK $PY "$SCRIPT")" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
for i in $(seq 60); do st=$(curl -s -b $D/c $B/api/v1/jobs/$J2 | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])'); [ "$st" = exited ] || [ "$st" = failed ] || [ "$st" = killed ] && break; sleep 1; done
echo "--- job 1:"; curl -s -b $D/c $B/api/v1/jobs/$J1 | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["state"], "|", j["message"])'
echo "--- job 2:"; curl -s -b $D/c $B/api/v1/jobs/$J2 | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["state"], j["exit_code"], "|", j["message"])'
echo "--- job 2 log head:"; curl -s -b $D/c -H 'Range: bytes=0-200' $B/api/v1/jobs/$J2/log | head -3
echo "--- job 2 log size: $(curl -s -b $D/c $B/api/v1/jobs/$J2/log | wc -c) bytes"
echo "--- job 2 log tail=1:"; curl -s -b $D/c "$B/api/v1/jobs/$J2/log?tail=1"
sleep 4
echo "--- leftover sleep 777 after the job:"; ps -eo pid,user,args | grep "[s]leep 777" || echo none
echo "--- log files:"; ls -la $D/data $D/data/jobs/*
echo "--- stderr:"; curl -s -b $D/c "$B/api/v1/jobs/$J2/log?stream=stderr" | tail -5
} > $OUT/check.txt 2>&1
kill %1; sleep 1
