"""Statements through a running server (`POST /api/v1/query`), the way the web UI and
`infersight query --server` send them: `serve` is started on a store once per build, and every
statement of `query_compare.py` is sent ROUNDS x RUNS times, the builds alternated per round.
Reports each statement's median latency per build (medians of the rounds, and their range).

Usage: python bench/serve_query.py DATA BIN [BIN ...]
Env: ROUNDS (5), RUNS (10). The store is served with compaction and scrubs held off
(`compaction_min_segments = 1000000`, an hourly maintenance tick), so every build reads the
same segments; nothing is written to it but the server's own files (lock, WAL, audit)."""
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

data, binaries = sys.argv[1], sys.argv[2:]
ROUNDS = int(os.environ.get("ROUNDS", "5"))
RUNS = int(os.environ.get("RUNS", "10"))
STATEMENTS = {
    "approx p99": "SELECT model, approx_percentile_cont(e2e_ms, 0.99) AS p99 FROM requests GROUP BY model ORDER BY model",
    "exact p99": "SELECT model, percentile_cont(0.99) WITHIN GROUP (ORDER BY e2e_ms) AS p99 FROM requests GROUP BY model ORDER BY model",
    "count+avg": "SELECT model, count(*) AS n, avg(e2e_ms) AS mean FROM requests GROUP BY model ORDER BY model",
    "sum+count per worker": "SELECT worker, count(*) AS n, sum(output_tokens) AS tokens FROM requests GROUP BY worker ORDER BY worker",
    "per-minute count+avg": "SELECT date_bin(INTERVAL '1 minute', ts) AS minute, count(*) AS n, avg(e2e_ms) AS mean FROM requests GROUP BY 1 ORDER BY 1",
    "count, last 10 minutes": "SELECT count(*) AS n FROM requests WHERE ts >= (SELECT max(ts) FROM requests) - INTERVAL '10 minutes'",
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(binary, config):
    ports = [free_port() for _ in range(3)]
    proc = subprocess.Popen(
        [binary, "serve", "--config", config, "--data", data, "--otlp-grpc-port", str(ports[0]),
         "--otlp-http-port", str(ports[1]), "--api-port", str(ports[2])],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", ports[2], timeout=5)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return proc, ports[2]
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"{binary} serve did not answer /healthz")


def rounded(text):
    """The CSV with every number to 9 significant digits (sums of floats in another order)."""
    def cell(value):
        try:
            return f"{float(value):.9g}"
        except ValueError:
            return value
    return [[cell(v) for v in row.split(",")] for row in text.splitlines()]


def post(port, sql):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    body = json.dumps({"sql": sql, "format": "csv"})
    start = time.perf_counter()
    conn.request("POST", "/api/v1/query", body, {"Content-Type": "application/json"})
    response = conn.getresponse()
    text = response.read().decode()
    elapsed = time.perf_counter() - start
    if response.status != 200:
        raise SystemExit(f"{sql}: HTTP {response.status}: {text[:300]}")
    return elapsed, text


with tempfile.TemporaryDirectory() as tmp:
    config = os.path.join(tmp, "serve.toml")
    with open(config, "w") as f:
        f.write('[server]\nmaintenance_interval = "1h"\n[store]\ncompaction_min_segments = 1000000\n')
    rounds = {b: {name: [] for name in STATEMENTS} for b in binaries}
    answers = {}
    for r in range(ROUNDS):
        for binary in binaries:
            proc, port = start(binary, config)
            try:
                for name, sql in STATEMENTS.items():
                    post(port, sql)  # the first statement after start pays for the footers
                    times = []
                    for _ in range(RUNS):
                        elapsed, text = post(port, sql)
                        times.append(elapsed)
                        # (approximate percentiles depend on the order partial sketches merge in)
                        if "approx" not in name and answers.setdefault(name, rounded(text)) != rounded(text):
                            raise SystemExit(f"{name}: {binary} answered otherwise")
                    rounds[binary][name].append(statistics.median(times))
            finally:
                proc.terminate()
                proc.wait()
    for name in STATEMENTS:
        cells = []
        for binary in binaries:
            xs = rounds[binary][name]
            cells.append(f"{os.path.basename(binary)} {statistics.median(xs) * 1000:.1f} ms "
                         f"({min(xs) * 1000:.1f}-{max(xs) * 1000:.1f})")
        print(f"{name}: " + " | ".join(cells))
