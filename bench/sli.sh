#!/usr/bin/env bash
# SLI rollups benchmark.
# 1. p99 of two SLIs (ttft, e2e) grouped by two dimensions (model, worker) over 10M requests:
#    from the rollup sidecars vs an exact (percentile_cont) and an approximate DataFusion scan of
#    the same store, in the same process (`bench-gen sli-compare`, median of 5 runs each).
# 2. Ingest throughput with rollups on vs off: the 1M-span OTLP JSON Lines file of bench/ingest.sh,
#    runs alternating so machine noise hits both sides alike.
# Usage: bench/sli.sh   (expects target/release/infersight)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/infersight}
OUT=${OUT:-bench/out}
ROWS=${ROWS:-10000000}
SPANS=${SPANS:-1000000}
mkdir -p "$OUT"

rm -rf "$OUT/sli-data"
/usr/bin/time -f "bench-gen: %e s, peak %M KiB" \
  "$BIN" bench-gen --data "$OUT/sli-data" requests --rows "$ROWS" --hours 24
du -sh "$OUT/sli-data"
echo "rollup sidecars: $(find "$OUT/sli-data" -name '*.rollup' -print0 | du -ch --files0-from=- | tail -1)"
echo "parquet segments: $(find "$OUT/sli-data" -name '*.parquet' -print0 | du -ch --files0-from=- | tail -1)"
"$BIN" bench-gen --data "$OUT/sli-data" sli-compare --runs 5

FILE="$OUT/spans-$SPANS.jsonl"
[ -s "$FILE" ] || "$BIN" bench-gen otlp-jsonl --out "$FILE" --spans "$SPANS" --per-line 1000
for run in 1 2 3; do
  for rollups in true false; do
    rm -rf "$OUT/ingest-rollups"
    start=$(date +%s.%N)
    INFERSIGHT__STORE__ROLLUPS=$rollups "$BIN" ingest --quiet --data "$OUT/ingest-rollups" \
      --format json "$FILE" > /dev/null
    end=$(date +%s.%N)
    echo "ingest run $run rollups=$rollups: $(echo "$end - $start" | bc) s, $(echo "$SPANS / ($end - $start)" | bc) spans/s"
  done
done
