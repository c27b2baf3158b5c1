#!/usr/bin/env bash
# Root-cause localization on the public RCA tables (Squeeze B0 additive, RiskLoc RS derived ratio):
# F1 per setting and average, time per case. Data: DATA=/path/to/shared/data (default ../shared/data).
# REPEAT=N times each localization (timing only; the parse is timed once).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${DATA:-../shared/data}"
REPEAT="${REPEAT:-5}"
cargo build --release -p infersight-analytics --example localize_bench
echo "machine: $(nproc) vCPU, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
./target/release/examples/localize_bench "$DATA" --repeat "$REPEAT"
