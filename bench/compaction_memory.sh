#!/usr/bin/env bash
# Compaction memory (bench/README.md, "Compaction memory", issue 23 item 3): one hour of synthetic
# `requests` rows written as many small segments (`bench-gen requests --hours 1 --flush-every N`),
# then compacted into one by OLD_BIN and by BIN (`infersight store compact`), alternating which
# goes first, each run on a fresh copy of the store. Prints each run's wall time and peak RSS
# (`/usr/bin/time -v`, maximum resident set size) and the segments it left, the medians and the
# new/old ratios, and checks that every run kept every row. The rows span two UTC hours, so
# compaction leaves one segment per hour (and what a partition too small to merge keeps).
# Usage: OLD_BIN=/tmp/infersight-old bench/compaction_memory.sh
# Env: OLD_BIN (required), BIN (default target/release/infersight, built if missing),
#      ROWS (4000000), FLUSH_EVERY (500000), RUNS (3).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/infersight}
OLD_BIN=${OLD_BIN:?set OLD_BIN to the binary to compare against (e.g. built from the commit before)}
OUT=bench/out/compaction
ROWS=${ROWS:-4000000}
FLUSH_EVERY=${FLUSH_EVERY:-500000}
RUNS=${RUNS:-3}

[ -x "$BIN" ] || cargo build --release -p infersight
[ -x "$OLD_BIN" ] || { echo "OLD_BIN=$OLD_BIN is not an executable" >&2; exit 1; }
command -v /usr/bin/time > /dev/null || { echo "needs /usr/bin/time (Debian: time)" >&2; exit 1; }

rm -rf "$OUT"
mkdir -p "$OUT"
trap 'rm -rf "$OUT/run"' EXIT
"$BIN" bench-gen requests --data "$OUT/data" --rows "$ROWS" --hours 1 --flush-every "$FLUSH_EVERY"
segments=$("$BIN" store stats --data "$OUT/data" | python3 -c '
import json, sys
stats = json.load(sys.stdin)
print(dict(stats["tables"])["requests"]["segments"])')
echo "store: $ROWS requests rows in $segments segments ($(du -sh "$OUT/data/segments" | cut -f1))"

# one compaction: "<wall s> <peak RSS kB> <segments left>"; fails unless every row is left
compact() {
  local bin=$1
  rm -rf "$OUT/run"
  cp -r "$OUT/data" "$OUT/run"
  /usr/bin/time -v -o "$OUT/time.txt" "$bin" store compact --data "$OUT/run" > /dev/null
  local left
  left=$("$bin" store stats --data "$OUT/run" | python3 -c '
import json, sys
requests = dict(json.load(sys.stdin)["tables"])["requests"]
assert requests["segment_rows"] == int(sys.argv[1]), requests
print(requests["segments"])' "$ROWS")
  local wall rss
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {n = split($2, t, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + t[i]; print s}' "$OUT/time.txt")
  rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$OUT/time.txt")
  echo "$wall $rss $left"
}

: > "$OUT/old.txt"
: > "$OUT/new.txt"
for run in $(seq 1 "$RUNS"); do
  if [ $((run % 2)) = 1 ]; then order="old new"; else order="new old"; fi
  for which in $order; do
    bin=$BIN
    [ "$which" = old ] && bin=$OLD_BIN
    result=$(compact "$bin")
    echo "$result" >> "$OUT/$which.txt"
    read -r wall rss left <<< "$result"
    echo "run $run $which: wall $wall s, peak RSS $rss kB, $left segments left"
  done
done

python3 - "$OUT/old.txt" "$OUT/new.txt" <<'EOF'
import statistics, sys
def load(path):
    rows = [line.split() for line in open(path) if line.strip()]
    return [float(r[0]) for r in rows], [int(r[1]) for r in rows]
old_wall, old_rss = load(sys.argv[1])
new_wall, new_rss = load(sys.argv[2])
mw, mr = statistics.median, statistics.median
print(f"median wall: old {mw(old_wall):.2f} s, new {mw(new_wall):.2f} s, new/old {mw(new_wall) / mw(old_wall):.2f}")
print(f"median peak RSS: old {mr(old_rss) / 1024:.0f} MiB, new {mr(new_rss) / 1024:.0f} MiB, new/old {mr(new_rss) / mr(old_rss):.2f}")
EOF
