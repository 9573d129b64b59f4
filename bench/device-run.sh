#!/usr/bin/env bash
# Real-GPU check of the terminal client (issue 18; run through the `device` tool or by hand, as
# root, with PyTorch). Expects DEVRUN with a release `lanes`; writes every output under OUT.
# A lab member (Unix account lanesrun, Lanes user ada, PyTorch on the PATH of their login shell)
# types `lanes run --gpus 1 -- python3 -c …` in their own shell: PyTorch sees one card, the
# booked one; while it runs, the node reports the process in the booked lane (not unbooked);
# the booking is released when it ends, and the status comes back. With two or more cards, two
# `lanes run` at once get different cards.
set -u
# shellcheck source=bench/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
enter_devrun 3996
TORCH_BIN=$(dirname "$(command -v python3)")
id lanesrun > /dev/null 2>&1 || useradd --create-home --shell /bin/bash lanesrun
# The member's own environment: their venv on the PATH, as `source venv/bin/activate` would.
echo "export PATH=$TORCH_BIN:\$PATH" >> ~lanesrun/.profile
install -m 0755 lanes /usr/local/bin/lanes
nvidia-smi -L > "$OUT/run-nvidia-smi-L.txt" 2>&1
COUNT=$(nvidia-smi -L | grep -c '^GPU')
data=$(mktemp -d)
printf 'ada passphrase\n' | lanes user add --username ada --unix-user lanesrun \
  --password-stdin --data-dir "$data" > /dev/null
lanes serve --gpus nvml --listen 127.0.0.1:$PORT --data-dir "$data" \
  > "$OUT/run-serve.out" 2> "$OUT/run-serve.err" &
SERVER=$!
sleep 3
TOKEN=$(curl -s -c "$data/c" -H 'content-type: application/json' \
  -d '{"username":"ada","password":"ada passphrase"}' $URL/api/v1/auth/login > /dev/null \
  && curl -s -b "$data/c" -H 'content-type: application/json' -d '{"name":"device"}' \
    $URL/api/v1/tokens | sed -n 's/.*"secret":"\([^"]*\)".*/\1/p')
as_ada() { su - lanesrun -c "LANES_URL=$URL LANES_TOKEN=$TOKEN $*"; }
SCRIPT='import torch, time
print("device_count", torch.cuda.device_count())
print("uuid GPU-" + str(torch.cuda.get_device_properties(0).uuid))
x = torch.randn(8192, 8192, device="cuda")
end = time.time() + 12
while time.time() < end:
    y = x @ x
torch.cuda.synchronize()
raise SystemExit(5)'
echo "$SCRIPT" > /tmp/lanes-run-check.py
chmod 0644 /tmp/lanes-run-check.py
{
  echo "\$ lanes run --gpus 1 --for 10m -- python3 /tmp/lanes-run-check.py   (as lanesrun, login shell)"
  as_ada "lanes run --gpus 1 --for 10m -- python3 /tmp/lanes-run-check.py" 2>&1
  echo "exit $?"
} > "$OUT/run-output.txt" &
RUN=$!
sleep 8
# What the dashboard shows meanwhile: the card's processes and their lanes, the booking.
curl -s -H "authorization: Bearer $TOKEN" $URL/api/v1/gpus > "$OUT/run-gpus-during.json"
curl -s -H "authorization: Bearer $TOKEN" "$URL/api/v1/bookings" > "$OUT/run-bookings-during.json"
as_ada "NO_COLOR=1 lanes status" > "$OUT/run-status-during.txt" 2>&1
wait $RUN
curl -s -H "authorization: Bearer $TOKEN" "$URL/api/v1/bookings" > "$OUT/run-bookings-after.json"
curl -s -H "authorization: Bearer $TOKEN" "$URL/api/v1/violations" > "$OUT/run-violations.json"
if [ "$COUNT" -ge 2 ]; then
  {
    for i in 1 2; do
      as_ada "lanes run --gpus 1 --for 5m -- python3 -c 'import torch, os, time; print(os.environ[\"CUDA_VISIBLE_DEVICES\"], torch.cuda.device_count()); time.sleep(5)'" &
    done
    wait
  } > "$OUT/run-two-at-once.txt" 2>&1
fi
kill $SERVER
wait $SERVER 2> /dev/null
echo "done: $(ls "$OUT")"
