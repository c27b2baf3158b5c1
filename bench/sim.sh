#!/usr/bin/env bash
# Simulator benchmark: one simulated hour of a 16-worker fleet at 50 req/s (the headline
# scenario), written to files — OTLP JSON Lines, raw engine logs, ground truth — three times per
# arrival source; prints wall time per run and the output size. Target: under 30 s per hour.
# Needs target/release/infersight (cargo build --release -p infersight).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/infersight}
OUT=bench/out/sim
RUNS=${RUNS:-3}
SOURCES=${SOURCES:-"poisson mooncake"}
[ -x "$BIN" ] || { echo "build first: cargo build --release -p infersight" >&2; exit 1; }

for arrivals in $SOURCES; do
  for run in $(seq 1 "$RUNS"); do
    rm -rf "$OUT"
    start=$(date +%s.%N)
    "$BIN" simulate --scenario lora_kv_regression --seed 7 --duration 1h --workers 16 --rate 50 \
      --arrivals "$arrivals" --quiet --out "$OUT" >"$OUT.summary" 2>"$OUT.err" || {
      cat "$OUT.err" >&2; exit 1; }
    end=$(date +%s.%N)
    size=$(du -sm "$OUT" | cut -f1)
    printf '%-9s run %d: %6.1f s wall, %5d MiB written — %s\n' "$arrivals" "$run" \
      "$(echo "$end - $start" | bc)" "$size" "$(head -1 "$OUT.summary")"
  done
done
