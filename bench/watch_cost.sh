#!/usr/bin/env bash
# What the watcher (`infersight_rca::watch`, stepped by `serve` and replayed by `infersight
# watch`) costs: CPU per step over a stored history, and `serve`'s OTLP ingest with it on vs off.
#
#   bench/watch_cost.sh cost     # CPU per step: a 16-worker fleet at 50 req/s with HOURS of
#                                # history, and the growth with workers (WORKERS at GROWTH_HOURS)
#   bench/watch_cost.sh growth   # only the growth with workers
#   bench/watch_cost.sh ingest   # `serve` ingest, watcher on vs off, RUNS alternated pairs
#   bench/watch_cost.sh saturate # the same at saturation: `bench-gen otlp-load` outruns `serve`
#
# cost: each store is built once (kept under OUT; delete it to rebuild): `simulate --scenario
# healthy` one hour at a time (seed = the hour, the run ending at the last whole hour before now,
# so raw engine lines date right), each hour's traces, metrics, OTLP logs and raw engine lines
# ingested into the store, then the files deleted. Then `infersight watch` replays the last
# REPLAY_MINUTES of the store (step 30 s, default `[watch]`), with the watcher's debug lines on:
# at each "watch: detectors" line (one per evaluated minute; the other step of the minute reuses
# its detections) the process's CPU time is read from /proc (every thread's schedstat, in ns;
# threads that exit keep their last reading), so a step's CPU is the difference between two lines,
# whatever the load of the machine. The first line's CPU (process start, store open, the cold
# first step that reads the whole history) is reported apart.
#
# ingest: per run a fresh store and `serve` on 127.0.0.1 (explicit ports), `[watch] enabled` on or
# off (INFERSIGHT__WATCH__ENABLED), then `simulate --otlp` sends SERVE_DURATION of a 16-worker
# fleet at 50 req/s (healthy, the same seed every run, timestamps ending at the run's start so the
# watcher's windows hold the data as they would live) and the run ends when the server's ingest
# queue is empty. Reported: spans/s over the wall time, and the server's CPU seconds (utime +
# stime of its /proc/PID/stat, which includes the watcher's steps).
#
# saturate: per run a fresh store and `serve` (watcher on or off; warnings and the watcher's
# debug lines, whose "watch: detectors" lines count the minutes it evaluated), loaded
# for SAT_DURATION by `infersight bench-gen otlp-load --ending-now` (16 exporters, gRPC and
# HTTP/protobuf alternating, closed loop: each sends its next batch when the last is answered, so
# `serve` sets the rate; the simulated pool ends at the run's start, so the watcher's windows hold
# it as live traffic, every pass over the pool adding those minutes again with new ids). Reported:
# acknowledged spans/s (the generator's), ack p99, and the server's CPU seconds.
#
# Env: INFERSIGHT (binary, default target/release/infersight), OUT (default bench/out/watch_cost),
#      HOURS (24), GROWTH_HOURS (3), WORKERS (8,16,32), RATE (50), REPLAY_MINUTES (70),
#      RUNS (3), SERVE_DURATION (1h), SAT_DURATION (3m), PORT_BASE (18000), END (the stores' end, Unix s: default the
#      last whole hour before now less one; a kept store needs the END it was built with).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${INFERSIGHT:-$PWD/target/release/infersight}"
OUT="${OUT:-$PWD/bench/out/watch_cost}"
HOURS="${HOURS:-24}"
GROWTH_HOURS="${GROWTH_HOURS:-3}"
WORKERS="${WORKERS:-8,16,32}"
RATE="${RATE:-50}"
REPLAY_MINUTES="${REPLAY_MINUTES:-70}"
RUNS="${RUNS:-3}"
SERVE_DURATION="${SERVE_DURATION:-1h}"
SAT_DURATION="${SAT_DURATION:-3m}"
PORT_BASE="${PORT_BASE:-18000}"
MODE="${1:-cost}"
mkdir -p "$OUT"
# the end of every stored history: the last whole hour before now, less one hour
END="${END:-$(( $(date +%s) / 3600 * 3600 - 3600 ))}"

build_store() { # workers hours -> prints the store's folder; built once
  local workers=$1 hours=$2
  local data="$OUT/store-w$workers-h$hours"
  if [[ -f "$data/.built" ]]; then
    echo "$data"
    return
  fi
  rm -rf "$data"
  local start=$(( END - hours * 3600 )) h chunk="$OUT/chunk"
  for (( h = 0; h < hours; h++ )); do
    rm -rf "$chunk"
    "$BIN" simulate --scenario healthy --seed $(( 100 + h )) --duration 1h --workers "$workers" \
      --rate "$RATE" --arrivals poisson --start $(( start + h * 3600 )) --quiet --format json \
      --out "$chunk" > /dev/null
    "$BIN" ingest --quiet --data "$data" "$chunk/traces.jsonl" "$chunk/metrics.jsonl" \
      "$chunk/logs.jsonl" "$chunk"/raw/*.log > /dev/null
    echo "  store w$workers: hour $(( h + 1 ))/$hours ingested" >&2
  done
  rm -rf "$chunk"
  echo "$(( END ))" > "$data/.built"
  echo "$data"
}

combinations() { # store -> distinct rollup combinations in its last hour
  "$BIN" query --data "$1" --format csv "SELECT count(*) AS n FROM (SELECT DISTINCT service,
    runtime, worker, model, model_version, lora_adapters, kv_cache_policy, tenant FROM requests
    WHERE ts >= to_timestamp($(( END - 3600 ))))" | tail -1
}

measure_steps() { # label store
  local label=$1 data=$2
  local since=$(( END - REPLAY_MINUTES * 60 ))
  local combos
  combos=$(combinations "$data" 2>/dev/null || echo "?")
  INFERSIGHT_LOG="infersight_rca::watch=debug" python3 - "$label" "$combos" "$OUT/$label" \
    "$BIN" watch --data "$data" --since "$since" --until "$END" --format json <<'EOF'
import glob, json, os, re, statistics, subprocess, sys, time
label, combos, prefix, cmd = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
last = {}  # tid -> ns on CPU when last seen (a thread that exits keeps its last reading)
def cpu_ns(pid):
    for f in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            last[f] = int(open(f).read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return sum(last.values())
def ticks(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
wall0 = time.monotonic()
p = subprocess.Popen(cmd, stdout=open(prefix + ".json", "w"), stderr=subprocess.PIPE, text=True)
samples = []  # (cpu ns, fields of the line)
for line in p.stderr:
    if "watch: detectors" not in line:
        continue
    now = cpu_ns(p.pid)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", line)
    fields = {k: float(v) for k, v in re.findall(r"(\w+_ms)=([0-9.]+)", plain)}
    samples.append((now, fields))
    try:
        total_ticks = ticks(p.pid)
    except OSError:
        pass
p.wait()
wall = time.monotonic() - wall0
if p.returncode != 0 or len(samples) < 3:
    sys.exit(f"{label}: watch failed (exit {p.returncode}, {len(samples)} detector lines)")
deltas = [(b[0] - a[0]) / 1e6 for a, b in zip(samples, samples[1:])]
behaviour = [d for d, s in zip(deltas, samples[1:]) if s[1].get("behaviour_ms", 0) >= 1.0]
rest = [d for d, s in zip(deltas, samples[1:]) if s[1].get("behaviour_ms", 0) < 1.0]
series_ms = [s[1].get("series_ms", 0) for s in samples[1:]]
incidents = len(json.load(open(prefix + ".json")))
q = lambda xs, f: sorted(xs)[min(len(xs) - 1, int(f * len(xs)))] if xs else float("nan")
steps = 2 * len(deltas)  # two 30 s steps per evaluated minute (the second reuses the first's)
print(f"{label:10} combos/h {combos:>5}  cold first step {samples[0][0] / 1e6:7.0f} ms  "
      f"per evaluated minute: median {statistics.median(deltas):6.1f} ms, p90 {q(deltas, .9):6.1f}, "
      f"max {max(deltas):6.1f} | with behaviour detectors {statistics.median(behaviour) if behaviour else float('nan'):6.1f} "
      f"(n={len(behaviour)}), without {statistics.median(rest) if rest else float('nan'):6.1f} (n={len(rest)}) | "
      f"mean per 30 s step {sum(deltas) / steps:5.1f} ms | series wall max {max(series_ms):6.1f} ms | "
      f"incidents {incidents} | replay wall {wall:.0f} s, CPU {total_ticks:.1f} s")
json.dump({"label": label, "combos": combos, "cold_ms": samples[0][0] / 1e6, "deltas_ms": deltas,
           "fields": [s[1] for s in samples]}, open(prefix + ".steps.json", "w"))
EOF
}

run_cost() {
  echo "cost: binary $BIN, stores end at $(date -u -d "@$END" +%FT%TZ), replay of the last $REPLAY_MINUTES min" >&2
  # each store is measured as soon as it is built (a partial run still reports)
  if [[ "$MODE" != growth ]]; then measure_steps "w16-h$HOURS" "$(build_store 16 "$HOURS")"; fi
  for w in ${WORKERS//,/ }; do
    measure_steps "w$w-h$GROWTH_HOURS" "$(build_store "$w" "$GROWTH_HOURS")"
  done
}

cpu_seconds() { # pid: user + system CPU seconds so far (/proc/PID/stat after the name)
  python3 -c "import os;f=open('/proc/$1/stat').read().rsplit(')',1)[1].split();print((int(f[11])+int(f[12]))/os.sysconf('SC_CLK_TCK'))"
}

serve_run() { # label on|off run -> one line: label spans/s wall cpu
  local label=$1 enabled=$2 run=$3
  local data="$OUT/serve-$label" log="$OUT/serve-$label.log"
  local http=$(( PORT_BASE + 1 )) api=$(( PORT_BASE + 2 )) grpc=$(( PORT_BASE + 3 ))
  rm -rf "$data"
  INFERSIGHT__WATCH__ENABLED=$enabled "$BIN" serve --data "$data" --listen 127.0.0.1 \
    --otlp-http-port "$http" --api-port "$api" --otlp-grpc-port "$grpc" > "$log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$api/metrics" > /dev/null && break
    sleep 0.2
  done
  local minutes=${SERVE_DURATION%[mh]}
  if [[ $SERVE_DURATION == *h ]]; then minutes=$(( minutes * 60 )); fi
  local start=$(( $(date +%s) - minutes * 60 ))
  local t0 t1
  t0=$(date +%s.%N)
  "$BIN" simulate --scenario healthy --seed 11 --duration "$SERVE_DURATION" --workers 16 \
    --rate "$RATE" --arrivals poisson --start "$start" --quiet --format json \
    --otlp "http://127.0.0.1:$http" > "$OUT/sim-$label.json"
  local depth=1
  while [[ "$depth" != "0" ]]; do
    sleep 0.2
    depth=$(curl -sf "http://127.0.0.1:$api/metrics" | awk '$1 == "infersight_queue_depth" {print $2}')
    depth=${depth:-0}
  done
  t1=$(date +%s.%N)
  local cpu
  cpu=$(cpu_seconds "$pid")
  kill "$pid"
  wait "$pid" || true
  python3 - "$label" "$run" "$OUT/sim-$label.json" "$t0" "$t1" "$cpu" <<'EOF'
import json, sys
label, run, summary, t0, t1, cpu = sys.argv[1:]
s = json.load(open(summary))
spans = s.get("spans") or s.get("summary", {}).get("spans")
wall = float(t1) - float(t0)
print(f"{label} {run} {spans} {wall:.2f} {int(spans) / wall:.0f} {float(cpu):.2f}")
EOF
}

alternate_arms() { # run-function results-file: RUNS pairs, the watcher on and off, the arm
  # that goes first alternating; one line per run from the function, kept in the file
  local fn=$1 results=$2 order
  : > "$results"
  for run in $(seq 1 "$RUNS"); do
    if (( run % 2 )); then order="on off"; else order="off on"; fi
    for arm in $order; do
      local enabled=true
      [[ $arm == off ]] && enabled=false
      "$fn" "$arm" "$enabled" "$run" | tee -a "$results"
    done
  done
}

summarize_arms() { # results-file header spans/s-column: medians per arm (server CPU: column 5)
  python3 - "$@" <<'EOF'
import statistics, sys
path, header, col = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = [l.split() for l in open(path) if l.strip()]
by = {arm: [r for r in rows if r[0] == arm] for arm in ("on", "off")}
med = lambda arm, i: statistics.median(float(r[i]) for r in by[arm])
print(header)
for arm in ("on", "off"):
    print(f"watcher {arm}: median {med(arm, col):.0f} spans/s, server CPU {med(arm, 5):.2f} s")
print(f"on / off: throughput {med('on', col) / med('off', col):.3f}, "
      f"server CPU {med('on', 5) / med('off', 5):.3f}")
pairs = [(a, b) for a in by["on"] for b in by["off"] if a[1] == b[1]]
print("per pair (on/off throughput):",
      " ".join(f"{float(a[col]) / float(b[col]):.3f}" for a, b in pairs))
EOF
}

run_ingest() {
  echo "ingest: binary $BIN, $SERVE_DURATION of 16 workers at $RATE req/s per run, $RUNS pairs" >&2
  alternate_arms serve_run "$OUT/ingest-runs"
  summarize_arms "$OUT/ingest-runs" "label run spans wall_s spans_per_s server_cpu_s" 4
}

saturate_run() { # label on|off run -> one line: label run acked_spans acked_per_s p99_ms cpu
  local label=$1 enabled=$2 run=$3
  local data="$OUT/sat-$label" err="$OUT/sat-$label.err"
  local http=$(( PORT_BASE + 1 )) api=$(( PORT_BASE + 2 )) grpc=$(( PORT_BASE + 3 ))
  rm -rf "$data"
  INFERSIGHT_LOG=warn,infersight_rca::watch=debug INFERSIGHT__WATCH__ENABLED=$enabled \
    "$BIN" serve --data "$data" \
    --listen 127.0.0.1 --otlp-http-port "$http" --api-port "$api" --otlp-grpc-port "$grpc" \
    > /dev/null 2> "$err" &
  local pid=$! up=
  for _ in $(seq 1 300); do
    if curl -sf "http://127.0.0.1:$api/metrics" > /dev/null; then up=1; break; fi
    sleep 0.2
  done
  if [[ -z $up ]]; then
    kill "$pid" 2> /dev/null || true
    echo "serve did not start: $(tail -3 "$err")" >&2
    return 1
  fi
  local cpu0 cpu1 loaded=0
  cpu0=$(cpu_seconds "$pid")
  "$BIN" bench-gen otlp-load --grpc "http://127.0.0.1:$grpc" --http "http://127.0.0.1:$http" \
    --exporters 16 --duration "$SAT_DURATION" --ending-now --progress-every 0s \
    > "$OUT/sat-$label.json" 2> "$OUT/sat-$label.gen.err" || loaded=$?
  cpu1=$(cpu_seconds "$pid")
  kill "$pid"
  wait "$pid" || true
  if (( loaded != 0 )); then
    echo "bench-gen failed ($loaded): $(tail -3 "$OUT/sat-$label.gen.err")" >&2
    return 1
  fi
  echo "  $label: $(grep -c 'watch: detectors' "$err" || true) watcher minutes evaluated" >&2
  python3 - "$label" "$run" "$OUT/sat-$label.json" "$cpu0" "$cpu1" <<'EOF'
import json, sys
label, run, path, cpu0, cpu1 = sys.argv[1:]
r = json.load(open(path))
print(f"{label} {run} {r['acked_spans']} {r['acked_spans_per_s']:.0f} "
      f"{r['ack_latency_ms']['p99']} {float(cpu1) - float(cpu0):.2f}")
EOF
}

run_saturate() {
  echo "saturate: binary $BIN, $SAT_DURATION per run, $RUNS pairs, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  alternate_arms saturate_run "$OUT/saturate-runs"
  summarize_arms "$OUT/saturate-runs" "label run acked_spans acked_spans_per_s ack_p99_ms server_cpu_s" 3
}

case "$MODE" in
  cost | growth) run_cost ;;
  ingest) run_ingest ;;
  saturate) run_saturate ;;
  *) echo "usage: bench/watch_cost.sh cost|growth|ingest|saturate" >&2; exit 2 ;;
esac

