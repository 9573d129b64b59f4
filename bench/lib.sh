# Shared by the benchmark scripts.

# Prints an API token for a fresh user `bench` (the live channel needs a login).
# Usage: bench_token ADDR DATA_DIR LANES_BINARY
bench_token() {
  printf 'bench passphrase\n' | "$3" user add --username bench --password-stdin --data-dir "$2" > /dev/null
  curl -s -c "$2/cookies" -H 'content-type: application/json' \
    -d '{"username":"bench","password":"bench passphrase"}' "http://$1/api/v1/auth/login" > /dev/null
  curl -s -b "$2/cookies" -H 'content-type: application/json' -d '{"name":"bench"}' \
    "http://$1/api/v1/tokens" | sed -n 's/.*"secret":"\([^"]*\)".*/\1/p'
}

# For the device scripts: makes OUT (default /tmp/lanes-device) for every output, enters DEVRUN
# (default devrun: the carried release build) and sets PORT and URL for a server on port $1.
# Usage: enter_devrun PORT
enter_devrun() {
  DEVRUN=${DEVRUN:-devrun}
  OUT=${OUT:-/tmp/lanes-device}
  mkdir -p "$OUT"
  cd "$DEVRUN" || exit 1
  PORT=$1
  URL=http://127.0.0.1:$PORT
}

# Prints comma-separated API tokens of N fresh users bench1…benchN of the server at ADDR, whose
# database is DB_URL. Usage: bench_tokens N ADDR DATA_DIR LANES_BINARY DB_URL
bench_tokens() {
  local tokens=() i
  for i in $(seq "$1"); do
    printf 'bench passphrase\n' | "$4" user add --username "bench$i" --password-stdin \
      --data-dir "$3" --database-url "$5" > /dev/null
    curl -s -c "$3/cookies$i" -H 'content-type: application/json' \
      -d "{\"username\":\"bench$i\",\"password\":\"bench passphrase\"}" \
      "http://$2/api/v1/auth/login" > /dev/null
    tokens+=("$(curl -s -b "$3/cookies$i" -H 'content-type: application/json' -d '{"name":"bench"}' \
      "http://$2/api/v1/tokens" | sed -n 's/.*"secret":"\([^"]*\)".*/\1/p')")
  done
  (IFS=,; echo "${tokens[*]}")
}
