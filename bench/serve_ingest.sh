#!/usr/bin/env bash
# Serve-path ingest benchmark (issue 23 item 3): `infersight serve` on 127.0.0.1 with explicit
# ports and a fresh data directory, loaded by `infersight bench-gen otlp-load` (EXPORTERS
# concurrent OTLP exporters, gRPC and HTTP/protobuf alternating, 512 simulated spans per export,
# each sender waiting for its answer) for DURATION, once per fsync mode:
#   always    fsync before every acknowledgement; the ingest queue folds what waits into one
#             store append (group commit) and concurrent appends share one WAL fsync
#   interval  acknowledged after write(2), the WAL fsynced every 200 ms
# For each: acknowledged spans/s, p50/p99 ack latency, 429/503/failed answers, serve's peak RSS
# (VmHWM) and CPU, store appends and fsyncs (how much was grouped), and a check that `spans` holds
# every acknowledged span. Peer, same run: `infersight ingest` of the same spans written as OTLP
# JSON Lines (no WAL: a file is its own log). Then a soak: `always` again, paced at SOAK_FACTOR
# x the acked rate of the first run with IN_FLIGHT requests per exporter for SOAK: 429s counted,
# serve's RSS sampled every 5 s (start vs end).
# Usage: bench/serve_ingest.sh   (builds nothing)
#   BIN=target/release/infersight   serve and ingest;  GEN=... the generator (default BIN)
#   SPANS=simulated|synthetic (the simulator's traces, or bench/ingest.sh's one-span requests)
#   DURATION=30s EXPORTERS=16 POOL=100000 SOAK=60s SOAK_FACTOR=2 IN_FLIGHT=16 OUT=bench/out/serve
#   PORTS="24317 24318 27070" (gRPC, HTTP, API)
#   SOAK_RATE=N offers N spans/s in the soak instead (the same load for two builds compared);
#   SOAK_ONLY=1 runs the soak alone (needs SOAK_RATE)
#   SERVER_TOML='decode_threads = 4' adds lines to serve's [server] table
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/infersight}
GEN=${GEN:-$BIN}
OUT=${OUT:-bench/out/serve}
DURATION=${DURATION:-30s}
EXPORTERS=${EXPORTERS:-16}
POOL=${POOL:-100000}
SPANS=${SPANS:-simulated}
SOAK=${SOAK:-60s}
SOAK_FACTOR=${SOAK_FACTOR:-2}
IN_FLIGHT=${IN_FLIGHT:-16}
read -r GRPC_PORT HTTP_PORT API_PORT <<< "${PORTS:-24317 24318 27070}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SERVE_PID=

json() { # file python-expression over `r`
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print($2)" "$1"
}
cpu_s() { # pid: user + system CPU seconds so far
  awk '{print ($14 + $15) / 100}' "/proc/$1/stat"
}
sql() { # statement -> first value of the first row
  curl -s -X POST -H 'content-type: application/json' \
    -d "{\"sql\": \"$1\"}" "http://127.0.0.1:$API_PORT/api/v1/query" |
    python3 -c "import json,sys; r=json.load(sys.stdin)['rows'][0]; print(list(r.values())[0])"
}
threads_cpu() { # pid: CPU seconds by thread name (live threads), largest first
  for t in /proc/"$1"/task/*; do
    awk '{ s = $0; sub(/^[^(]*\(/, "", s); name = s; sub(/\).*$/, "", name);
           sub(/^[^)]*\) /, "", s); split(s, f, " "); print name "\t" (f[12] + f[13]) / 100 }' "$t/stat"
  done | awk -F'\t' '{ cpu[$1] += $2 } END { for (n in cpu) printf "%s %.2f s\n", n, cpu[n] }' |
    sort -k2 -t' ' -rn | head -6 | tr '\n' ';'
}
metric() { # name -> value on /metrics
  curl -s "http://127.0.0.1:$API_PORT/metrics" | awk -v m="$1" '$1 == m {print $2}'
}
stop_serve() {
  if [ -n "$SERVE_PID" ]; then
    kill -TERM "$SERVE_PID" 2>/dev/null || true
    wait "$SERVE_PID" 2>/dev/null || true
    SERVE_PID=
  fi
}
trap stop_serve EXIT

start_serve() { # mode label
  local data="$OUT/data-$2"
  rm -rf "$data"
  printf '[store]\nfsync = "%s"\n%b' "$1" "${SERVER_TOML:+[server]\n$SERVER_TOML\n}" > "$OUT/$2.toml"
  INFERSIGHT_LOG=warn "$BIN" serve --config "$OUT/$2.toml" --data "$data" \
    --otlp-grpc-port "$GRPC_PORT" --otlp-http-port "$HTTP_PORT" --api-port "$API_PORT" \
    > "$OUT/$2.serve.out" 2> "$OUT/$2.serve.err" &
  SERVE_PID=$!
  for _ in $(seq 1 300); do
    grep -q "listening otlp_grpc=" "$OUT/$2.serve.err" 2>/dev/null && return 0
    kill -0 "$SERVE_PID" 2>/dev/null || break
    sleep 0.2
  done
  echo "serve did not start:"; cat "$OUT/$2.serve.err"; exit 1
}

load() { # label duration [extra generator flags...]
  local label=$1 duration=$2; shift 2
  "$GEN" bench-gen otlp-load --grpc "http://127.0.0.1:$GRPC_PORT" \
    --http "http://127.0.0.1:$HTTP_PORT" --exporters "$EXPORTERS" --pool-spans "$POOL" \
    --spans "$SPANS" --duration "$duration" "$@" > "$OUT/$label.json" 2> "$OUT/$label.gen.err"
}

run_mode() { # fsync mode
  local mode=$1 cpu0 cpu1
  start_serve "$mode" "$mode"
  cpu0=$(cpu_s "$SERVE_PID")
  load "$mode" "$DURATION"
  cpu1=$(cpu_s "$SERVE_PID")
  local acked stored
  acked=$(json "$OUT/$mode.json" "r['acked_spans']")
  stored=$(sql "SELECT count(*) FROM spans")
  echo "$mode: $(json "$OUT/$mode.json" "'%d spans/s acked (%d spans in %.1f s), ack p50 %s ms p99 %s ms, 429 %d, 503 %d, failed %d, generator CPU %.1f s' % (r['acked_spans_per_s'], r['acked_spans'], r['duration_s'], r['ack_latency_ms']['p50'], r['ack_latency_ms']['p99'], r['throttled'], r['unavailable'], r['failed'], r['generator_cpu_s'])")"
  echo "$mode: serve CPU $(echo "$cpu1 - $cpu0" | bc) s, $(grep VmHWM "/proc/$SERVE_PID/status" | tr -s ' '), store appends $(metric infersight_store_appends), fsyncs $(metric infersight_store_fsyncs) for $(json "$OUT/$mode.json" "r['acked_batches']") acked exports; spans stored $stored of $acked acked"
  echo "$mode: serve threads: $(threads_cpu "$SERVE_PID")"
  [ "$stored" = "$acked" ] || { echo "MISMATCH: $stored stored, $acked acknowledged"; exit 1; }
  stop_serve
}

echo "== serve-path ingest, $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "serve: $BIN ($(stat -c %y "$BIN" | cut -d. -f1)); generator: $GEN"
if [ -n "${SOAK_ONLY:-}" ]; then
  [ -n "${SOAK_RATE:-}" ] || { echo "SOAK_ONLY needs SOAK_RATE" >&2; exit 2; }
else
for mode in always interval; do run_mode "$mode"; done

# peer: the same spans (whole passes over the same pool, ids rewritten alike) as a file
ROUNDS=$(json "$OUT/always.json" "max(1, round(r['acked_spans'] / r['pool']['spans']))")
"$GEN" bench-gen otlp-load --pool-spans "$POOL" --spans "$SPANS" --write-jsonl "$OUT/spans.jsonl" \
  --jsonl-rounds "$ROUNDS" 2> "$OUT/file.gen.err"
rm -rf "$OUT/file-data"
start=$(date +%s.%N)
/usr/bin/time -f "%U %S %M" -o "$OUT/file.time" \
  "$BIN" ingest --quiet --data "$OUT/file-data" --format json "$OUT/spans.jsonl" > "$OUT/file.json"
end=$(date +%s.%N)
read -r user sys maxrss < "$OUT/file.time"
file_spans=$(json "$OUT/file.json" "sum(f['records_stored'] for f in r['files'])")
wall=$(echo "$end - $start" | bc)
echo "file ingest: $file_spans spans stored in $wall s: $(echo "$file_spans / $wall" | bc) spans/s," \
  "CPU $user user + $sys sys, peak RSS $maxrss kB"

fi

# soak: offered SOAK_FACTOR x the acked rate of `always` (or SOAK_RATE), IN_FLIGHT requests per
# exporter
RATE=${SOAK_RATE:-$(json "$OUT/always.json" "int(r['acked_spans_per_s'] * $SOAK_FACTOR)")}
start_serve always soak
: > "$OUT/soak.rss"
( while kill -0 "$SERVE_PID" 2>/dev/null; do
    echo "$(date +%s) $(awk '/VmRSS/ {print $2}' "/proc/$SERVE_PID/status" 2>/dev/null) $(metric infersight_store_memtable_bytes)" >> "$OUT/soak.rss"
    sleep 5
  done ) &
SAMPLER=$!
load soak "$SOAK" --rate "$RATE" --in-flight "$IN_FLIGHT" --progress-every 10s
echo "soak: offered $RATE spans/s for $SOAK: $(json "$OUT/soak.json" "'sent %d spans/s, acked %d spans/s, 429 %d, 503 %d, failed %d, ack p99 %s ms' % (r['sent_spans_per_s'], r['acked_spans_per_s'], r['throttled'], r['unavailable'], r['failed'], r['ack_latency_ms']['p99'])")"
echo "soak: serve RSS (kB) first and last samples: $(head -1 "$OUT/soak.rss" | cut -d' ' -f2) -> $(tail -1 "$OUT/soak.rss" | cut -d' ' -f2), $(grep VmHWM "/proc/$SERVE_PID/status" | tr -s ' ')"
echo "soak: RSS every 5 s: $(cut -d' ' -f2 "$OUT/soak.rss" | tr '\n' ' ')"
# RSS by quarter of the soak, its range after the first minute, and the memtable's size
python3 - "$OUT/soak.rss" <<'PY'
import sys
rows = [line.split() for line in open(sys.argv[1]) if len(line.split()) >= 2]
t0 = int(rows[0][0])
rss = [(int(r[0]) - t0, int(r[1]) / 1e6) for r in rows]
memtable = [float(r[2]) / 1e6 for r in rows if len(r) > 2]
q = max(1, len(rss) // 4)
quarters = [rss[i * q:(i + 1) * q] for i in range(4)]
print("soak: RSS mean of each quarter: " + " -> ".join("%.2f" % (sum(v for _, v in part) / len(part)) for part in quarters if part) + " GB")
late = [v for t, v in rss if t >= 60]
if late:
    print("soak: RSS after the first minute: %.2f-%.2f GB" % (min(late), max(late)))
if memtable:
    print("soak: memtable at the samples: mean %.0f MB, max %.0f MB" % (sum(memtable) / len(memtable), max(memtable)))
PY
echo "soak: store flushes $(metric infersight_store_flushes), compactions $(metric infersight_store_compactions); 10-s progress lines acking under 10k spans/s (stalls): $(awk '/ acked / { n++; for (i = 1; i < NF; i++) if ($i == "acked" && $(i + 1) < 10000) s++ } END { printf "%d of %d", s, n }' "$OUT/soak.gen.err")"
stop_serve
kill "$SAMPLER" 2>/dev/null || true
