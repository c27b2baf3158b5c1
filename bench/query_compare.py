"""Runs the same p99-per-model queries in infersight (CLI, DataFusion) and DuckDB over the same
Parquet segments; five runs each, median wall time. infersight is timed as a whole command
(process start, catalog load, plan, scan); DuckDB in-process (no start-up cost) — this favours
DuckDB, so a ratio below the target is conservative."""
import glob
import statistics
import subprocess
import sys
import time

import duckdb

binary, data = sys.argv[1], sys.argv[2]
files = sorted(glob.glob(f"{data}/segments/requests/*/*.parquet"))
print(f"{len(files)} parquet segments")

QUERIES = {
    "approx p99": (
        "SELECT model, approx_percentile_cont(e2e_ms, 0.99) AS p99 FROM requests GROUP BY model ORDER BY model",
        "SELECT model, approx_quantile(e2e_ms, 0.99) AS p99 FROM t GROUP BY model ORDER BY model",
    ),
    "exact p99": (
        "SELECT model, percentile_cont(0.99) WITHIN GROUP (ORDER BY e2e_ms) AS p99 FROM requests GROUP BY model ORDER BY model",
        "SELECT model, quantile_cont(e2e_ms, 0.99) AS p99 FROM t GROUP BY model ORDER BY model",
    ),
    "count+avg": (
        "SELECT model, count(*) AS n, avg(e2e_ms) AS mean FROM requests GROUP BY model ORDER BY model",
        "SELECT model, count(*) AS n, avg(e2e_ms) AS mean FROM t GROUP BY model ORDER BY model",
    ),
    "sum+count per worker": (
        "SELECT worker, count(*) AS n, sum(output_tokens) AS tokens FROM requests GROUP BY worker ORDER BY worker",
        "SELECT worker, count(*) AS n, sum(output_tokens) AS tokens FROM t GROUP BY worker ORDER BY worker",
    ),
    # DuckDB reads `ts` as TIMESTAMPTZ_NS; time_bucket is its fastest bucketing of it that keeps
    # a timestamp (date_trunc is slower; an integer bucket of epoch_ns is in bench/README.md)
    "per-minute count+avg": (
        "SELECT date_bin(INTERVAL '1 minute', ts) AS minute, count(*) AS n, avg(e2e_ms) AS mean FROM requests GROUP BY 1 ORDER BY 1",
        "SELECT time_bucket(INTERVAL '1 minute', ts) AS minute, count(*) AS n, avg(e2e_ms) AS mean FROM t GROUP BY 1 ORDER BY 1",
    ),
}

con = duckdb.connect()
file_list = "[" + ",".join(f"'{f}'" for f in files) + "]"
con.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet({file_list})")


def timed(fn, runs=5):
    times = []
    out = None
    for _ in range(runs):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


for name, (ours, theirs) in QUERIES.items():
    def run_ours():
        r = subprocess.run([binary, "query", "--data", data, "--format", "csv", ours], capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"infersight failed: {r.stderr}")
        return r.stdout.strip()

    t_ours, out_ours = timed(run_ours)
    t_duck, out_duck = timed(lambda: con.execute(theirs).fetchall())
    print(f"{name}: infersight {t_ours * 1000:.0f} ms, duckdb {duckdb.__version__} {t_duck * 1000:.0f} ms, ratio {t_ours / t_duck:.2f}x")
    rows_ours = out_ours.splitlines()[1:]
    if len(rows_ours) != len(out_duck):
        raise SystemExit(f"{name}: infersight answered {len(rows_ours)} rows, duckdb {len(out_duck)}")
    # the first value column of each row, to the displayed precision
    ours = [round(float(row.split(",")[1]), 1) for row in rows_ours]
    theirs = [round(float(row[1]), 1) for row in out_duck]
    # estimates (t-digest here, DuckDB's own sketch there) agree to 1 %, exact answers to 0.1
    relative = 1e-2 if name.startswith("approx") else 1e-6
    agree = sum(abs(a - b) <= max(0.1, relative * abs(b)) for a, b in zip(ours, theirs))
    print(f"  {len(rows_ours)} rows, first value column agrees on {agree}")
    if len(rows_ours) <= 20:
        print("  infersight:", " | ".join(rows_ours))
        print("  duckdb:    ", " | ".join(",".join(str(v) for v in row) for row in out_duck))
