#!/usr/bin/env bash
# Web UI page-load benchmark (bench/README.md, "Web UI page load"): one simulated hour of a
# 16-worker fleet at 50 req/s (lora_kv_regression, ending two minutes ago so "last hour" shows
# it) is ingested (traces, logs, metrics, the engines' raw log lines), `infersight serve` starts on free ports, and
# bench/ui_load.py loads every page RUNS times in headless Chromium (WebDriver via
# chromedriver), timing navigation start → the shell's `#view[data-state=ready]` marker, plus
# the API calls behind each page in the browser and replayed outside it.
# Usage: bench/ui.sh [extra ui_load.py args, e.g. --range all]
# Env: BIN (default target/release/infersight, built if missing), RUNS (5), RANGE (1h),
#      REUSE=1 to keep bench/out/ui/data from the previous run (only if it is still recent).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/infersight}
OUT=bench/out/ui
RUNS=${RUNS:-5}
RANGE=${RANGE:-1h}
mkdir -p "$OUT"

[ -x "$BIN" ] || cargo build --release -p infersight
command -v chromedriver >/dev/null || { echo "needs chromedriver and chromium" >&2; exit 1; }

SERVE_PID=
LOAD_PID=
cleanup() {
  # the helper closes its browser session and chromedriver on SIGTERM; then the server
  for pid in $LOAD_PID $SERVE_PID; do
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "${REUSE:-0}" != 1 ] || [ ! -d "$OUT/data" ]; then
  rm -rf "$OUT/sim" "$OUT/data"
  start=$(date +%s.%N)
  "$BIN" simulate --scenario lora_kv_regression --duration 1h --workers 16 --rate 50 \
    --arrivals poisson --start=-62m --quiet --out "$OUT/sim" >/dev/null
  "$BIN" ingest --quiet --data "$OUT/data" \
    "$OUT/sim/traces.jsonl" "$OUT/sim/logs.jsonl" "$OUT/sim/metrics.jsonl" >/dev/null
  # the engines' raw lines too (they carry the templates the logs page is about)
  for raw in "$OUT"/sim/raw/*.log; do
    "$BIN" ingest --quiet --data "$OUT/data" --service vllm --worker "$(basename "$raw" .log)" \
      "$raw" >/dev/null
  done
  printf 'simulate + ingest: %.0f s\n' "$(echo "$(date +%s.%N) - $start" | bc)" >&2
fi

cat >"$OUT/serve.toml" <<'EOF'
[alerts]
slos = [{ name = "ttft-1s", sli = "ttft", threshold_ms = 1000, objective = 0.99, window = "30d" }]
EOF
: >"$OUT/serve.err"
INFERSIGHT_LOG=warn "$BIN" serve --otlp-grpc-port 0 --otlp-http-port 0 --api-port 0 \
  --data "$OUT/data" --config "$OUT/serve.toml" >/dev/null 2>"$OUT/serve.err" &
SERVE_PID=$!
api=
for _ in $(seq 1 600); do
  api=$(sed -n 's/.*listening otlp_grpc=.* api=\([^ ]*\).*/\1/p' "$OUT/serve.err" | head -1)
  [ -n "$api" ] && break
  kill -0 "$SERVE_PID" 2>/dev/null || { cat "$OUT/serve.err" >&2; exit 1; }
  sleep 0.1
done
[ -n "$api" ] || { echo "serve did not start" >&2; cat "$OUT/serve.err" >&2; exit 1; }
echo "serve: http://$api (pid $SERVE_PID)" >&2

python3 bench/ui_load.py --base "http://$api" --runs "$RUNS" --range "$RANGE" \
  --incident-window "$OUT/sim/ground_truth.json" --out "$OUT/ui_load.json" "$@" >"$OUT/ui_load.md" &
LOAD_PID=$!
wait "$LOAD_PID"
LOAD_PID=
cat "$OUT/ui_load.md"
