#!/usr/bin/env bash
# Card health on a real GPU host (issue 44), through the `device` tool or by hand. Expects DEVRUN
# with `lanes` and `lanes-bench` from a release build; writes every output under OUT. No fault
# can be provoked on a lent card (never reset it or change its mode): this reads every counter,
# registers the Xid and ECC event set, shows `lanes doctor` and each card's health in the API
# and /metrics, and measures what the event thread and the counter reads cost per poll.
set -u
# shellcheck source=bench/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
enter_devrun 3998

nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER,PERFORMANCE > "$OUT/nvidia-smi-q.txt" 2>&1
./lanes doctor > "$OUT/doctor.txt" 2>&1; echo "exit $?" >> "$OUT/doctor.txt"
./lanes doctor --json > "$OUT/doctor.json" 2>&1

data=$(mktemp -d)
RUST_LOG=info ./lanes serve --gpus nvml --listen 127.0.0.1:$PORT --data-dir "$data" \
  > "$OUT/serve.out" 2> "$OUT/serve.err" &
SERVER=$!
sleep 4
TOKEN=$(bench_token 127.0.0.1:$PORT "$data" ./lanes)
AUTH="Authorization: Bearer $TOKEN"
# Counters are read at the process interval; give it two.
sleep 8
curl -s -H "$AUTH" $URL/api/v1/health > "$OUT/health.json"
curl -s -H "$AUTH" $URL/api/v1/gpus > "$OUT/gpus.json"
curl -s -H "$AUTH" "$URL/api/v1/health/changes" > "$OUT/health-changes.json"
curl -s $URL/metrics | grep -E '^lanes_gpu_(health_state|xid|ecc|remapped|retired|pcie|clocks_throttled)' > "$OUT/metrics-health.txt"
# The event thread: its name in the server's threads, and whether it registered the cards.
ls /proc/$SERVER/task | while read -r t; do cat /proc/$SERVER/task/$t/comm; done | sort | uniq -c > "$OUT/threads.txt"
grep -i "nvml events\|xid" "$OUT/serve.err" > "$OUT/events-log.txt" || true
kill -TERM $SERVER; wait $SERVER
rm -rf "$data"

./lanes-bench poll --rounds 20000 > "$OUT/poll.md" 2>&1
