#!/usr/bin/env bash
# Real-GPU check of notebooks in a booking (issue 46; run through the `device` tool or by hand,
# as root, with PyTorch). Expects DEVRUN with `lanes` and WHEELS (jupyter-server and ipykernel
# wheels for the host's Python, downloaded elsewhere: the host has no network); writes every
# output under OUT. A lab member (Unix account lanesnb, Lanes user ada) has PyTorch on the PATH of
# their login shell and installs Jupyter Server for themselves (pip --target, from the wheels);
# they type `lanes jupyter --gpus 1`, and a PyTorch cell runs through the portal's
# /sessions/ID/ on the booked card, as them, behind the device wall; the booking's release
# ends it.
set -u
# shellcheck source=bench/lib.sh
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/lib.sh"
enter_devrun 3946
TORCH_BIN=$(dirname "$(command -v python3)")
WHEELS=${WHEELS:-$PWD/wheels}
id lanesnb > /dev/null 2>&1 || useradd --create-home --shell /bin/bash lanesnb
home=$(getent passwd lanesnb | cut -d: -f6)
"$TORCH_BIN/python3" -m pip install -q --no-index --find-links "$WHEELS" --target "$home/jpkgs" \
  jupyter-server ipykernel > "$OUT/notebook-pip.txt" 2>&1
chown -R lanesnb: "$home/jpkgs"
# Their own environment: PyTorch's Python on the PATH, their Jupyter beside it.
echo "export PATH=$home/jpkgs/bin:$TORCH_BIN:\$PATH PYTHONPATH=$home/jpkgs" >> "$home/.profile"
install -m 0755 lanes /usr/local/bin/lanes
nvidia-smi -L > "$OUT/notebook-nvidia-smi-L.txt" 2>&1
data=$(mktemp -d)
notices=$(mktemp -d); chmod 711 "$notices"
printf 'ada passphrase\n' | lanes user add --username ada --unix-user lanesnb \
  --password-stdin --data-dir "$data" > /dev/null
lanes serve --gpus nvml --listen 127.0.0.1:$PORT --data-dir "$data" --notice-dir "$notices" \
  > "$OUT/notebook-serve.out" 2> "$OUT/notebook-serve.err" &
SERVER=$!
sleep 3
TOKEN=$(curl -s -c "$data/c" -H 'content-type: application/json' \
  -d '{"username":"ada","password":"ada passphrase"}' $URL/api/v1/auth/login > /dev/null \
  && curl -s -b "$data/c" -H 'content-type: application/json' -d '{"name":"device"}' \
    $URL/api/v1/tokens | sed -n 's/.*"secret":"\([^"]*\)".*/\1/p')
as_ada() { su - lanesnb -c "LANES_URL=$URL LANES_TOKEN=$TOKEN $*"; }
{
  echo "\$ lanes jupyter --gpus 1 --for 20m   (as lanesnb, login shell)"
  as_ada "lanes jupyter --gpus 1 --for 20m" 2>&1
  echo "exit $?"
} > "$OUT/notebook-open.txt"
cat "$OUT/notebook-open.txt"
SESSION=$(grep -o '/sessions/[0-9]*/' "$OUT/notebook-open.txt" | head -n 1 | tr -dc 0-9)
cat > /tmp/lanes-cell.py <<'PY'
import os, torch, time
print("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
print("uid", os.getuid(), "device_count", torch.cuda.device_count(), torch.cuda.get_device_name(0))
print("uuid GPU-" + str(torch.cuda.get_device_properties(0).uuid))
x = torch.randn(8192, 8192, device="cuda")
torch.cuda.synchronize(); t = time.time()
for _ in range(50):
    y = x @ x
torch.cuda.synchronize()
print(f"50 matmuls of 8192x8192 in {time.time() - t:.3f} s: {50 * 2 * 8192**3 / (time.time() - t) / 1e12:.1f} TFLOP/s")
PY
PYTHONPATH=$home/jpkgs "$TORCH_BIN/python3" "$HERE/notebook-cell.py" "$URL" "$TOKEN" "$SESSION" /tmp/lanes-cell.py \
  > "$OUT/notebook-cell.txt" 2>&1 &
CELL=$!
sleep 6
nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$OUT/notebook-nvidia-smi-apps.txt" 2>&1
curl -s -H "authorization: Bearer $TOKEN" $URL/api/v1/gpus > "$OUT/notebook-gpus-during.json"
wait $CELL
cat "$OUT/notebook-cell.txt"
curl -s -H "authorization: Bearer $TOKEN" "$URL/api/v1/jobs/$SESSION" > "$OUT/notebook-job-running.json"
# The booking's end ends it (released here rather than waited for).
BOOKING=$(sed -n 's/.*"booking_id":\([0-9]*\).*/\1/p' "$OUT/notebook-job-running.json")
curl -s -X DELETE -H "authorization: Bearer $TOKEN" "$URL/api/v1/bookings/$BOOKING" > /dev/null
for _ in $(seq 60); do
  curl -s -H "authorization: Bearer $TOKEN" "$URL/api/v1/jobs/$SESSION" > "$OUT/notebook-job-after.json"
  grep -q '"state":"running"' "$OUT/notebook-job-after.json" || break
  sleep 1
done
curl -s -o /dev/null -w '%{http_code}\n' -H "authorization: Bearer $TOKEN" "$URL/sessions/$SESSION/api/status" \
  > "$OUT/notebook-status-after-end.txt"
ps -u lanesnb -o pid,cmd > "$OUT/notebook-ps-after.txt" 2>&1
kill $SERVER
