#!/usr/bin/env bash
# Runs `make` targets one after another and prints how long each took, as the phase table
# docs/benchmarks.md keeps (also written to target/ci-phases.md). Stops at the first that fails.
set -uo pipefail
table="| phase | seconds |
|---|---:|"
total=0
finish() {
    mkdir -p target
    printf '%s\n| **total** | **%d** |\n' "$table" "$total" | tee target/ci-phases.md
}
for phase in "$@"; do
    start=$(date +%s)
    echo "=== $phase"
    make --no-print-directory "$phase"
    status=$?
    took=$(( $(date +%s) - start ))
    total=$(( total + took ))
    table="$table
| $phase | $took |"
    if [ "$status" -ne 0 ]; then
        echo "=== $phase failed after $took s"
        finish
        exit "$status"
    fi
done
finish
