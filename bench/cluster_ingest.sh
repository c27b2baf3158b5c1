#!/usr/bin/env bash
# Cluster ingest benchmark (issue 21): acknowledged spans/s into a shared bucket by 1 vs 2
# `infersight serve --role ingest` nodes, each loaded by `infersight bench-gen otlp-load`
# (EXPORTERS exporters in all, split evenly between the nodes; gRPC and HTTP/protobuf
# alternating; 512 simulated spans per export; each sender waits for its answer) for DURATION.
# Peer in the same run: one `serve` (role all) on local disk with the same load. A `query` node
# on the bucket then counts `spans`: it must equal what the ingest nodes acknowledged (after
# they stopped: their last flush), or the run fails.
# The bucket is a directory (file://) unless S3_ENDPOINT is set (then BIN needs the `cluster`
# feature and AWS_* credentials; e.g. SeaweedFS: weed mini -ip=127.0.0.1 -s3.port=8333).
# Usage: bench/cluster_ingest.sh   (builds nothing)
#   BIN=target/release/infersight  DURATION=30s EXPORTERS=16 POOL=100000 OUT=bench/out/cluster
#   PORT_BASE=25000 (node k listens on PORT_BASE+10k+{1,2,3}: gRPC, HTTP, API)
#   S3_ENDPOINT=http://127.0.0.1:8333 S3_URL=s3://infersight/bench
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/infersight}
OUT=${OUT:-bench/out/cluster}
DURATION=${DURATION:-30s}
EXPORTERS=${EXPORTERS:-16}
POOL=${POOL:-100000}
PORT_BASE=${PORT_BASE:-25000}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PIDS=()

json() { # file python-expression over `r`
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print($2)" "$1"
}
stop_all() {
  for pid in "${PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  PIDS=()
}
trap stop_all EXIT
ports() { # node index -> "grpc http api"
  local base=$(( PORT_BASE + 10 * $1 ))
  echo "$(( base + 1 )) $(( base + 2 )) $(( base + 3 ))"
}
start_node() { # index label role storage-url(or "")
  local index=$1 label=$2 role=$3 url=$4 grpc http api
  read -r grpc http api <<< "$(ports "$index")"
  rm -rf "$OUT/data-$label"
  {
    printf '[store]\nfsync = "always"\n[server]\nmaintenance_interval = "1s"\nrole = "%s"\n' "$role"
    if [ -n "$url" ]; then
      printf '[storage]\nurl = "%s"\nnode = "%s"\n' "$url" "$label"
      [ -n "${S3_ENDPOINT:-}" ] && printf 'endpoint = "%s"\n' "$S3_ENDPOINT"
    fi
  } > "$OUT/$label.toml"
  INFERSIGHT_LOG=warn "$BIN" serve --config "$OUT/$label.toml" --data "$OUT/data-$label" \
    --otlp-grpc-port "$grpc" --otlp-http-port "$http" --api-port "$api" \
    > "$OUT/$label.out" 2> "$OUT/$label.err" &
  PIDS+=($!)
  for _ in $(seq 1 300); do
    grep -q "listening otlp_grpc=" "$OUT/$label.err" 2>/dev/null && return 0
    sleep 0.2
  done
  echo "$label did not start:"; cat "$OUT/$label.err"; exit 1
}
count_spans() { # node index -> count(*) of spans through its API
  local api
  read -r _ _ api <<< "$(ports "$1")"
  curl -s -X POST -H 'content-type: application/json' \
    -d '{"sql": "SELECT count(*) AS n FROM spans"}' "http://127.0.0.1:$api/api/v1/query" |
    python3 -c "import json,sys; print(json.load(sys.stdin)['rows'][0]['n'])"
}
load_nodes() { # label exporters-per-node node-indexes...: loads them at once, prints the sum
  local label=$1 per=$2; shift 2
  local gens=() grpc http
  for index in "$@"; do
    read -r grpc http _ <<< "$(ports "$index")"
    "$BIN" bench-gen otlp-load --grpc "http://127.0.0.1:$grpc" --http "http://127.0.0.1:$http" \
      --exporters "$per" --pool-spans "$POOL" --spans simulated --duration "$DURATION" \
      > "$OUT/$label-$index.json" 2> "$OUT/$label-$index.gen.err" &
    gens+=($!)
  done
  for pid in "${gens[@]}"; do wait "$pid"; done
  python3 - "$OUT" "$label" "$@" <<'EOF'
import json, sys
out, label, nodes = sys.argv[1], sys.argv[2], sys.argv[3:]
runs = [json.load(open(f"{out}/{label}-{n}.json")) for n in nodes]
acked = sum(r["acked_spans"] for r in runs)
rate = sum(r["acked_spans_per_s"] for r in runs)
p99 = max(r["ack_latency_ms"]["p99"] for r in runs)
bad = sum(r["throttled"] + r["unavailable"] + r["failed"] for r in runs)
print(f"{acked} {rate:.0f} {p99} {bad}")
EOF
}

URL=${S3_URL:-}
if [ -z "$URL" ]; then
  rm -rf "$OUT/bucket"
  URL="file://$OUT/bucket"
fi
echo "== cluster ingest, $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "binary: $BIN ($(stat -c %y "$BIN" | cut -d. -f1)); bucket: $URL; $EXPORTERS exporters for $DURATION"

# peer: one node on local disk
start_node 0 single all ""
read -r acked rate p99 bad <<< "$(load_nodes single "$EXPORTERS" 0)"
stored=$(count_spans 0)
echo "single node, local disk: $rate spans/s acked ($acked spans), ack p99 $p99 ms, refused/failed $bad; stored $stored"
[ "$stored" = "$acked" ] || { echo "MISMATCH: $stored stored, $acked acknowledged"; exit 1; }
stop_all

for nodes in 1 2; do
  # each run starts on an empty bucket prefix (an S3 prefix is not removed: a new one per run)
  run_url=$URL
  [[ "$URL" == file://* ]] && rm -rf "${URL#file://}"
  [[ "$URL" == s3://* ]] && run_url="$URL-$nodes-$(date +%s)"
  start_node 9 "query-$nodes" query "$run_url"
  indexes=()
  for k in $(seq 1 "$nodes"); do
    start_node "$k" "ingest-$nodes-$k" ingest "$run_url"
    indexes+=("$k")
  done
  read -r acked rate p99 bad <<< "$(load_nodes "bucket-$nodes" $(( EXPORTERS / nodes )) "${indexes[@]}")"
  # the ingest nodes stop (their last flush), then the query node must see every acked span
  for k in "${!PIDS[@]}"; do
    [ "$k" -eq 0 ] && continue
    kill -TERM "${PIDS[$k]}"; wait "${PIDS[$k]}" 2>/dev/null || true
  done
  stored=0
  for _ in $(seq 1 60); do
    stored=$(count_spans 9)
    [ "$stored" = "$acked" ] && break
    sleep 1
  done
  echo "$nodes ingest node(s) on the bucket: $rate spans/s acked ($acked spans), ack p99 $p99 ms, refused/failed $bad; the query node counts $stored"
  [ "$stored" = "$acked" ] || { echo "MISMATCH: $stored stored, $acked acknowledged"; exit 1; }
  stop_all
done
