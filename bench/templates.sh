#!/usr/bin/env bash
# Template-mining throughput: infersight's miner vs Drain3 (PyPI, IP/hex/number masking on) on the
# same 1M raw lines, one core each, in the same run; peak RSS from /usr/bin/time -v.
# Input: the 10 Loghub-2k systems (../shared/data/loghub_2k) concatenated and repeated with every
# digit run replaced by a random number of the same length (so masking has work to do).
# Usage: bench/templates.sh   (builds the `mine` example; creates target/drain3-venv if missing)
#        BEFORE=/path/to/old/mine bench/templates.sh   also runs an older build of the example in
#        the same run (before/after comparisons of the miner under the same machine load); several
#        builds separated by `:` (BEFORE=/a/mine:/b/mine) each run in turn, as before-1, before-2.
#        RUNS=N (default 5): runs of each infersight binary, alternating; the median lines/s is the
#        figure (one run takes under 1.5 s, so a moment of load from another process can halve a
#        single reading; Drain3's 30 s run averages such moments out and runs once).
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
RUNS=${RUNS:-5}
# One timed run of a `mine` binary: prints its JSON line and its peak RSS and wall time.
run_mine() { # LABEL BINARY
  /usr/bin/time -v taskset -c 0 "$2" "$FILE" 2> "$OUT/$1.time" | tee -a "$OUT/$1.jsonl"
  grep -E "Maximum resident set size|Elapsed" "$OUT/$1.time" | sed 's/^\s*/    /'
}
median() { # FILE.jsonl -> median lines_per_second
  sed 's/.*"lines_per_second":\([0-9]*\).*/\1/' "$1" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'
}
IFS=: read -r -a BEFORES <<< "${BEFORE:-}"
rm -f "$OUT"/mine.jsonl "$OUT"/mine-before*.jsonl
for run in $(seq "$RUNS"); do
  echo "== infersight (1 thread), run $run/$RUNS"
  run_mine mine target/release/examples/mine
  for i in "${!BEFORES[@]}"; do
    echo "== infersight before-$((i + 1)): ${BEFORES[$i]} (1 thread), run $run/$RUNS"
    run_mine "mine-before-$((i + 1))" "${BEFORES[$i]}"
  done
done
echo "== infersight median lines/s over $RUNS runs: $(median "$OUT/mine.jsonl")"
for i in "${!BEFORES[@]}"; do
  echo "== infersight before-$((i + 1)) (${BEFORES[$i]}): median lines/s over $RUNS runs: $(median "$OUT/mine-before-$((i + 1)).jsonl")"
done
echo "== drain3 $("$VENV/bin/pip" show drain3 | awk '/^Version/ {print $2}') (1 thread)"
/usr/bin/time -v taskset -c 0 "$VENV/bin/python" bench/peer_drain3.py "$FILE" 2> "$OUT/drain3.time"
grep -E "Maximum resident set size|Elapsed" "$OUT/drain3.time"
