#!/usr/bin/env bash
# Query benchmark: p99 of e2e_ms per model over 10M `requests` rows in the store's own Parquet
# segments. infersight (DataFusion) vs DuckDB (PyPI) on the same files, same run.
# Usage: bench/query.sh   (expects target/release/infersight and a python with duckdb)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/infersight}
PY=${PY:-python3}
OUT=${OUT:-bench/out}
ROWS=${ROWS:-10000000}
DATA="$OUT/query-data-$ROWS"
if [ ! -d "$DATA/segments" ]; then
  "$BIN" bench-gen --data "$DATA" requests --rows "$ROWS" --hours 4
fi
du -sh "$DATA/segments"
"$PY" bench/query_compare.py "$BIN" "$DATA"
