#!/usr/bin/env bash
# Dimension discovery benchmark (bench/README.md, "Dimension discovery"): the data of bench/ui.sh
# (one simulated hour of a 16-worker fleet at 50 req/s, lora_kv_regression, ending two minutes
# before the ingest) is simulated and ingested once (traces, logs, metrics) by OLD_BIN, whose
# store a newer binary can read too, and compacted (`infersight store compact`: the state a
# server's maintenance reaches within seconds, and which it then leaves alone, so no segment is
# replaced under a running query). It is copied, so that two `infersight serve` run side by side
# on free ports: OLD_BIN on one copy, BIN on the other (the store takes an exclusive lock).
# `GET /api/v1/dimensions?since=…&until=…` for the hour before the ingest finished (the
# Dimensions page's "last hour") is then called RUNS times on each,
# alternating old/new (and which goes first) after one warm-up call each, timed with curl; the
# script prints median and max per binary, the old/new ratios, and whether both answered the
# same JSON.
# Usage: OLD_BIN=/tmp/infersight-old bench/dimensions.sh
# Env: OLD_BIN (required: the binary to compare against), BIN (default target/release/infersight,
#      built if missing), RUNS (9), REUSE=1 to keep bench/out/dimensions/data and its range.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/infersight}
OLD_BIN=${OLD_BIN:?set OLD_BIN to the binary to compare against (e.g. built from git HEAD)}
OUT=bench/out/dimensions
RUNS=${RUNS:-9}
mkdir -p "$OUT"

[ -x "$BIN" ] || cargo build --release -p infersight
[ -x "$OLD_BIN" ] || { echo "OLD_BIN=$OLD_BIN is not an executable" >&2; exit 1; }

OLD_PID=
NEW_PID=
cleanup() {
  for pid in $OLD_PID $NEW_PID; do
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      # not a child of this shell (started in a command substitution): wait for it to go
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
  done
  rm -rf "$OUT/data-old" "$OUT/data-new"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "${REUSE:-0}" != 1 ] || [ ! -d "$OUT/data" ] || [ ! -f "$OUT/range" ]; then
  rm -rf "$OUT/sim" "$OUT/data"
  start=$(date +%s.%N)
  "$OLD_BIN" simulate --scenario lora_kv_regression --duration 1h --workers 16 --rate 50 \
    --arrivals poisson --start=-62m --quiet --out "$OUT/sim" >/dev/null
  "$OLD_BIN" ingest --quiet --data "$OUT/data" \
    "$OUT/sim/traces.jsonl" "$OUT/sim/logs.jsonl" "$OUT/sim/metrics.jsonl" >/dev/null
  "$OLD_BIN" store compact --data "$OUT/data" >/dev/null
  printf 'simulate + ingest: %.0f s\n' "$(echo "$(date +%s.%N) - $start" | bc)" >&2
  # the UI's "last hour" at the moment the data is ready, in unix seconds as the UI sends it
  until_s=$(date +%s)
  echo "since=$((until_s - 3600))&until=$until_s" >"$OUT/range"
fi
RANGE=$(cat "$OUT/range")
rm -rf "$OUT/data-old" "$OUT/data-new"
cp -r "$OUT/data" "$OUT/data-old"
cp -r "$OUT/data" "$OUT/data-new"

# start BINARY DATA ERR: serve on free ports; prints the pid, then the API address
serve() {
  : >"$3"
  INFERSIGHT_LOG=warn "$1" serve --otlp-grpc-port 0 --otlp-http-port 0 --api-port 0 \
    --data "$2" >/dev/null 2>"$3" &
  echo $!
}
api_of() { # PID ERR
  local api=
  for _ in $(seq 1 600); do
    api=$(sed -n 's/.*listening otlp_grpc=.* api=\([^ ]*\).*/\1/p' "$2" | head -1)
    [ -n "$api" ] && { echo "$api"; return; }
    kill -0 "$1" 2>/dev/null || { cat "$2" >&2; exit 1; }
    sleep 0.1
  done
  echo "serve did not start" >&2
  cat "$2" >&2
  exit 1
}
OLD_PID=$(serve "$OLD_BIN" "$OUT/data-old" "$OUT/serve-old.err")
NEW_PID=$(serve "$BIN" "$OUT/data-new" "$OUT/serve-new.err")
OLD_API=$(api_of "$OLD_PID" "$OUT/serve-old.err")
NEW_API=$(api_of "$NEW_PID" "$OUT/serve-new.err")
echo "old: http://$OLD_API ($OLD_BIN), new: http://$NEW_API ($BIN), $RANGE" >&2

# call NAME API: one timed GET; appends seconds to $OUT/NAME.times, keeps the body in NAME.json
call() {
  local result
  result=$(curl -sS -o "$OUT/$1.json" -w '%{http_code} %{time_total}' \
    "http://$2/api/v1/dimensions?$RANGE")
  [ "${result%% *}" = 200 ] || { echo "$1: HTTP $result" >&2; cat "$OUT/$1.json" >&2; exit 1; }
  echo "${result#* }" >>"$OUT/$1.times"
}
rm -f "$OUT/old.times" "$OUT/new.times"
call old "$OLD_API"
call new "$NEW_API"
rm -f "$OUT/old.times" "$OUT/new.times"
for run in $(seq 1 "$RUNS"); do
  if [ $((run % 2)) = 1 ]; then
    call old "$OLD_API"
    call new "$NEW_API"
  else
    call new "$NEW_API"
    call old "$OLD_API"
  fi
done

python3 - "$OUT" "$RUNS" <<'EOF'
import json, statistics, sys
out, runs = sys.argv[1], sys.argv[2]
def times(name):
    return [float(line) * 1000 for line in open(f"{out}/{name}.times")]
old, new = times("old"), times("new")
answers = [json.load(open(f"{out}/{name}.json")) for name in ("old", "new")]
same = answers[0] == answers[1]
dimensions = answers[1]["dimensions"]
rows = max((d["total_rows"] for d in dimensions), default=0)
print(f"GET /api/v1/dimensions, {runs} runs each, {len(dimensions)} dimensions, "
      f"up to {rows} rows per dimension; same JSON: {'yes' if same else 'NO'}")
print("| binary | median ms | max ms |")
print("|---|--:|--:|")
print(f"| old | {statistics.median(old):.0f} | {max(old):.0f} |")
print(f"| new | {statistics.median(new):.0f} | {max(new):.0f} |")
print(f"ratio old/new: median {statistics.median(old) / statistics.median(new):.1f}×, "
      f"max {max(old) / max(new):.1f}×")
print("old ms:", " ".join(f"{t:.0f}" for t in old))
print("new ms:", " ".join(f"{t:.0f}" for t in new))
sys.exit(0 if same else 1)
EOF
