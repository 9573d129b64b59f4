#!/usr/bin/env bash
# A notebook through the portal (issue 46): a kernel message's round trip through
# /sessions/ID/ against the same Jupyter on its own Unix socket, p50 and p99, in the same run on
# the same kernel (target: the proxy adds at most 5 ms at p50), and what an open, idle session
# costs the server. Needs root (the notebook runs as its member) and MEMBER, a Unix account whose
# login profile has Jupyter (the notebook integration test makes lanes-test-nb, with
# jupyter-server and ipykernel in ~/jvenv).
# LANES, BENCH: the binaries (default: the release builds).
set -euo pipefail
cd "$(dirname "$0")/.."
LANES=${LANES:-target/release/lanes}
BENCH=${BENCH:-target/release/lanes-bench}
MEMBER=${MEMBER:-lanes-test-nb}
ROUNDS=${ROUNDS:-2000}
work=$(mktemp -d /tmp/lanes-notebook-bench.XXXXXX)
chmod 711 "$work"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
pid=
# Jobs outlive their server (it adopts them again when it comes back): the notebook's booking is
# released first, which ends the notebook, then the server stops.
cleanup() {
  [ -n "${booking:-}" ] && curl -s -X DELETE -H "authorization: Bearer $token" \
    "http://127.0.0.1:$port/api/v1/bookings/$booking" > /dev/null && sleep 3
  [ -n "$pid" ] && kill "$pid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
"$LANES" serve --gpus sim:2 --listen "127.0.0.1:$port" --data-dir "$work/data" \
  --notice-dir "$work/notice" > "$work/out" 2> "$work/err" &
pid=$!
for _ in $(seq 300); do grep -q listening "$work/out" && break; sleep 0.1; done
printf 'bench passphrase\n' | "$LANES" user add --username "$MEMBER" --unix-user "$MEMBER" --password-stdin --data-dir "$work/data" > /dev/null
curl -s -c "$work/cookies" -H 'content-type: application/json' \
  -d "{\"username\":\"$MEMBER\",\"password\":\"bench passphrase\"}" "http://127.0.0.1:$port/api/v1/auth/login" > /dev/null
token=$(curl -s -b "$work/cookies" -H 'content-type: application/json' -d '{"name":"bench"}' \
  "http://127.0.0.1:$port/api/v1/tokens" | sed -n 's/.*"secret":"\([^"]*\)".*/\1/p')
export LANES_URL=http://127.0.0.1:$port LANES_TOKEN=$token
url=$(HOME=/nonexistent "$LANES" jupyter --gpus 1 --for 1h)
session=$(basename "$url")
booking=$(curl -s -H "authorization: Bearer $token" "$LANES_URL/api/v1/jobs/$session" \
  | sed -n 's/.*"booking_id":\([0-9]*\).*/\1/p')
socket=$(find "$work/notice" -name jupyter.sock | head -n 1)
jupyter_token=$(cat "$work"/data/jobs/*/session-token)
echo "lanes: $("$LANES" --version 2>/dev/null || echo "$LANES"), session $session, $(nproc) cores"
echo
"$BENCH" notebook --portal "$LANES_URL" --session "$session" --socket "$socket" \
  --jupyter-token "$jupyter_token" --rounds "$ROUNDS" --pid "$pid"
