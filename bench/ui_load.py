#!/usr/bin/env python3
"""Page-load times of the `infersight serve` web UI in headless Chromium (bench/ui.sh).

Standard library only: speaks WebDriver (HTTP/JSON) to chromedriver. For every page it loads
`/?page=…&range=…` RUNS times (from about:blank, a full navigation each time) and measures,
in the page's own clock (performance.now(), whose origin is the navigation start):

  ready   — "loaded": the moment the shell sets `#view[data-state=ready]` for that page
            (app.js does so after the page's render() resolved — every fetch it awaits has
            answered and its tables / SVG charts are built — and the content was swapped into
            the document). Recorded by a MutationObserver injected before any page script
            (CDP Page.addScriptToEvaluateOnNewDocument), so the poll interval does not count.
  painted — the first animation frame after `ready` (the data is on screen).
  boot    — when the page's first API fetch started (HTML + CSS + ES modules loaded).
  api     — the in-browser span of the page's API calls: first fetch start to last responseEnd
            (Resource Timing).
  raw     — the same API calls (captured URL, method and body) replayed outside the browser
            with urllib, with the page's concurrency (calls the page awaits together are sent
            together), median of RUNS: what the page cannot be faster than.

The incident page (with --incident-window) is reached after POST /api/v1/rca over the ground
truth's incident window; for it `frame` is when the embedded server-rendered report finished
loading. A page counts only if it reaches `ready` (an `error` state aborts with its message).
"""

import argparse
import concurrent.futures
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")

# Installed before any script of a new document (top frame only): timestamps of the shell's
# ready marker, the next frame after it, the report frame's load, and the API calls' bodies.
INSTRUMENT = r"""
(() => {
  if (window.top !== window) return;
  const m = (window.__bench = { ready: null, painted: null, frame: null, state: null, calls: [] });
  const fetch0 = window.fetch;
  window.fetch = function (input, init) {
    m.calls.push({ url: String(input), method: (init && init.method) || 'GET',
                   body: (init && init.body) || null, start: performance.now() });
    return fetch0.apply(this, arguments);
  };
  new MutationObserver(() => {
    const view = document.getElementById('view');
    if (view && m.ready == null && view.dataset.state && view.dataset.state !== 'loading') {
      m.ready = performance.now();
      m.state = view.dataset.state;
      m.page = view.dataset.page;
      requestAnimationFrame(() => { m.painted = performance.now(); });
    }
    const frame = document.querySelector('iframe.report');
    if (frame && m.frame == null && frame.dataset.loaded === 'true') m.frame = performance.now();
  }).observe(document, { subtree: true, childList: true, attributes: true,
                          attributeFilter: ['data-state', 'data-loaded'] });
})();
"""

# Waits (async script) until the page is ready (and, if asked, its report frame loaded and the
# first frame after ready painted); answers the measurements.
COLLECT = r"""
const [page, wantFrame, done] = [arguments[0], arguments[1], arguments[arguments.length - 1]];
const t0 = Date.now();
(function poll() {
  const m = window.__bench;
  const finished = m && m.ready != null && m.painted != null && (!wantFrame || m.frame != null || m.state !== 'ready');
  if (!finished && Date.now() - t0 < 110000) { setTimeout(poll, 20); return; }
  if (!m) { done({ error: 'instrumentation missing' }); return; }
  const view = document.getElementById('view');
  const fetches = performance.getEntriesByType('resource').filter((e) => e.initiatorType === 'fetch')
    .map((e) => ({ url: e.name, start: e.startTime, responseStart: e.responseStart, end: e.responseEnd, bytes: e.encodedBodySize }));
  const nav = performance.getEntriesByType('navigation')[0] || {};
  done({ ready: m.ready, painted: m.painted, frame: m.frame, state: m.state, page: m.page,
         message: m.state === 'error' && view ? view.innerText.slice(0, 500) : null,
         calls: m.calls, fetches, domContentLoaded: nav.domContentLoadedEventEnd, load: nav.loadEventEnd,
         rows: document.querySelectorAll('#view tr').length, charts: document.querySelectorAll('#view svg[data-chart]').length });
})();
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None, timeout=180):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("content-type", "application/json")
    req.add_header("accept", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class Driver:
    def __init__(self):
        self.port = free_port()
        self.proc = subprocess.Popen([CHROMEDRIVER, f"--port={self.port}"], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.base = f"http://127.0.0.1:{self.port}"
        self.session = None
        self.profile = tempfile.mkdtemp(prefix="infersight-ui-bench-")
        deadline = time.time() + 30
        while True:
            try:
                if json.loads(http("GET", self.base + "/status", timeout=2)[1])["value"]["ready"]:
                    break
            except (OSError, ValueError, KeyError):
                pass
            if time.time() > deadline:
                raise SystemExit("chromedriver did not become ready")
            time.sleep(0.1)

    def call(self, method, path, body=None):
        status, raw = http(method, self.base + path, body if body is not None or method == "GET" else {})
        value = json.loads(raw)["value"]
        if status >= 300:
            raise RuntimeError(f"{method} {path}: {status}: {value}")
        return value

    def open(self):
        args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                f"--user-data-dir={self.profile}", "--window-size=1280,800", "--hide-scrollbars"]
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
            "goog:loggingPrefs": {"browser": "ALL"},
            "timeouts": {"script": 120000, "pageLoad": 120000},
        }}}
        self.session = self.call("POST", "/session", caps)["sessionId"]
        self.cdp("Page.enable", {})
        self.cdp("Page.addScriptToEvaluateOnNewDocument", {"source": INSTRUMENT})

    def s(self, rest):
        return f"/session/{self.session}{rest}"

    def cdp(self, cmd, params):
        return self.call("POST", self.s("/goog/cdp/execute"), {"cmd": cmd, "params": params})

    def navigate(self, url):
        self.call("POST", self.s("/url"), {"url": url})

    def execute_async(self, script, args):
        return self.call("POST", self.s("/execute/async"), {"script": script, "args": args})

    def console_errors(self):
        logs = self.call("POST", self.s("/se/log"), {"type": "browser"})
        return [l for l in logs if l.get("level") in ("SEVERE", "WARNING")]

    def close(self):
        try:
            if self.session:
                self.call("DELETE", self.s(""))
        except Exception:  # noqa: BLE001 — best effort on the way out
            pass
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(ms):
    return "–" if ms is None else f"{ms:.0f}"


def groups(calls):
    """Calls the page issued together (starts within 5 ms of the group's first): replayed in parallel."""
    out = []
    for c in sorted(calls, key=lambda c: c["start"]):
        if out and c["start"] - out[-1][0]["start"] < 5:
            out[-1].append(c)
        else:
            out.append([c])
    return out


def replay(base, calls, runs):
    """Median wall time of the page's calls replayed with urllib (each group concurrently, groups
    one after the other), and each call's median time."""
    walls, per_call = [], {i: [] for i in range(len(calls))}
    index = {id(c): i for i, c in enumerate(calls)}
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=6)  # Chromium: 6 connections per host

    def one(c):
        body = c["body"].encode() if isinstance(c["body"], str) else None
        t = time.perf_counter()
        status, raw = http(c["method"], base + c["url"] if c["url"].startswith("/") else c["url"], body)
        if status >= 300:
            raise RuntimeError(f"replay {c['method']} {c['url']}: {status} {raw[:300]!r}")
        return (time.perf_counter() - t) * 1000

    for _ in range(runs):
        t = time.perf_counter()
        for group in groups(calls):
            for c, ms in zip(group, pool.map(one, group)):
                per_call[index[id(c)]].append(ms)
        walls.append((time.perf_counter() - t) * 1000)
    pool.shutdown()
    return med(walls), [med(per_call[i]) for i in range(len(calls))]


def label(call):
    """A short name of an API call: the path, plus the first words of a SQL body."""
    url = call["url"].split("://", 1)[-1]
    url = url[url.find("/"):] if "://" in call["url"] else url
    path = url.split("?", 1)[0]
    if call.get("body"):
        try:
            sql = " ".join(json.loads(call["body"]).get("sql", "").split())
            # the table(s) and GROUP BY / ORDER BY are what tell the queries apart
            frm = sql.upper().find(" FROM ")
            tail = sql[frm + 1:frm + 1 + 60] if frm >= 0 else ""
            return f"POST {path} [{sql[:60]}… {tail}…]"
        except ValueError:
            pass
    q = url.split("?", 1)[1] if "?" in url else ""
    sli = [p for p in q.split("&") if p.startswith("sli=")]
    return f"{call['method']} {path}{'?' + sli[0] if sli else ''}"


def page_path(base, label, range_):
    """The URL of a measured page. `breakdown2` is the breakdown by two dimensions, `logs_search`
    the logs page searching a word of the engines' stats lines, sorted by growth; `request` the
    detail page of the slowest request of the range that has token events (else the slowest)."""
    if label == "heatmap":
        return f"/?page=heatmap&range={range_}&sli=ttft"
    if label == "breakdown2":
        return f"/?page=breakdown&range={range_}&by=model_version&by2=worker"
    if label == "logs_search":
        return f"/?page=logs&range={range_}&q=throughput&sort=growth"
    if label == "request":
        since = {"15m": "-15m", "1h": "-1h", "6h": "-6h", "24h": "-24h", "7d": "-7d"}.get(range_, "-1h")
        for extra in ("AND request_id IN (SELECT request_id FROM tokens)", ""):
            sql = ("SELECT request_id, CAST(ts AS BIGINT) / 1000000 AS t FROM requests "
                   f"WHERE ts >= now() - INTERVAL '{since[1:-1]} {dict(m='minutes', h='hours', d='days')[since[-1]]}' "
                   f"{extra} ORDER BY ttft_ms DESC NULLS LAST LIMIT 1")
            status, raw = http("POST", base + "/api/v1/query", {"sql": sql})
            rows = json.loads(raw).get("rows", []) if status < 300 else []
            if rows:
                return f"/?page=request&range={range_}&request={rows[0]['request_id']}&at={rows[0]['t']}"
        raise SystemExit(f"no request in the range for the request page: {raw[:300]!r}")
    return f"/?page={label}&range={range_}"


def main():
    # SIGTERM (bench/ui.sh's trap) unwinds through `finally`, which closes Chromium and chromedriver
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="http://127.0.0.1:PORT of infersight serve")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--range", default="1h")
    ap.add_argument("--pages", default="overview,heatmap,breakdown,breakdown2,dimensions,requests,request,logs,logs_search,incidents")
    ap.add_argument("--incident-window", help="ground_truth.json: run RCA on its incident window and time the incident page")
    ap.add_argument("--out", help="write the raw measurements (JSON) here")
    opts = ap.parse_args()

    pages = [(p, page_path(opts.base, p, opts.range)) for p in opts.pages.split(",") if p]
    rca_ms = None
    if opts.incident_window:
        truth = json.load(open(opts.incident_window))
        window = truth["incident_window"]
        t = time.perf_counter()
        status, raw = http("POST", opts.base + "/api/v1/rca", {"since": window["start"], "until": window["end"]}, timeout=600)
        rca_ms = (time.perf_counter() - t) * 1000
        if status >= 300:
            raise SystemExit(f"POST /api/v1/rca: {status} {raw[:300]!r}")
        incident = json.loads(raw).get("incident_id")
        if not incident:
            raise SystemExit("POST /api/v1/rca stored no incident")
        pages.append(("incident", f"/?page=incident&id={incident}&range={opts.range}"))

    driver = Driver()
    results = {"range": opts.range, "runs": opts.runs, "rca_post_ms": rca_ms, "pages": {}}
    try:
        driver.open()
        # warm the browser process itself (first navigation starts renderer and network service)
        driver.navigate("about:blank")
        for page, path in pages:
            runs = []
            for _ in range(opts.runs):
                driver.navigate("about:blank")
                driver.navigate(opts.base + path)
                m = driver.execute_async(COLLECT, [page, page == "incident"])
                if m.get("error"):
                    raise SystemExit(f"{page}: {m['error']}")
                if m["state"] != "ready" or m["page"] != path.split("page=")[1].split("&")[0]:
                    raise SystemExit(f"{page}: state {m['state']} (page {m['page']}): {m.get('message')}")
                f = m["fetches"]
                m["boot"] = min((e["start"] for e in f), default=None)
                m["api_span"] = (max(e["end"] for e in f) - m["boot"]) if f else 0.0
                runs.append(m)
            errors = driver.console_errors()
            calls = runs[-1]["calls"]
            raw_wall, raw_calls = replay(opts.base, calls, opts.runs)
            # in-browser time of each call (the i-th fetch of a URL is the i-th call of it)
            browser_calls = []
            for i, c in enumerate(calls):
                times = []
                for m in runs:
                    same = [e for e in m["fetches"] if e["url"].endswith(c["url"]) or e["url"] == c["url"]]
                    nth = sum(1 for d in calls[:i] if d["url"] == c["url"])
                    if nth < len(same):
                        times.append(same[nth]["end"] - same[nth]["start"])
                browser_calls.append(med(times))
            results["pages"][page] = {
                "path": path,
                "ready": [m["ready"] for m in runs], "painted": [m["painted"] for m in runs],
                "frame": [m["frame"] for m in runs], "boot": [m["boot"] for m in runs],
                "api_span": [m["api_span"] for m in runs], "rows": runs[-1]["rows"], "charts": runs[-1]["charts"],
                "raw_api_wall_ms": raw_wall,
                "calls": [{"call": label(c), "url": c["url"], "body": c["body"], "browser_ms": b, "raw_ms": r}
                          for c, b, r in zip(calls, browser_calls, raw_calls)],
                "console_errors": errors,
            }
            p = results["pages"][page]
            print(f"{page:10s} ready median {fmt(med(p['ready']))} ms, max {fmt(max(p['ready']))} ms; "
                  f"raw API {fmt(raw_wall)} ms", file=sys.stderr)
    finally:
        driver.close()

    if opts.out:
        with open(opts.out, "w") as fh:
            json.dump(results, fh, indent=1)

    print(f"Pages (range={opts.range}, {opts.runs} loads each; ms from navigation start)\n")
    print("| page | ready median | ready max | painted median | boot (1st fetch) median | API calls | in-browser API span median | raw API replay median | UI overhead (ready − raw API) | < 1 s |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|:-:|")
    for page, p in results["pages"].items():
        ready = med(p["ready"])
        ratio = f"{fmt(ready - p['raw_api_wall_ms'])} ({ready / p['raw_api_wall_ms']:.1f}×)" if p["raw_api_wall_ms"] else "–"
        verdict = "yes" if max(p["ready"]) < 1000 else ("median only" if ready < 1000 else "**no**")
        print(f"| {page} | {fmt(ready)} | {fmt(max(p['ready']))} | {fmt(med(p['painted']))} | {fmt(med(p['boot']))} | "
              f"{len(p['calls'])} | {fmt(med(p['api_span']))} | {fmt(p['raw_api_wall_ms'])} | {ratio} | {verdict} |")
    if "incident" in results["pages"]:
        p = results["pages"]["incident"]
        print(f"\nincident: embedded report frame loaded at median {fmt(med(p['frame']))} ms, max {fmt(max(x for x in p['frame'] if x is not None) if any(p['frame']) else None)} ms; "
              f"POST /api/v1/rca (before it, once): {fmt(rca_ms)} ms")
    print("\nAPI calls behind each page (median ms: in the browser / replayed outside it, concurrently with the calls the page sends together)\n")
    print("| page | call | in browser | replayed |")
    print("|---|---|--:|--:|")
    for page, p in results["pages"].items():
        for c in p["calls"]:
            print(f"| {page} | `{c['call']}` | {fmt(c['browser_ms'])} | {fmt(c['raw_ms'])} |")
    bad = {page: p["console_errors"] for page, p in results["pages"].items() if p["console_errors"]}
    if bad:
        print(f"\nconsole errors/warnings: {json.dumps(bad)[:2000]}")


if __name__ == "__main__":
    main()
