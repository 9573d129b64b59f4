#!/usr/bin/env bash
# A cold `make build`, phase by phase, as on a fresh machine: an empty cargo home (so the
# registry is downloaded again), target directory and tools directory of its own, so nothing
# downloaded or compiled before helps. Rust itself (rustup, the wasm target) is kept: a fresh
# machine has it. Prints a Markdown table for docs/benchmarks.md ("First run").
set -euo pipefail
cd "$(dirname "$0")/.."
cold=$(mktemp -d /tmp/lanes-first-run.XXXXXX)
trap 'rm -rf "$cold"' EXIT
export CARGO_HOME=$cold/cargo CARGO_TARGET_DIR=$cold/target TOOLS_DIR=$cold/tools
export PATH=$TOOLS_DIR/binaryen-132.0.0/node_modules/.bin:$HOME/.cargo/bin:$PATH
total=0
phase() {
  local name=$1 t0 t1
  shift
  t0=$(date +%s)
  "$@" >"$cold/phase.log" 2>&1 || { tail -20 "$cold/phase.log"; exit 1; }
  t1=$(date +%s)
  total=$((total + t1 - t0))
  printf '| %s | %d s |\n' "$name" $((t1 - t0))
}
echo "| phase | time |"
echo "|---|---|"
phase "tools: wasm target, wasm-opt (binaryen from npm)" make -s tools
phase "the build step itself (xtask, with wasm-bindgen's library)" cargo build --release -p xtask
phase "web assets: the app in wasm, bindgen, wasm-opt, compression" cargo xtask site
phase "the server, embedding them" env LANES_SITE_DIR="$CARGO_TARGET_DIR/site" \
  cargo build --release -p lanes --bin lanes
printf '| **total** | **%d s** |\n' "$total"
