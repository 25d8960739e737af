#!/usr/bin/env python3
"""reg_fanout.py - a hub with many registrations of which a query matches a
few (issue 15, "Speed"): the forwards of one query run in parallel, so its
wall time is about one source's latency, not the sum; and finding the
matching registrations does not grow with the registrations held.

One coraine (the hub) on loopback, and one mock source (an HTTP server
answering [] after --delay seconds, test/functional/mocksource.py). The hub
holds --total registrations: --match of type Wanted at the mock source, one
of type Lone at the same source, the others each of its own type (Other<i>)
at an address nobody is asked. Then, alternated, --runs times each:
  - GET /entities?type=Wanted: --match forwards, each --delay long (wall);
  - GET /entities?type=Lone: one registration, the same source: one forward
    (wall);
  - GET /entities?type=Nothing: no registration matches (the matching
    alone, plus the local query): --n sequential requests, timed by the
    hub's CPU (utime + stime from /proc/PID/stat) and the wall per request.
The same runs are made first with only the matching registrations held
(before the others are added), so the figures are side by side. One row per
(registrations held, query): the median wall time and the runs, the ratio
to the one-forward query at the same registrations, the hub's CPU per query
(the query matching none; 10 ms ticks, too coarse for a few queries) and
how many requests the source got per query (the forwards that were made).

  python3 test/perf/reg_fanout.py [--bin build/release/coraine] [--total 10000] [--match 30]
                                  [--delay 0.2] [--runs 9] [--n 2000]
                                  [--csv test/perf/results/reg_fanout.csv]

The rows go to --csv (with .meta.json: the parameters, the time taken to add
the registrations and the load average before) for report.py, and as a
markdown table to stdout. A benchmark: slow figures never fail it; a hub
that does not answer 200 does. --forwardFanout is set to --match so that
all the forwards of one query may be in flight at once (the default, 16,
makes 30 forwards two rounds).
"""
import argparse
import http.server
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "test", "functional"))
sys.path.insert(0, os.path.join(HERE, "tune"))
from perf_run import free_port  # noqa: E402
import tuneRun  # noqa: E402
from mocksource import MockSource  # noqa: E402

API = "/ngsi-ld/v1"


def req(method, url, body=None):
    h = {"Content-Type": "application/json"} if body is not None else {}
    data = json.dumps(body).encode() if body is not None else None
    r = urllib.request.Request(url, data=data, method=method, headers=h)
    with urllib.request.urlopen(r, timeout=30) as resp:
        return resp.status, resp.read()


def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def register(base, etype, endpoint):
    req("POST", base + API + "/csourceRegistrations",
        {"type": "ContextSourceRegistration", "information": [{"entities": [{"type": etype}]}],
         "endpoint": endpoint})


def wall(url):
    t0 = time.monotonic()
    req("GET", url)
    return time.monotonic() - t0


def measure(base, pid, mock, runs, n):
    """runs alternated rounds: {query: {"wall": [s per query], "cpu": [µs per query], "asked": source requests}}."""
    hz = os.sysconf("SC_CLK_TCK")
    got = {q: {"wall": [], "cpu": [], "asked": 0} for q in ("Wanted", "Lone", "Nothing")}
    for _ in range(runs):
        for q in ("Wanted", "Lone"):
            asked = len(mock.requests)
            got[q]["wall"].append(wall(base + API + "/entities?type=" + q))
            got[q]["asked"] += len(mock.requests) - asked
        url = base + API + "/entities?type=Nothing"
        asked = len(mock.requests)
        c0 = cpu_ticks(pid)
        t0 = time.monotonic()
        for _ in range(n):
            req("GET", url)
        el = time.monotonic() - t0
        c1 = cpu_ticks(pid)
        got["Nothing"]["wall"].append(el / n)
        got["Nothing"]["cpu"].append(1e6 * (c1 - c0) / hz / n)
        got["Nothing"]["asked"] += len(mock.requests) - asked
    return got


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "release", "coraine"))
    ap.add_argument("--total", type=int, default=10000)
    ap.add_argument("--match", type=int, default=30)
    ap.add_argument("--delay", type=float, default=0.2)
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--n", type=int, default=2000, help="requests per run of the query matching none")
    ap.add_argument("--csv", default=os.path.join(REPO, "test/perf/results/reg_fanout.csv"))
    a = ap.parse_args()

    http.server.ThreadingHTTPServer.request_queue_size = 256     # 30 connections at once: no SYN backlog retries
    mock = MockSource(200, b"[]", a.delay)
    port = free_port()
    base = "http://127.0.0.1:%d" % port
    proc = subprocess.Popen([a.bin, "-fg", "--port", str(port), "--bind", "127.0.0.1", "--logLevel", "error",
                             "--forwardFanout", str(a.match), "--brokerAlias", "bench-fanout"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                req("GET", base + "/version")
                break
            except OSError:
                time.sleep(0.05)
        load0 = os.getloadavg()
        for _ in range(a.match):
            register(base, "Wanted", mock.base)
        register(base, "Lone", mock.base)
        small = measure(base, proc.pid, mock, a.runs, a.n)
        t0 = time.monotonic()
        for i in range(a.total - a.match - 1):
            register(base, "Other%d" % i, "http://127.0.0.1:9")
        secs = time.monotonic() - t0
        large = measure(base, proc.pid, mock, a.runs, a.n)
    finally:
        proc.terminate()
        proc.wait(20)
        mock.close()

    what = (("Wanted", "type=Wanted (%d registrations at a source answering after %.0f ms)" % (a.match, a.delay * 1e3),
             a.match),
            ("Lone", "type=Lone (1 registration, the same source)", 1),
            ("Nothing", "type=Nothing (no registration matches)", 0))
    rows = []
    for held, got in ((a.match + 1, small), (a.total, large)):
        lone = statistics.median(got["Lone"]["wall"])
        for q, query, forwards in what:
            g = got[q]
            w = statistics.median(g["wall"])
            rows.append({"registrationsHeld": held, "query": query, "forwards": forwards,
                         "medianWallMs": "%.2f" % (w * 1e3),
                         "runs": " ".join("%.2f" % (x * 1e3) for x in g["wall"]),
                         "vsOneForward": "%.2f" % (w / lone) if forwards else "",
                         "hubCpuUsPerQuery": "%.0f" % statistics.median(g["cpu"]) if g["cpu"] else "",
                         "cpuRuns": " ".join("%.0f" % x for x in g["cpu"]),
                         "sourceAskedPerQuery": "%.2f" % (g["asked"] / (a.runs * (a.n if q == "Nothing" else 1)))})
    tuneRun.write_csv(a.csv, rows, "test/perf/reg_fanout.py", runs=a.runs, totalRegistrations=a.total,
                      matching=a.match, sourceDelaySeconds=a.delay, forwardFanout=a.match,
                      requestsPerCpuRun=a.n, secondsToAddRegistrations=round(secs, 1),
                      loadAverageBefore=[round(x, 2) for x in load0])
    print("hub with %d matching registrations, then %d in all (%d added in %.1f s); source delay %.0f ms, "
          "--forwardFanout %d, %d runs each (medians; the query matching none: %d requests per run)"
          % (a.match + 1, a.total, a.total - a.match - 1, secs, a.delay * 1000, a.match, a.runs, a.n))
    print("| " + " | ".join(rows[0]) + " |")
    print("|" + "---|" * len(rows[0]))
    for row in rows:
        print("| " + " | ".join(str(x) for x in row.values()) + " |")
    print("load average before %.2f %.2f %.2f, after %.2f %.2f %.2f" % (load0 + os.getloadavg()))


if __name__ == "__main__":
    main()
