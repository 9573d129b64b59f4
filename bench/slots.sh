#!/usr/bin/env bash
# The slot search's latency against a reference in the same run (issue 18): a release
# `lanes serve --gpus sim:64` with 400 bookings spread over the week; `GET /api/v1/slots` for a
# search answered at once (1 card for 1 h) and for one that must scan the whole week and find
# nothing (64 cards for 1 h while one card is held all week), against `GET /api/v1/bookings` of
# the same week (the read the calendar makes). Prints the median and p90 of 30 calls each.
set -eu
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
BIN=${BIN:-target/release/lanes}
PORT=${PORT:-3994}
ADDR=127.0.0.1:$PORT
data=$(mktemp -d)
"$BIN" serve --gpus sim:64 --listen $ADDR --data-dir "$data" --sim-background false \
  > /dev/null 2>&1 &
SERVER=$!
trap 'kill $SERVER 2> /dev/null; rm -rf "$data"' EXIT
sleep 2
TOKEN=$(bench_token $ADDR "$data" "$BIN")
auth="authorization: Bearer $TOKEN"
uuids=$(curl -s -H "$auth" http://$ADDR/api/v1/gpus | grep -o '"uuid":"[^"]*"' | cut -d'"' -f4)
base=$(( $(date +%s) / 3600 * 3600 + 3600 ))
i=0
for uuid in $uuids; do
  # Card 0 is held for the whole week; the others get short bookings here and there.
  if [ $i -eq 0 ]; then
    slots="$base:$(( base + 8 * 86400 ))"
  else
    slots=$(for k in 0 1 2 3 4 5; do s=$(( base + (i * 7 + k * 97) % 160 * 3600 )); echo "$s:$(( s + 7200 ))"; done)
  fi
  for slot in $slots; do
    s=${slot%:*}; e=${slot#*:}
    curl -s -o /dev/null -H "$auth" -H 'content-type: application/json' \
      -d "{\"gpus\":[\"$uuid\"],\"start\":\"$(date -u -d @$s +%FT%TZ)\",\"end\":\"$(date -u -d @$e +%FT%TZ)\"}" \
      http://$ADDR/api/v1/bookings
  done
  i=$((i + 1))
done
booked=$(curl -s -H "$auth" "http://$ADDR/api/v1/bookings" | grep -o '"id":' | wc -l)
measure() {
  for _ in $(seq 30); do curl -s -o /dev/null -w '%{time_total}\n' -H "$auth" "$1"; done \
    | sort -n | awk '{a[NR]=$1} END {printf "median %.1f ms, p90 %.1f ms\n", a[int(NR/2)]*1000, a[int(NR*0.9)]*1000}'
}
from=$(date -u -d @$base +%FT%TZ); to=$(date -u -d @$(( base + 7 * 86400 )) +%FT%TZ)
echo "$booked bookings on 64 simulated cards"
echo "reference GET /api/v1/bookings (the week): $(measure "http://$ADDR/api/v1/bookings?from=$from&to=$to")"
echo "GET /api/v1/slots, 1 card for 1 h (found at once): $(measure "http://$ADDR/api/v1/slots?gpus=1&duration=1h")"
echo "GET /api/v1/slots, 64 cards for 1 h (none in the week): $(measure "http://$ADDR/api/v1/slots?gpus=64&duration=1h")"
