#!/usr/bin/env bash
# Card health on a real GPU host (issue 44), through the `device` tool or by hand. Expects DEVRUN
# with `lanes` and `lanes-bench` from a release build; writes its outputs under OUT (few files:
# the device tool brings back eight at most). No fault can be provoked on a lent card (never
# reset it or change its mode): this reads every counter, checks that Xids are read from the
# kernel log (a test line in the driver's format), shows `lanes doctor` and each card's health
# in the API and /metrics, and measures what the kernel log and the counters cost per poll.
# ROUNDS sets the benchmark's polls.
set -u
# shellcheck source=bench/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
enter_devrun 3998
REPORT="$OUT/report.txt"
say() { echo "=== $* ($(date +%T))" >> "$REPORT"; }

say "nvidia-smi -q (ECC, retirement, row remapper, performance)"
nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER,PERFORMANCE >> "$REPORT" 2>&1
say "lanes doctor"
./lanes doctor >> "$REPORT" 2>&1; echo "exit $?" >> "$REPORT"
./lanes doctor --json > "$OUT/doctor.json" 2>&1

data=$(mktemp -d)
RUST_LOG=info ./lanes serve --gpus nvml --listen 127.0.0.1:$PORT --data-dir "$data" \
  > "$data/serve.out" 2> "$data/serve.err" &
SERVER=$!
sleep 4
TOKEN=$(bench_token 127.0.0.1:$PORT "$data" ./lanes)
AUTH="Authorization: Bearer $TOKEN"
# Counters are read at the process interval; give it two.
sleep 8
curl -s -H "$AUTH" $URL/api/v1/health > "$OUT/health.json"
# The kernel log path end to end, without touching the card: a line in the driver's Xid format
# written to /dev/kmsg (root may add lines to the kernel log). Xid 13 is an application's error:
# the card keeps its level and the change names the process.
bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1)
address=$(echo "$bus" | sed -E 's/^0*([0-9A-Fa-f]{4}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2}).*/\1:\2:\3/' | tr 'A-F' 'a-f')
say "an Xid 13 line written to /dev/kmsg for PCI:$address (a test line, not the driver's)"
if echo "NVRM: Xid (PCI:$address): 13, pid=$$, name=device-health, Graphics Exception (lanes test line, not from the driver)" > /dev/kmsg 2>> "$REPORT"; then
  sleep 3
  curl -s -H "$AUTH" $URL/api/v1/health >> "$REPORT"; echo >> "$REPORT"
fi
say "GET /api/v1/health/changes"
curl -s -H "$AUTH" "$URL/api/v1/health/changes" >> "$REPORT"; echo >> "$REPORT"
say "/metrics, health series"
curl -s $URL/metrics | grep -E '^lanes_gpu_(health_state|xid|ecc|remapped|retired|pcie|clocks_throttled)' >> "$REPORT"
say "the server's threads (no thread waits on NVML events: the poller takes them)"
for t in /proc/$SERVER/task/*; do cat "$t/comm"; done | sort | uniq -c >> "$REPORT"
say "stopping the server (SIGTERM)"
kill -TERM $SERVER
for _ in $(seq 40); do kill -0 $SERVER 2>/dev/null || break; sleep 0.25; done
if kill -0 $SERVER 2>/dev/null; then say "still running after 10 s: SIGKILL"; kill -KILL $SERVER; fi
wait $SERVER; echo "exit $?" >> "$REPORT"
say "server log (events, health)"
grep -iE "nvml events|xid|health|error" "$data/serve.err" | tail -20 >> "$REPORT"
rm -rf "$data"

say "lanes-bench poll"
timeout 300 ./lanes-bench poll --rounds "${ROUNDS:-5000}" > "$OUT/poll.md" 2>&1
say "done"
