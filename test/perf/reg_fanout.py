#!/usr/bin/env python3
"""reg_fanout.py - a hub with many registrations of which a query matches a
few (issue 15, "Speed"): the forwards of one query run in parallel, so its
wall time is about one source's latency, not the sum; and finding the
matching registrations does not grow with the registrations held.

One coraine (the hub) on loopback, and one mock source (an HTTP server
answering [] after --delay seconds, test/functional/mocksource.py). The hub
holds --total registrations: --match of type Wanted at the mock source, the
others each of its own type (Other<i>) at an address nobody is asked. Then,
alternated, --runs times each:
  - GET /entities?type=Wanted: --match forwards, each --delay long;
  - GET /entities?type=Lone: one registration, the same source: one forward;
  - GET /entities?type=Nothing&local=false: no registration matches (the
    matching alone, plus the local query), timed by the hub's CPU over
    --n requests (utime + stime from /proc/PID/stat).
The same requests are made first with only the matching registrations held
(before the others are added), so the figures are side by side.

  python3 test/perf/reg_fanout.py [--bin build/release/coraine] [--total 10000] [--match 30]
                                  [--delay 0.2] [--runs 5] [--n 2000]

A benchmark: it never fails. --forwardFanout is set to --match so that all
the forwards of one query may be in flight at once (the default, 16, makes
30 forwards two rounds).
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
from perf_run import free_port  # noqa: E402
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


def measure(base, pid, runs, n):
    w, l1 = [], []
    for _ in range(runs):
        w.append(wall(base + API + "/entities?type=Wanted"))
        l1.append(wall(base + API + "/entities?type=Lone"))
    hz = os.sysconf("SC_CLK_TCK")
    url = base + API + "/entities?type=Nothing"
    c0 = cpu_ticks(pid)
    t0 = time.monotonic()
    for _ in range(n):
        req("GET", url)
    el = time.monotonic() - t0
    c1 = cpu_ticks(pid)
    return statistics.median(w), statistics.median(l1), 1e6 * (c1 - c0) / hz / n, 1e6 * el / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "release", "coraine"))
    ap.add_argument("--total", type=int, default=10000)
    ap.add_argument("--match", type=int, default=30)
    ap.add_argument("--delay", type=float, default=0.2)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--n", type=int, default=2000)
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
        small = measure(base, proc.pid, a.runs, a.n)
        t0 = time.monotonic()
        for i in range(a.total - a.match - 1):
            register(base, "Other%d" % i, "http://127.0.0.1:9")
        secs = time.monotonic() - t0
        large = measure(base, proc.pid, a.runs, a.n)
        asked = len(mock.requests)
        print("hub with %d matching registrations, then %d in all (%d added in %.1f s); source delay %.0f ms, "
              "--forwardFanout %d, %d runs each (medians)" % (a.match + 1, a.total, a.total - a.match - 1, secs,
                                                             a.delay * 1000, a.match, a.runs))
        print("  %-34s %12s %12s" % ("", "%d regs" % (a.match + 1), "%d regs" % a.total))
        print("  %-34s %10.0f ms %10.0f ms" % ("query matching %d (wall)" % a.match, small[0] * 1e3, large[0] * 1e3))
        print("  %-34s %10.0f ms %10.0f ms" % ("query matching 1 (wall)", small[1] * 1e3, large[1] * 1e3))
        print("  %-34s %10.0f us %10.0f us" % ("query matching 0: hub CPU", small[2], large[2]))
        print("  %-34s %10.0f us %10.0f us" % ("query matching 0: wall", small[3], large[3]))
        print("  %d-forward query / 1-forward query, wall: %.2fx (%d regs)" % (a.match, large[0] / large[1], a.total))
        print("  source asked %d times" % asked)
        print("  load average before %.2f %.2f %.2f, after %.2f %.2f %.2f" % (load0 + os.getloadavg()))
    finally:
        proc.terminate()
        proc.wait(20)
        mock.close()


if __name__ == "__main__":
    main()
