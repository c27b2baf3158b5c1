#!/usr/bin/env bash
# Template-mining throughput: infersight's miner vs Drain3 (PyPI, IP/hex/number masking on) on the
# same 1M raw lines, one core each, in the same run; peak RSS from /usr/bin/time -v.
# Input: the 10 Loghub-2k systems (../shared/data/loghub_2k) concatenated and repeated with every
# digit run replaced by a random number of the same length (so masking has work to do).
# Usage: bench/templates.sh   (builds the `mine` example; creates target/drain3-venv if missing)
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${INFERSIGHT_DATA_DIR:-../shared/data}
OUT=${OUT:-bench/out}
LINES=${LINES:-1000000}
VENV=${VENV:-target/drain3-venv}
mkdir -p "$OUT"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q drain3
fi
FILE="$OUT/loghub-$LINES.log"
if [ ! -s "$FILE" ]; then
  "$VENV/bin/python" - "$DATA/loghub_2k" "$LINES" "$FILE" <<'PY'
import pathlib, random, re, sys
root, total, out = pathlib.Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
lines = []
for log in sorted(root.glob("*/*_2k.log")):
    lines += log.read_text(encoding="utf-8", errors="replace").splitlines()
rng = random.Random(42)
digits = re.compile(r"\d+")
vary = lambda m: str(rng.randrange(10 ** len(m.group()))).zfill(len(m.group()))
with open(out, "w", encoding="utf-8") as handle:
    for i in range(total):
        line = lines[i % len(lines)]
        handle.write((line if i < len(lines) else digits.sub(vary, line)) + "\n")
PY
fi
ls -l "$FILE"
cargo build --release -q -p infersight-pipeline --example mine
echo "== infersight (1 thread)"
/usr/bin/time -v taskset -c 0 target/release/examples/mine "$FILE" 2> "$OUT/mine.time"
grep -E "Maximum resident set size|Elapsed" "$OUT/mine.time"
echo "== drain3 $("$VENV/bin/pip" show drain3 | awk '/^Version/ {print $2}') (1 thread)"
/usr/bin/time -v taskset -c 0 "$VENV/bin/python" bench/peer_drain3.py "$FILE" 2> "$OUT/drain3.time"
grep -E "Maximum resident set size|Elapsed" "$OUT/drain3.time"
