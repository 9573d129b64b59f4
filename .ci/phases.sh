#!/usr/bin/env bash
# Runs `make` targets one after another and prints how long each took, as the phase table
# docs/benchmarks.md keeps (also written to target/ci-phases.md). Stops at the first that fails.
# `a+b` runs targets a and b side by side (each one's output goes to target/ci-logs/NAME.log
# and is printed when the group ends): for suites that wait more than they compute.
set -uo pipefail
table="| phase | seconds |
|---|---:|"
total=0
finish() {
    mkdir -p target
    printf '%s\n| **total** | **%d** |\n' "$table" "$total" | tee target/ci-phases.md
}

# Runs the targets of one `a+b` group side by side; fails if any of them failed.
group() {
    local logs=target/ci-logs names=() pids=() status=0 i
    mkdir -p "$logs"
    IFS=+ read -ra names <<<"$1"
    for name in "${names[@]}"; do
        make --no-print-directory "$name" >"$logs/$name.log" 2>&1 &
        pids+=($!)
    done
    for i in "${!names[@]}"; do
        if wait "${pids[$i]}"; then
            echo "--- ${names[$i]} passed (last lines of $logs/${names[$i]}.log)"
            tail -n 5 "$logs/${names[$i]}.log"
        else
            echo "--- ${names[$i]} FAILED ($logs/${names[$i]}.log)"
            cat "$logs/${names[$i]}.log"
            status=1
        fi
    done
    return "$status"
}

for phase in "$@"; do
    start=$(date +%s)
    echo "=== $phase"
    if [[ "$phase" == *+* ]]; then
        group "$phase"
    else
        make --no-print-directory "$phase"
    fi
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
