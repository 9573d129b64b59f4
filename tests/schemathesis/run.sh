#!/usr/bin/env bash
# Fuzzes the REST API from its OpenAPI description (docs/openapi.json, served at
# /api/v1/openapi.json) with schemathesis, as an admin: fails on any 5xx and on any answer
# that breaks the schema. Bounded by --max-time. Usage: run.sh LANES_BINARY ST_BINARY [SECONDS]
set -euo pipefail
lanes=$1
st=$2
seconds=${3:-150}
work=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -m 700 "$work/data"
echo "schemathesis passphrase" | "$lanes" user add --username fuzz --admin --unix-user nobody \
  --password-stdin --data-dir "$work/data" >/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$lanes" serve --listen "127.0.0.1:$port" --data-dir "$work/data" --gpus sim:4 \
  >"$work/server.log" 2>&1 &
pid=$!
base="http://127.0.0.1:$port"
for _ in $(seq 100); do
  curl -sf "$base/healthz" >/dev/null && break
  sleep 0.1
done
cookie=$(curl -sf -c - -H 'content-type: application/json' \
  -d '{"username":"fuzz","password":"schemathesis passphrase"}' "$base/api/v1/auth/login" \
  | awk '$6 == "lanes_session" {print $7}')
token=$(curl -sf -b "lanes_session=$cookie" -H 'content-type: application/json' \
  -d '{"name":"schemathesis"}' "$base/api/v1/tokens" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["secret"])')
# The websocket routes are not HTTP request/response operations; the token routes would let the
# fuzzer revoke its own token, and the password route and a user's update (a password reset of
# the fuzzer's own account revokes its token: every later call was a 401, 21 operations never
# reached) would lock it out. One worker: with two,
# CPython 3.11's ast.parse, which Hypothesis calls to describe its filters, is not thread-safe and
# once failed the run with "AST constructor recursion depth mismatch" (a tool error, not ours).
status=0
"$st" run "$base/api/v1/openapi.json" \
  --checks not_a_server_error,response_schema_conformance \
  --header "Authorization: Bearer $token" \
  --exclude-path-regex '/ws$' \
  --exclude-path '/api/v1/tokens/{id}' \
  --exclude-path '/api/v1/me/password' \
  --exclude-path '/api/v1/users/{id}' \
  --exclude-path '/api/v1/auth/logout' \
  --max-time "$seconds" \
  --workers 1 \
  --no-color \
  --seed 1 || status=$?
if grep -q "panicked" "$work/server.log"; then
  echo "the server panicked under schemathesis:" >&2
  grep -A5 "panicked" "$work/server.log" >&2
  status=1
fi
exit $status
