#!/usr/bin/env bash
# Ingest benchmark: 1M request spans as OTLP JSON Lines (the Collector file-exporter format).
# infersight: `infersight ingest` (decode, normalize, redact, WAL with fsync per batch, memtable,
# zstd Parquet flush). Peer, same run, same file: DuckDB (PyPI) reading the JSON, flattening
# spans and their attributes, and writing zstd Parquet.
# Usage: bench/ingest.sh   (builds nothing; expects target/release/infersight and a python with duckdb)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/infersight}
PY=${PY:-python3}
OUT=${OUT:-bench/out}
SPANS=${SPANS:-1000000}
mkdir -p "$OUT"
FILE="$OUT/spans-$SPANS.jsonl"
[ -s "$FILE" ] || "$BIN" bench-gen otlp-jsonl --out "$FILE" --spans "$SPANS" --per-line 1000
ls -l "$FILE"
for run in 1 2 3; do
  rm -rf "$OUT/ingest-data"
  start=$(date +%s.%N)
  "$BIN" ingest --quiet --data "$OUT/ingest-data" --format json "$FILE" > "$OUT/ingest-summary.json"
  end=$(date +%s.%N)
  echo "infersight run $run: $(echo "$end - $start" | bc) s, $(echo "$SPANS / ($end - $start)" | bc) spans/s"
done
cat "$OUT/ingest-summary.json"; echo
"$PY" bench/peer_duckdb_ingest.py "$FILE" "$OUT/duckdb-spans.parquet"
