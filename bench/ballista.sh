#!/usr/bin/env bash
# Ballista benchmark (issue 21): GROUP BYs over ROWS `requests` rows in a bucket, each timed as a
# whole `infersight query` command (process start, catalog log, planning, execution, output):
# in-process on the query node vs through an embedded Ballista cluster (`infersight ballista
# scheduler|executor`, `[query.ballista] min_bytes = 0`) with 1 and with 2 executors. Every
# answer through the cluster must equal the in-process one, and the query node's log must say
# the plan ran on the cluster, or the run fails.
# The bucket is a directory (file://): the segments bench/query.sh generates, moved there with
# `store migrate`. BIN needs the `cluster` feature.
# Usage: BIN=<release build with --features cluster> bench/ballista.sh
#   ROWS=10000000 RUNS=3 CONCURRENCY=2 OUT=bench/out/ballista PORT_BASE=26000
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/infersight}
OUT=${OUT:-bench/out/ballista}
ROWS=${ROWS:-10000000}
RUNS=${RUNS:-3}
CONCURRENCY=${CONCURRENCY:-2}
PORT_BASE=${PORT_BASE:-26000}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PIDS=()
stop_all() {
  for pid in "${PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  PIDS=()
}
trap stop_all EXIT

BUCKET="$OUT/bucket-$ROWS"
if [ ! -d "$BUCKET/catalog" ]; then
  rm -rf "$OUT/gen-$ROWS" "$BUCKET"
  "$BIN" bench-gen --data "$OUT/gen-$ROWS" requests --rows "$ROWS" --hours 4
  "$BIN" store migrate --data "$OUT/gen-$ROWS" --to "file://$BUCKET" > /dev/null
fi
SCHEDULER="127.0.0.1:$PORT_BASE"
printf '[storage]\nurl = "file://%s"\nnode = "bench-query"\n' "$BUCKET" > "$OUT/here.toml"
cp "$OUT/here.toml" "$OUT/cluster.toml"
printf '[query.ballista]\nscheduler = "%s"\nmin_bytes = 0\n' "$SCHEDULER" >> "$OUT/cluster.toml"

QUERIES=(
  "SELECT model, percentile_cont(0.99) WITHIN GROUP (ORDER BY e2e_ms) AS p99 FROM requests GROUP BY model ORDER BY model"
  "SELECT model, approx_percentile_cont(0.99) WITHIN GROUP (ORDER BY e2e_ms) AS p99 FROM requests GROUP BY model ORDER BY model"
  "SELECT model, worker, count(*) AS n, round(avg(ttft_ms), 6) AS ttft FROM requests GROUP BY model, worker ORDER BY model, worker"
)
NAMES=("exact p99 by model" "approx p99 by model" "count + avg by model, worker")

# median seconds of RUNS runs of one query with one config; the answer goes to $OUT/answer-<tag>
time_query() { # tag config sql
  local tag=$1 config=$2 sql=$3 times=()
  for _ in $(seq 1 "$RUNS"); do
    local start end
    start=$(date +%s.%N)
    INFERSIGHT_LOG=warn,infersight_query=debug "$BIN" query --config "$config" \
      --data "$OUT/query-node" --format csv "$sql" > "$OUT/answer-$tag" 2> "$OUT/log-$tag"
    end=$(date +%s.%N)
    times+=("$(echo "$end - $start" | bc)")
  done
  printf '%s\n' "${times[@]}" | sort -n | sed -n "$(( (RUNS + 1) / 2 ))p"
}

start_cluster() { # executors
  "$BIN" ballista scheduler --bind "$SCHEDULER" --config "$OUT/here.toml" --data "$OUT/sched" \
    > /dev/null 2> "$OUT/scheduler.err" &
  PIDS+=($!)
  for k in $(seq 1 "$1"); do
    local base=$(( PORT_BASE + 10 * k ))
    "$BIN" ballista executor --scheduler "$SCHEDULER" --bind "127.0.0.1:$base" \
      --grpc-port $(( base + 1 )) --concurrency "$CONCURRENCY" --config "$OUT/here.toml" \
      --work-dir "$OUT/executor-$k" --data "$OUT/sched" > /dev/null 2> "$OUT/executor-$k.err" &
    PIDS+=($!)
  done
  sleep 3
}

echo "== ballista, $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "binary: $BIN ($(stat -c %y "$BIN" | cut -d. -f1)); $ROWS rows, $(du -sh "$BUCKET/segments" | cut -f1) of segments; median of $RUNS"
declare -A HERE
for i in "${!QUERIES[@]}"; do
  HERE[$i]=$(time_query "here-$i" "$OUT/here.toml" "${QUERIES[$i]}")
done
for executors in 1 2; do
  start_cluster "$executors"
  for i in "${!QUERIES[@]}"; do
    seconds=$(time_query "cluster-$i" "$OUT/cluster.toml" "${QUERIES[$i]}")
    grep -q "statement runs on the cluster" "$OUT/log-cluster-$i" ||
      { echo "query $i did not run on the cluster:"; cat "$OUT/log-cluster-$i"; exit 1; }
    # approximate percentiles may differ in their last digits between plans
    if [ "$i" -ne 1 ] && ! cmp -s "$OUT/answer-here-$i" "$OUT/answer-cluster-$i"; then
      echo "query $i answered differently:"; diff "$OUT/answer-here-$i" "$OUT/answer-cluster-$i"; exit 1
    fi
    ratio=$(echo "scale=2; $seconds / ${HERE[$i]}" | bc)
    echo "${NAMES[$i]}: in-process ${HERE[$i]} s, $executors executor(s) $seconds s (${ratio}x)"
  done
  stop_all
done
