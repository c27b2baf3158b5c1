#!/usr/bin/env bash
# Ingest benchmark: 1M request spans as OTLP JSON Lines (the Collector file-exporter format).
# infersight: `infersight ingest` (decode, normalize, redact, memtable, zstd Parquet flush with
# rollups; the WAL only with `--wal`, see the README). Peer, same run, same file: DuckDB (PyPI)
# reading the JSON, flattening spans and their attributes, and writing zstd Parquet.
# Usage: bench/ingest.sh   (builds nothing; expects target/release/infersight and a python with duckdb)
#   BEFORE=/path/to/older/infersight  also runs that build, alternating with this one
#   RUNS=n                            runs per build (default 3); medians are printed
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/infersight}
PY=${PY:-python3}
OUT=${OUT:-bench/out}
SPANS=${SPANS:-1000000}
RUNS=${RUNS:-3}
BEFORE=${BEFORE:-}
mkdir -p "$OUT"
FILE="$OUT/spans-$SPANS.jsonl"
[ -s "$FILE" ] || "$BIN" bench-gen otlp-jsonl --out "$FILE" --spans "$SPANS" --per-line 1000
ls -l "$FILE"
run_one() { # label binary
  rm -rf "$OUT/ingest-data"
  local start end
  start=$(date +%s.%N)
  /usr/bin/time -f "%U %S" -o "$OUT/ingest-time" \
    "$2" ingest --quiet --data "$OUT/ingest-data" --format json "$FILE" > "$OUT/ingest-summary.json"
  end=$(date +%s.%N)
  read -r user sys < "$OUT/ingest-time"
  local wall rate
  wall=$(echo "$end - $start" | bc)
  rate=$(echo "$SPANS / $wall" | bc)
  echo "$1 $wall $rate $(echo "$user + $sys" | bc)" >> "$OUT/ingest-runs"
  echo "$1: $wall s, $rate spans/s, CPU $user user + $sys sys"
}
rm -f "$OUT/ingest-runs"
for run in $(seq 1 "$RUNS"); do
  [ -n "$BEFORE" ] && run_one before "$BEFORE"
  run_one infersight "$BIN"
done
for label in before infersight; do
  grep "^$label " "$OUT/ingest-runs" | sort -k3 -n | awk -v l="$label" \
    '{r[NR]=$3; c[NR]=$4} END {if (NR) printf "%s median: %s spans/s (CPU %s s)\n", l, r[int((NR+1)/2)], c[int((NR+1)/2)]}'
done
cat "$OUT/ingest-summary.json"; echo
"$PY" bench/peer_duckdb_ingest.py "$FILE" "$OUT/duckdb-spans.parquet"
