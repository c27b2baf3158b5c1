#!/usr/bin/env bash
# What one watcher per org costs (issue 22, `org_watch`): with authentication on, `serve` runs a
# watcher per org that sent requests, each over its org's rows (rollups rebuilt from them), where
# a single watcher merges the store's rollups. Here the same fleet is split over N orgs and the
# server's CPU is read while the watchers step over it.
#
#   bench/org_watch_cost.sh            # N in ORGS (default "1 4 8")
#
# Per N: a fresh store and `serve` on 127.0.0.1 (explicit ports, authentication on, `[watch]`
# default: step 30 s), N ingest tokens, each bound to its org (org-1 … org-N). The fleet, 16
# workers at RATE req/s, is split in N fleets of 16/N workers at RATE/N (healthy, seed 200+i),
# each simulated for HISTORY ending now and written to files first (not measured). Each org's
# traces, metrics and logs are then posted to /v1/traces, /v1/metrics, /v1/logs with its token;
# once the ingest queue is empty, WARMUP seconds pass (each org's watcher starts and takes its
# cold first step), then the server's CPU (utime + stime of /proc/PID/stat) is read before and
# after IDLE seconds in which nothing but the watchers (and the store's maintenance) runs.
# Reported: CPU seconds per minute of watching, and the steps the watchers computed in that time
# ("watch: detectors" debug lines).
#
# Env: INFERSIGHT (binary, default target/release/infersight), OUT (default bench/out/org_watch),
#      ORGS ("1 4 8"), RATE (48), HISTORY (30m), WARMUP (90), IDLE (240), PORT_BASE (18100).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${INFERSIGHT:-$PWD/target/release/infersight}"
OUT="${OUT:-$PWD/bench/out/org_watch}"
ORGS="${ORGS:-1 4 8}"
RATE="${RATE:-48}"
HISTORY="${HISTORY:-30m}"
WARMUP="${WARMUP:-90}"
IDLE="${IDLE:-240}"
PORT_BASE="${PORT_BASE:-18100}"
mkdir -p "$OUT"
http=$(( PORT_BASE + 1 )) api=$(( PORT_BASE + 2 )) grpc=$(( PORT_BASE + 3 ))
minutes=${HISTORY%[mh]}
if [[ $HISTORY == *h ]]; then minutes=$(( minutes * 60 )); fi

cpu_s() { # pid -> CPU seconds so far
  python3 -c "import os;f=open('/proc/$1/stat').read().rsplit(')',1)[1].split();print((int(f[11])+int(f[12]))/os.sysconf('SC_CLK_TCK'))"
}

queue_empty() {
  local depth=1
  while [[ "$depth" != "0" ]]; do
    sleep 0.5
    depth=$(curl -sf -H "authorization: Bearer $ADMIN" "http://127.0.0.1:$api/metrics" \
      | awk '$1 == "infersight_queue_depth" {print $2}')
    depth=${depth:-0}
  done
}

echo "org_watch_cost: binary $BIN, 16 workers at $RATE req/s split over N orgs, $HISTORY of history, ${IDLE}s measured after ${WARMUP}s" >&2
printf "| orgs | workers per org | spans | watcher CPU per minute | steps computed | CPU per computed step |\n|---|---|---|---|---|---|\n" > "$OUT/table.md"
for n in $ORGS; do
  run="$OUT/n$n"
  rm -rf "$run"
  mkdir -p "$run"
  printf '[store]\nfsync = "never"\n[auth]\ntokens_file = "%s"\n' "$run/tokens.json" > "$run/infersight.toml"
  ADMIN=$("$BIN" tokens create --config "$run/infersight.toml" --name admin --role admin)
  start=$(( $(date +%s) - minutes * 60 ))
  workers=$(( 16 / n ))
  rate=$(python3 -c "print($RATE / $n)")
  for i in $(seq 1 "$n"); do
    "$BIN" tokens create --config "$run/infersight.toml" --name "org-$i" --role ingest \
      --tenant "org-$i" > "$run/token-$i"
    "$BIN" simulate --scenario healthy --seed $(( 200 + i )) --duration "$HISTORY" \
      --workers "$workers" --rate "$rate" --arrivals poisson --start "$start" --quiet \
      --format json --out "$run/sim-$i" > /dev/null
  done
  INFERSIGHT_LOG="warn,infersight_rca::watch=debug,infersight_server::org_watch=info" "$BIN" serve --data "$run/data" \
    --config "$run/infersight.toml" --listen 127.0.0.1 --otlp-http-port "$http" \
    --api-port "$api" --otlp-grpc-port "$grpc" > "$run/serve.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$api/healthz" > /dev/null && break
    sleep 0.2
  done
  spans=$(python3 - "$run" "$n" "$http" <<'EOF'
import http.client, json, sys
run, n, port = sys.argv[1], int(sys.argv[2]), sys.argv[3]
spans = 0
for i in range(1, n + 1):
    token = open(f"{run}/token-{i}").read().strip()
    conn = http.client.HTTPConnection("127.0.0.1", int(port))
    for signal in ("traces", "metrics", "logs"):
        for line in open(f"{run}/sim-{i}/{signal}.jsonl"):
            if not line.strip():
                continue
            if signal == "traces":
                spans += sum(len(s.get("spans", [])) for r in json.loads(line)["resourceSpans"]
                             for s in r.get("scopeSpans", []))
            conn.request("POST", f"/v1/{signal}", line, {"content-type": "application/json",
                         "authorization": f"Bearer {token}"})
            answer = conn.getresponse()
            body = answer.read()
            if answer.status != 200:
                sys.exit(f"org-{i} {signal}: {answer.status} {body[:200]!r}")
print(spans)
EOF
)
  queue_empty
  sleep "$WARMUP"
  steps0=$(grep -c "watch: detectors" "$run/serve.log" || true)
  cpu0=$(cpu_s "$pid")
  sleep "$IDLE"
  cpu1=$(cpu_s "$pid")
  steps1=$(grep -c "watch: detectors" "$run/serve.log" || true)
  orgs_seen=$(grep -c "watching a new org" "$run/serve.log" || true)
  kill "$pid"
  wait "$pid" || true
  python3 - "$n" "$workers" "$spans" "$cpu0" "$cpu1" "$steps0" "$steps1" "$IDLE" "$orgs_seen" >> "$OUT/table.md" <<'EOF'
import sys
n, workers, spans, cpu0, cpu1, s0, s1, idle, seen = sys.argv[1:]
cpu = float(cpu1) - float(cpu0)
steps = int(s1) - int(s0)
per_min = cpu / (float(idle) / 60)
per_step = f"{cpu / steps * 1000:.0f} ms" if steps else "-"
if int(seen) != int(n):
    sys.stderr.write(f"warning: {seen} org watchers started, {n} expected\n")
print(f"| {n} | {workers} | {int(spans):,} | {per_min:.2f} s | {steps} | {per_step} |")
EOF
  tail -1 "$OUT/table.md" >&2
done
cat "$OUT/table.md"
