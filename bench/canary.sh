#!/usr/bin/env bash
# Canary gate benchmark (bench/README.md, "Canary gate"). Three parts, all by default:
#   rates — seeded synthetic lognormal latencies: false-block rate without a regression and
#           detection rate with one, over 1000 seeds, plus the time of one gate over 50k + 50k
#           samples (the ignored analytics test `canary::bench_rates`, release build);
#   sim   — the simulator, SEEDS seeds (default 100): a healthy fleet gated on a random A/B split
#           (temperature 0.2 vs 0.7, assigned per request independently of everything else: no
#           regression) and the lora_kv_regression fleet gated on model_version r1 vs r2 during
#           the incident (a known regression); counts exit codes 0 (pass) and 1 (block);
#   time  — `infersight canary` end to end (process, store, query, bootstrap) on ~100k requests.
# Usage: bench/canary.sh [rates|sim|time|all]. Needs BIN (default target/release/infersight).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/infersight}
OUT=bench/out/canary
SEEDS=${SEEDS:-100}
PART=${1:-all}
mkdir -p "$OUT"

rates() {
  cargo test --release -q -p infersight-analytics --test it canary::bench_rates -- \
    --ignored --nocapture 2>&1 | grep -E '^(false-block|detection|time)'
}

need_bin() {
  [ -x "$BIN" ] || { echo "build first: cargo build --release -p infersight" >&2; exit 1; }
}

# simulate SCENARIO SEED DIR: 10 simulated minutes, 8 workers, 10 req/s, ingested into DIR/data.
simulate() {
  rm -rf "$3"
  "$BIN" simulate --scenario "$1" --seed "$2" --duration 10m --workers 8 --rate 10 \
    --arrivals poisson --quiet --format json --out "$3/sim" >/dev/null
  "$BIN" ingest --quiet --data "$3/data" "$3/sim/traces.jsonl" >/dev/null
}

# gate ARGS...: prints the exit code (0 pass, 1 block; anything else aborts).
gate() {
  local code=0
  "$BIN" canary "$@" >"$OUT/last.txt" 2>"$OUT/last.err" || code=$?
  if [ "$code" -gt 1 ]; then cat "$OUT/last.err" >&2; exit 1; fi
  echo "$code"
}

sim() {
  need_bin
  local false_blocks=0 detections=0
  for seed in $(seq 1 "$SEEDS"); do
    simulate healthy "$seed" "$OUT/healthy"
    code=$(gate --data "$OUT/healthy/data" --dimension temperature --baseline 0.2 \
      --candidate 0.7 --sli ttft --q 0.95 --seed "$seed")
    false_blocks=$((false_blocks + code))
    simulate lora_kv_regression "$seed" "$OUT/regression"
    since=$(sed -n 's/.*"incident_window": *{ *"start": *"\([^"]*\)".*/\1/p' \
      <(tr -d '\n' <"$OUT/regression/sim/ground_truth.json"))
    code=$(gate --data "$OUT/regression/data" --dimension deploy.model_revision --baseline r1 \
      --candidate r2 --sli ttft --q 0.95 --since "$since" --seed "$seed")
    detections=$((detections + code))
    printf 'seed %3d: false blocks %d, detections %d\n' "$seed" "$false_blocks" "$detections" >&2
  done
  echo "simulator, healthy, temperature 0.2 vs 0.7, ttft p95: false-block rate $false_blocks/$SEEDS"
  echo "simulator, lora_kv_regression incident, r2 vs r1, ttft p95: detection rate $detections/$SEEDS"
}

time_gate() {
  need_bin
  local dir="$OUT/large"
  rm -rf "$dir"
  "$BIN" simulate --scenario healthy --seed 1 --duration 20m --workers 16 --rate 85 \
    --arrivals poisson --quiet --format json --out "$dir/sim" >/dev/null
  "$BIN" ingest --quiet --data "$dir/data" "$dir/sim/traces.jsonl" >/dev/null
  for run in 1 2 3; do
    start=$(date +%s.%N)
    gate --data "$dir/data" --dimension model_version --baseline r1 --candidate r2 --sli ttft \
      >/dev/null
    end=$(date +%s.%N)
    printf 'infersight canary end to end, run %d: %.0f ms — %s\n' "$run" \
      "$(echo "($end - $start) * 1000" | bc)" "$(head -1 "$OUT/last.txt")"
  done
}

case "$PART" in
  rates) rates ;;
  sim) sim ;;
  time) time_gate ;;
  all) rates; sim; time_gate ;;
  *) echo "usage: bench/canary.sh [rates|sim|time|all]" >&2; exit 2 ;;
esac
