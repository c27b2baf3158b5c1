#!/usr/bin/env bash
# Peak RSS (issue 23 item 4): `infersight demo` as it is, and with its flushes held back until the
# shutdown (the memtable limits and flush interval raised: what the demo did before 8cd3695), then
# `serve` (fed by `simulate --otlp`), `rca` over serve's store and `ingest` of the same telemetry
# from files, at fleet sizes SIZES (WORKERSxRATE, default "8x15 32x60": the rate per worker kept)
# over DUR simulated minutes (default 30m). BIN=path/to/infersight (default target/release);
# SKIP_DEMO=1 skips the two demo runs; scratch under OUT (default /tmp/infersight-memory).
# Peaks from /usr/bin/time -v, serve's from its VmHWM read every 0.2 s.
set -u
BIN=${BIN:-$(pwd)/target/release/infersight}
W=${OUT:-/tmp/infersight-memory}; rm -rf $W; mkdir -p $W; cd $W
peak() { awk '/Maximum resident/{print $6}' "$1"; }
wall() { awk '/Elapsed \(wall/{print $8}' "$1"; }
echo "machine: $(nproc) cpu, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
if [ -z "${SKIP_DEMO:-}" ]; then
/usr/bin/time -v $BIN demo --out $W/demo > demo.out 2> demo.err
echo "demo default: peak_kb=$(peak demo.err) wall=$(wall demo.err) $(grep -o 'the top-ranked root cause is[^.]*' $W/demo/report.md)"
INFERSIGHT__STORE__MEMTABLE_MAX_BYTES=100000000000 INFERSIGHT__STORE__MEMTABLE_MAX_ROWS=1000000000 INFERSIGHT__STORE__FLUSH_INTERVAL=10h \
  /usr/bin/time -v $BIN demo --out $W/demo-held > demoh.out 2> demoh.err
echo "demo flush held to the end: peak_kb=$(peak demoh.err) wall=$(wall demoh.err)"
fi
for size in ${SIZES:-8x15 32x60}; do
  w=${size%x*}; r=${size#*x}
  $BIN simulate --scenario lora_kv_regression --workers $w --rate $r --duration ${DUR:-30m} --arrivals poisson --out $W/sim$w --quiet --format json > sim$w.json 2>/dev/null
  $BIN serve --data $W/serve$w --otlp-grpc-port 0 --otlp-http-port 14318 --api-port 0 > serve$w.out 2> serve$w.err &
  pid=$!; sleep 3
  (while kill -0 $pid 2>/dev/null; do grep VmHWM /proc/$pid/status > hwm$w.tmp 2>/dev/null && mv hwm$w.tmp hwm$w; sleep 0.2; done) &
  /usr/bin/time -v $BIN simulate --scenario lora_kv_regression --workers $w --rate $r --duration ${DUR:-30m} --arrivals poisson --otlp http://127.0.0.1:14318 --quiet > send$w.out 2> send$w.err
  kill -TERM $pid; wait $pid
  sleep 0.5; hwm=$(awk '{print $2}' hwm$w)
  /usr/bin/time -v $BIN rca --data $W/serve$w > rca$w.out 2> rca$w.err
  /usr/bin/time -v $BIN ingest --data $W/ingest$w --quiet $W/sim$w/traces.jsonl $W/sim$w/logs.jsonl $W/sim$w/metrics.jsonl $W/sim$w/raw/*.log > ingest$w.out 2> ingest$w.err
  echo "workers=$w rate=$r $(grep -o '"requests":[0-9]*' sim$w.json | head -1) serve_peak_kb=$hwm send_wall=$(wall send$w.err) rca_peak_kb=$(peak rca$w.err) rca_wall=$(wall rca$w.err) ingest_peak_kb=$(peak ingest$w.err) ingest_wall=$(wall ingest$w.err)"
done
