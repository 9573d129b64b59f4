#!/usr/bin/env bash
# Black-box probes of issue 13 defects against any `lanes` binary (old or new), one line per probe.
# Usage (as root): tests/security-probe.sh path/to/lanes PORT. Not part of `make test`: the
# tests in tests/tests/security.rs hold these checks; this is for comparing two builds.
id lanes-test-job >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin lanes-test-job
lanes=$1; port=$2
work=$(mktemp -d); mkdir -m 700 $work/data
echo "ada passphrase 1" | $lanes user add --username ada --unix-user lanes-test-job --password-stdin --data-dir $work/data >/dev/null
echo "boss passphrase 1" | $lanes user add --username boss --admin --unix-user lanes-test-job --password-stdin --data-dir $work/data >/dev/null
$lanes serve --listen 127.0.0.1:$port --data-dir $work/data --gpus sim:2 --metrics-token tok > $work/log 2>&1 &
pid=$!
B=http://127.0.0.1:$port
for i in $(seq 50); do curl -sf $B/healthz >/dev/null && break; sleep 0.1; done
curl -s -c $work/c -H 'content-type: application/json' -d '{"username":"ada","password":"ada passphrase 1"}' $B/api/v1/auth/login >/dev/null
echo "7  /metrics without token: $(curl -s -o /dev/null -w '%{http_code}' $B/metrics)"
echo "11 next=/\\t/evil: $(curl -s -o /dev/null -w '%{redirect_url}' --data-urlencode 'username=ada' --data-urlencode 'password=ada passphrase 1' --data-urlencode $'next=/\t/evil.example/phish' $B/auth/login)"
echo "11 next=/\\n: $(curl -s -o /dev/null -w '%{http_code}' --data-urlencode 'username=ada' --data-urlencode 'password=ada passphrase 1' --data-urlencode $'next=/\n' $B/auth/login)"
echo "13 ws foreign origin: $(curl -s -o /dev/null -m 2 -w '%{http_code}' -b $work/c -H 'Connection: Upgrade' -H 'Upgrade: websocket' -H 'Sec-WebSocket-Version: 13' -H 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==' -H 'Origin: https://evil.example' $B/api/v1/telemetry/ws)"
echo "16 history to=-262143: $(curl -s -o /dev/null -w '%{http_code}' -b $work/c "$B/api/v1/history?to=-262143-01-01T00:00:00Z")"
G=$(curl -s -b $work/c $B/api/v1/gpus | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["uuid"])')
S=$(date -u +%FT%TZ)
echo "16 booking to year 262142: $(curl -s -o /dev/null -w '%{http_code}' -b $work/c -H 'content-type: application/json' -d "{\"gpus\":[\"$G\"],\"start\":\"$S\",\"end\":\"+262142-01-01T00:00:00Z\"}" $B/api/v1/bookings)"
E=$(date -u -d '+10 min' +%FT%TZ)
BK=$(curl -s -b $work/c -H 'content-type: application/json' -d "{\"gpus\":[\"$G\"],\"start\":\"$S\",\"end\":\"$E\"}" $B/api/v1/bookings | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
echo "1  cwd ../../root: $(curl -s -b $work/c -H 'content-type: application/json' -d "{\"booking_id\":$BK,\"argv\":[\"ls\"],\"cwd\":\"../../root\"}" -o /dev/null -w '%{http_code}' $B/api/v1/jobs)"
codes=$(for i in $(seq 40); do curl -s -o /dev/null -w '%{http_code}\n' -H 'content-type: application/json' -d '{"username":"boss","password":"wrong wrong wrong"}' $B/api/v1/auth/login & done; wait)
echo "9  40 concurrent wrong passwords checked (401s): $(echo "$codes" | grep -c 401)"
rm $work/data/lanes.db
S2=$(date -u -d '+1 hour' +%FT%TZ); E2=$(date -u -d '+2 hour' +%FT%TZ)
echo "18 booking after lanes.db deleted: $(curl -s -o /dev/null -w '%{http_code}' -b $work/c -H 'content-type: application/json' -d "{\"gpus\":[\"$G\"],\"start\":\"$S2\",\"end\":\"$E2\"}" $B/api/v1/bookings)"
echo "18 healthz after deletion: $(curl -s -o /dev/null -w '%{http_code}' $B/healthz)"
echo "3  data dir and database: $(stat -c '%a %n' $work/data $work/data/lanes.db-wal 2>/dev/null | tr '\n' ' ')"
kill $pid; wait $pid 2>/dev/null; rm -rf $work
