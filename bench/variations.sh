#!/usr/bin/env bash
# Scenarios × variations: `infersight rca` on every simulator scenario told in other conventions
# (`simulate --variation NAME`, issue 19), each cell as the integration test runs it (8 workers,
# 10 req/s, 30 simulated minutes, Poisson arrivals; traces and metrics ingested, plus the
# `[PROMPT]` lines for the scenarios whose prompts the RCA reads, then dated 35 minutes ago).
# A cell is right when the top-ranked root causes are the ground truth's combinations (none for
# `healthy`), keys compared through the mapping table (`infersight mapping`: a mapped attribute
# and its column are one dimension); a combination the truth lists as equivalent, or one that
# selects the same stored requests (Jaccard >= 0.95: the data cannot tell them apart), is as right,
# and the kinds read off a cause's names (version_regression, slow_worker) must be there too.
# Prints a table (R right, W wrong, - the variation does not
# apply, ? not run) and the verdict of each wrong cell; cells as JSON lines in $OUT/cells.jsonl,
# one variation's column after another (the plain column, `none`, last).
#   SEEDS="1 2"  SCENARIOS="lora_kv_regression healthy"  VARIATIONS="none rollout"  JOBS=2
#   TABLE_ONLY=1: print the table of the cells in $OUT/cells.jsonl (of a run cut short) and exit.
# A debug build is enough (cargo build -p infersight); BIN= to use another binary.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/debug/infersight}
OUT=${OUT:-bench/out/variations}
if [ -z "${BIN_READY:-}" ] && [ -z "${TABLE_ONLY:-}" ]; then cargo build -q -p infersight; fi
[ -x "$BIN" ] || { echo "no binary at $BIN" >&2; exit 1; }
# the variation names of `infersight simulate --help` (its --variation help lists them)
ALL_VARIATIONS=$("$BIN" simulate --help | python3 -c '
import re, sys
text = " ".join(sys.stdin.read().split())
m = re.search(r"\(repeatable\): (.*?); or a number", text)
print(" ".join(n.strip() for n in m.group(1).split(",")))')
SCENARIOS=${SCENARIOS:-$("$BIN" scenarios --format json | python3 -c \
  'import json,sys; print(" ".join(s["name"] for s in json.load(sys.stdin)))')}
VARIATIONS=${VARIATIONS:-$ALL_VARIATIONS none}
if [ -z "${TABLE_ONLY:-}" ]; then
  rm -rf "$OUT"
  mkdir -p "$OUT"
  "$BIN" mapping >"$OUT/mapping.md"
fi
BIN="$BIN" OUT="$OUT" SEEDS="${SEEDS:-1}" JOBS="${JOBS:-1}" SCENARIOS="$SCENARIOS" \
  VARIATIONS="$VARIATIONS" TABLE_ONLY="${TABLE_ONLY:-}" python3 - <<'PY'
import concurrent.futures, json, os, re, subprocess, sys, time

BIN, OUT = os.environ["BIN"], os.environ["OUT"]
SEEDS = [int(s) for s in os.environ["SEEDS"].split()]
SCENARIOS = os.environ["SCENARIOS"].split()
VARIATIONS = os.environ["VARIATIONS"].split()
# the scenarios whose prompt lines are ingested (as crates/infersight/tests/it/rca.rs does)
PROMPT_SCENARIOS = {"prompt_drift", "healthy", "injection_resonance", "truncation_surge"}
sys.path.insert(0, "bench")
from causes import Judge
JUDGE = Judge(BIN, None if os.environ["TABLE_ONLY"] else f"{OUT}/mapping.md")

def run(args):
    return subprocess.run([BIN, *args], check=True, capture_output=True, text=True).stdout

def applies(scenario, variation):
    """Whether the variation takes effect (the ground truth lists the ones that do)."""
    if variation == "none":
        return True
    probe = f"{OUT}/probe-{scenario}-{variation}"
    run(["simulate", "--scenario", scenario, "--duration", "1m", "--workers", "8", "--rate", "1",
         "--arrivals", "poisson", "--quiet", "--variation", variation, "--out", probe])
    truth = json.load(open(f"{probe}/ground_truth.json"))
    subprocess.run(["rm", "-rf", probe], check=True)
    return variation in truth.get("variations", [])

def cell(scenario, variation, seed):
    base = f"{OUT}/{scenario}-{variation}-{seed}"
    sim, data = f"{base}/sim", f"{base}/data"
    args = ["simulate", "--scenario", scenario, "--seed", str(seed), "--duration", "30m",
            "--workers", "8", "--rate", "10", "--arrivals", "poisson", "--quiet", "--out", sim]
    if variation != "none":
        args += ["--variation", variation]
    prompts = scenario in PROMPT_SCENARIOS
    if prompts:
        args += [f"--start={(int(time.time()) - 35 * 60) // 60 * 60}"]
    started = time.time()
    run(args)
    files = [f"{sim}/traces.jsonl", f"{sim}/metrics.jsonl"]
    if prompts:
        with open(f"{sim}/prompts.log", "w") as out:
            for log in sorted(os.listdir(f"{sim}/raw")):
                out.writelines(l for l in open(f"{sim}/raw/{log}") if "[PROMPT]" in l)
        files.append(f"{sim}/prompts.log")
    run(["ingest", "--quiet", "--data", data, *files])
    report = json.loads(run(["rca", "--data", data, "--format", "json"]))
    truth = json.load(open(f"{sim}/ground_truth.json"))
    canonical = lambda causes: [JUDGE.canonical(c["dimensions"]) for c in causes or []]
    want, got = canonical(truth["root_causes"]), canonical(report.get("root_causes"))
    right = JUDGE.right(data, truth["root_causes"], report.get("root_causes"))
    missing = JUDGE.kinds_missing(data, truth.get("expected_signals"), report.get("root_causes"),
                                  report.get("signals"))
    subprocess.run(["rm", "-rf", base], check=True)
    return {"scenario": scenario, "variation": variation, "seed": seed,
            "right": right and not missing, "causes_right": right, "kinds_missing": missing,
            "want": want, "got": got, "verdict": report.get("verdict"),
            "seconds": round(time.time() - started, 1)}

results, skipped = {}, set()
if os.environ["TABLE_ONLY"]:
    for line in open(f"{OUT}/cells.jsonl"):
        r = json.loads(line)
        results[(r["scenario"], r["variation"], r["seed"])] = r
    skipped = {tuple(k) for k in json.load(open(f"{OUT}/skipped.json"))}
else:
    todo = []
    for variation in VARIATIONS:
        for scenario in SCENARIOS:
            if applies(scenario, variation):
                todo += [(scenario, variation, seed) for seed in SEEDS]
            else:
                skipped.add((scenario, variation))
    json.dump(sorted(skipped), open(f"{OUT}/skipped.json", "w"))
    with open(f"{OUT}/cells.jsonl", "w") as log, \
            concurrent.futures.ThreadPoolExecutor(int(os.environ["JOBS"])) as pool:
        for r in pool.map(lambda c: cell(*c), todo):
            results[(r["scenario"], r["variation"], r["seed"])] = r
            log.write(json.dumps(r) + "\n")
            log.flush()
            print(f'{r["scenario"]} × {r["variation"]} seed {r["seed"]}: '
                  f'{"right" if r["right"] else "WRONG"} ({r["seconds"]} s)', flush=True)

print(f"\nseeds {' '.join(map(str, SEEDS))}: R right, W wrong, - does not apply, ? not run\n")
short = lambda v: v if len(v) <= 9 else v[:9]
print("| scenario | " + " | ".join(short(v) for v in VARIATIONS) + " |")
print("|---|" + "---|" * len(VARIATIONS))
for scenario in SCENARIOS:
    row = []
    for v in VARIATIONS:
        if (scenario, v) in skipped:
            row.append("-")
            continue
        row.append("".join(
            ("R" if results[(scenario, v, s)]["right"] else "W") if (scenario, v, s) in results
            else "?" for s in SEEDS))
    print(f"| {scenario} | " + " | ".join(row) + " |")
totals = []
for v in VARIATIONS:
    cells = [r for (s, vv, _), r in results.items() if vv == v]
    totals.append(f"{sum(c['right'] for c in cells)}/{len(cells)}")
print("| right | " + " | ".join(totals) + " |")
wrong = [r for r in results.values() if not r["right"]]
if wrong:
    print("\nwrong cells:")
    for r in sorted(wrong, key=lambda r: (r["variation"], r["scenario"], r["seed"])):
        print(f'- {r["scenario"]} × {r["variation"]} seed {r["seed"]}: got {r["got"]}, '
              f'truth {r["want"]}; kinds missing {r.get("kinds_missing", [])}; '
              f'verdict: {r["verdict"]}')
PY
