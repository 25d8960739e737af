#!/usr/bin/env python3
"""history_bench.py - what attribute history costs and how fast its reads are.

  ingest    PATCH /entities/{one of N}/attrs (a speed with observedAt) on two
            brokers side by side, --history none and --history corDB,
            alternated RUNS times: median requests/s of each and the ratio
  lastN     GET /temporal/entities/{id}?attrs=speed&lastN=100 on one attribute
            holding INSTANCES instances (1 s apart): requests/s, p50, p99
  hourly    GET ...?format=aggregatedValues&aggrMethods=avg&aggrPeriodDuration=PT1H
            over a day of 1-second instances (86,400): p50, p99
  memory    bytes per numeric instance with observedAt (/statistics history.bytes
            / instances, and the broker's RSS growth per instance)

  python3 test/perf/history_bench.py [--runs 3] [--duration 5] [--entities 10000]
                                     [--instances 100000] [--shapes ingest,lastN,hourly,memory]
A benchmark: it never fails CI; it prints figures (doc/performance.md).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import perf_run  # noqa: E402  (free_port, wait_up, load, start_broker, wrk)

PATCH_LUA = os.path.join(HERE, "patch_obs.lua")
DAY = 86400
EPOCH = 1577836800          # 2020-01-01T00:00:00Z


def iso(s):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(EPOCH + s))


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.status


def broker(flags):
    port = perf_run.free_port()
    p = perf_run.start_broker(port, flags)
    base = "http://127.0.0.1:%d" % port
    perf_run.wait_up(base + "/version")
    return p, base


def stats(base):
    with urllib.request.urlopen(base + "/statistics", timeout=30) as r:
        return json.loads(r.read())


def fill(base, eid, n, step=1):
    """n instances of speed on eid, `step` seconds apart, through the temporal API."""
    post(base + "/ngsi-ld/v1/temporal/entities",
         {"id": eid, "type": "Sensor", "speed": {"type": "Property", "value": 0, "observedAt": iso(0)}})
    chunk = 2000
    for start in range(1, n, chunk):
        inst = [{"type": "Property", "value": (i % 97) * 1.5, "observedAt": iso(i * step)}
                for i in range(start, min(n, start + chunk))]
        post(base + "/ngsi-ld/v1/temporal/entities/%s/attrs" % eid, {"speed": inst})


def ingest(a):
    disk = []
    if a.dbsync:                         # both on --dbDir with that --dbSync (history as durable as the store)
        disk = lambda: ["--dbDir", tempfile.mkdtemp(prefix="coraine-hbench-"), "--dbSync", a.dbsync]
    brokers = {name: broker(flags + (disk() if disk else [])) for name, flags in
               (("none", ["--history", "none"]), ("corDB", ["--history", "corDB"]))}
    try:
        for _, base in brokers.values():
            perf_run.load(base, a.entities)
        rates = {k: [] for k in brokers}
        p99 = {k: [] for k in brokers}
        for _ in range(a.runs):
            for name, (_, base) in brokers.items():
                rps, bad, lat = perf_run.wrk(base + "/", a.duration, a.conns, 1, PATCH_LUA, [str(a.entities)])
                assert not bad, "%s: non-2xx answers" % name
                rates[name].append(rps)
                p99[name].append(lat or 0)
        none, cor = statistics.median(rates["none"]), statistics.median(rates["corDB"])
        print("ingest  PATCH with observedAt, %d entities, %d connections, %d runs x %d s%s" %
              (a.entities, a.conns, a.runs, a.duration, ", --dbSync " + a.dbsync if a.dbsync else ""))
        print("        --history none : %9.0f req/s  (p99 %.0f us)" % (none, statistics.median(p99["none"])))
        print("        --history corDB: %9.0f req/s  (p99 %.0f us)   ratio %.2f" %
              (cor, statistics.median(p99["corDB"]), cor / none))
        st = stats(brokers["corDB"][1]).get("history", {})
        print("        corDB history after the runs: %s instances, %s bytes" % (st.get("instances"), st.get("bytes")))
    finally:
        for p, _ in brokers.values():
            p.terminate()
            p.wait()


def reads(a, shapes):
    p, base = broker(["--history", "corDB"])
    try:
        rss0 = perf_run.rss_kib(p.pid)
        if "lastN" in shapes or "memory" in shapes:
            t0 = time.time()
            fill(base, "urn:ngsi-ld:Sensor:n", a.instances)
            load_s = time.time() - t0
            rss1 = perf_run.rss_kib(p.pid)
            st = stats(base)["history"]
            if "memory" in shapes:
                print("memory  %d numeric instances with observedAt: history.bytes/instance %.1f, "
                      "RSS growth/instance %.1f bytes (loaded in %.1f s, %.0f instances/s through the temporal API)" %
                      (st["instances"], st["bytes"] / st["instances"], (rss1 - rss0) * 1024.0 / a.instances,
                       load_s, a.instances / load_s))
        if "lastN" in shapes:
            url = base + "/ngsi-ld/v1/temporal/entities/urn:ngsi-ld:Sensor:n?attrs=speed&lastN=100"
            for conns in (1, a.conns):
                rps, bad, lat = perf_run.wrk(url, a.duration, conns, 1)
                out = subprocess.run(["wrk", "-t1", "-c%d" % conns, "-d%ds" % a.duration, "--latency", url],
                                     capture_output=True, text=True).stdout
                p50 = [ln.split()[1] for ln in out.splitlines() if ln.strip().startswith("50%")]
                print("lastN   lastN=100 of %d instances, %d connection(s): %8.0f req/s, p50 %s, p99 %.0f us" %
                      (a.instances, conns, rps, p50[0] if p50 else "?", lat or 0))
        if "hourly" in shapes:
            fill(base, "urn:ngsi-ld:Sensor:d", DAY)
            url = (base + "/ngsi-ld/v1/temporal/entities/urn:ngsi-ld:Sensor:d?attrs=speed&format=aggregatedValues"
                   "&aggrMethods=avg&aggrPeriodDuration=PT1H&timerel=between&timeAt=%s&endTimeAt=%s" %
                   (iso(0), iso(DAY)))
            rps, bad, lat = perf_run.wrk(url, a.duration, 1, 1)
            out = subprocess.run(["wrk", "-t1", "-c1", "-d%ds" % a.duration, "--latency", url],
                                 capture_output=True, text=True).stdout
            p50 = [ln.split()[1] for ln in out.splitlines() if ln.strip().startswith("50%")]
            print("hourly  avg per hour over a day of 1-s instances (86,400), 1 connection: %.1f req/s, p50 %s, "
                  "p99 %.0f us" % (rps, p50[0] if p50 else "?", lat or 0))
    finally:
        p.terminate()
        p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--entities", type=int, default=10000)
    ap.add_argument("--instances", type=int, default=100000)
    ap.add_argument("--conns", type=int, default=8)
    ap.add_argument("--shapes", default="ingest,lastN,hourly,memory")
    ap.add_argument("--dbsync", choices=["always", "interval", "none"], default=None,
                    help="ingest: both brokers on a --dbDir with this --dbSync")
    a = ap.parse_args()
    shapes = a.shapes.split(",")
    if "ingest" in shapes:
        ingest(a)
    if set(shapes) & {"lastN", "hourly", "memory"}:
        reads(a, shapes)


if __name__ == "__main__":
    main()
