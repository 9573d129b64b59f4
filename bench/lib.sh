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
