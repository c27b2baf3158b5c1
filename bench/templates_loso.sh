#!/usr/bin/env bash
# Template mining, leave-one-system-out (LOSO) over the Loghub-2k systems in the shared data: for
# each system, every tunable miner setting (similarity threshold, tree depth, split settings; a grid
# of 121 configurations) is chosen on the OTHER systems only (best average GA, then PA), and the
# held-out system is measured with that choice. Printed beside the default configuration's
# all-systems figures, with the Loghub format specs and with automatic header detection (no
# per-system input at all). Any other Loghub-2k system put beside the ten (`S/S_2k.log` and
# `S/S_2k.log_structured_corrected.csv`) takes part; without a known format spec its spec-mode
# content is the ground truth's `Content` column.
# Usage: bench/templates_loso.sh            (INFERSIGHT_DATA_DIR overrides ../shared/data)
set -euo pipefail
cd "$(dirname "$0")/.."
export INFERSIGHT_DATA_DIR=${INFERSIGHT_DATA_DIR:-$(cd .. && pwd)/shared/data}
cargo build --release -q -p infersight-pipeline --example loghub_eval
EVAL=target/release/examples/loghub_eval
for headers in spec detect; do
  echo "## default configuration, $headers"
  "$EVAL" --headers "$headers"
  echo
  echo "## leave-one-system-out, $headers"
  "$EVAL" --headers "$headers" --loso
  echo
done
