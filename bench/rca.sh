#!/usr/bin/env bash
# RCA benchmark: `infersight rca` over one simulated hour of a 16-worker fleet at 50 req/s (the
# headline scenario, ~180k requests): traces, gateway logs, metrics and the 16 engines' raw log
# files are ingested once into a fresh store, then `infersight rca --format json` runs RUNS times;
# prints wall time and peak RSS per run and the report's own timings. Target: under 5 s.
# REUSE=1 reruns only the RCA on the store of the previous run.
# Needs target/release/infersight (cargo build --release -p infersight) and GNU time.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/infersight}
OUT=${OUT:-bench/out/rca-bench}
RUNS=${RUNS:-3}
[ -x "$BIN" ] || { echo "build first: cargo build --release -p infersight" >&2; exit 1; }

# REUSE=1 keeps a store an earlier run built (the RCA runs only)
if [ "${REUSE:-0}" != 1 ] || [ ! -d "$OUT/data" ]; then
rm -rf "$OUT"
mkdir -p "$OUT"
# raw vLLM lines carry no year: simulate the hour that just passed so they are dated right
"$BIN" simulate --scenario lora_kv_regression --seed 7 --duration 1h --workers 16 --rate 50 \
  --arrivals poisson --start=-62m --quiet --out "$OUT/sim" >"$OUT/sim.summary"
"$BIN" ingest --quiet --data "$OUT/data" "$OUT/sim/traces.jsonl" "$OUT/sim/logs.jsonl" \
  "$OUT/sim/metrics.jsonl" >/dev/null
for raw in "$OUT"/sim/raw/*.log; do
  "$BIN" ingest --quiet --data "$OUT/data" --input-format raw --service vllm \
    --worker "$(basename "$raw" .log)" "$raw" >/dev/null
done
fi
"$BIN" query --data "$OUT/data" --format csv \
  "SELECT (SELECT count(*) FROM requests) AS requests, (SELECT count(*) FROM spans) AS spans, \
   (SELECT count(*) FROM logs) AS logs, (SELECT count(*) FROM metrics) AS metric_points"
for run in $(seq 1 "$RUNS"); do
  /usr/bin/time -f "%e %M" -o "$OUT/time" "$BIN" rca --data "$OUT/data" --format json \
    >"$OUT/rca.json"
  read -r wall rss <"$OUT/time"
  printf 'run %d: %s s wall, peak RSS %d MiB\n' "$run" "$wall" "$((rss / 1024))"
done
python3 - "$OUT/rca.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print("timings_ms:", {k: round(v) for k, v in r["timings_ms"].items()})
print("top cause:", r["root_causes"][0]["dimensions"] if r["root_causes"] else None)
print("log evidence:", len(r["log_evidence"]), "templates;", len(r.get("log_sequences", [])), "sequence patterns")
EOF
