#!/usr/bin/env bash
# Log-sequence anomalies on the HDFS sessions (DeepLog-style next-event model): parameter
# selection on the training half, F1/precision/recall on the held-out half and the transparency
# views, train/score time. Data: DATA=/path/to/shared/data (default ../shared/data).
# REPEAT=N times each train+score (timing only).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${DATA:-../shared/data}"
REPEAT="${REPEAT:-5}"
cargo build --release -p infersight-analytics --example sequence_bench
echo "machine: $(nproc) vCPU, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
./target/release/examples/sequence_bench "$DATA" --select --repeat "$REPEAT"
