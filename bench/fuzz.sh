#!/usr/bin/env bash
# The fuzz harnesses (issue 23 item 6), run long: the same proptest harnesses CI runs with a few
# cases each (`fuzz` modules of the `it` binaries of infersight-model, infersight-ingest and
# infersight-pipeline; the config loader's unit test in the `infersight` binary), here each for
# SECONDS of wall time in rounds of CASES cases (seed, seed + 1, …), or exactly CASES cases when
# SECONDS is 0. Prints one line per harness (cases, time, ok/FAILED) and the total; a failing
# harness prints its minimized input, and the script exits 1.
#
#   bench/fuzz.sh                 # every harness, SECONDS each
#   bench/fuzz.sh model ingest    # only these crates (model, ingest, pipeline, config)
#
# Debug build (overflow checks on, as a fuzzer wants them). Harnesses run one at a time.
#
# Env: SECONDS_PER_HARNESS (60), CASES (1000 per round; the exact count when
#      SECONDS_PER_HARNESS=0), SEED (0x1f5e2023 as decimal: 526650403), OUT (bench/out/fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_HARNESS="${SECONDS_PER_HARNESS:-60}"
CASES="${CASES:-1000}"
SEED="${SEED:-526650403}"
OUT="${OUT:-bench/out/fuzz}"
mkdir -p "$OUT"
crates=("$@")
[ ${#crates[@]} -eq 0 ] && crates=(model ingest pipeline config)

export INFERSIGHT_FUZZ_CASES="$CASES" INFERSIGHT_FUZZ_SEED="$SEED"
if [ "$SECONDS_PER_HARNESS" != 0 ]; then
  export INFERSIGHT_FUZZ_SECONDS="$SECONDS_PER_HARNESS"
fi

status=0
started=$(date +%s)
for crate in "${crates[@]}"; do
  case "$crate" in
    model|ingest|pipeline) args=(-p "infersight-$crate" --test it fuzz::) ;;
    config) args=(-p infersight --bin infersight config::fuzz) ;;
    *) echo "unknown crate $crate (model, ingest, pipeline, config)" >&2; exit 2 ;;
  esac
  log="$OUT/$crate.log"
  if ! cargo test -q "${args[@]}" -- --nocapture --test-threads 1 >"$log" 2>&1; then
    status=1
  fi
  # the harnesses' own lines (they may share a line with the test runner's output)
  grep -o 'fuzz [a-z_]*: [0-9]* cases in [0-9.]* s, [A-Z]*[a-z]*' "$log" | sed "s/^/$crate: /" || true
  if grep -q 'minimal failing input\|panicked' "$log"; then
    echo "$crate: a harness failed, see $log" >&2
  fi
done
echo "total: $(( $(date +%s) - started )) s wall"
exit "$status"
