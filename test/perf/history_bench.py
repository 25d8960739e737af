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
  snapshot  what a history snapshot costs the writers (--dbDir): SNAP_INSTANCES
            instances in SNAP_SERIES series (POST .../attrs), then PATCH load
            (CONNS connections on ENTITIES Vehicles) for DURATION s, once
            quiet and once with POST /admin/snapshot every second: wrk's p99
            and max latency of both, and the broker's snapshot log lines
            (marked / copied / the longest a lock was held / written); per
            binary (--bin, --base-bin: side by side, alternated RUNS times)

  python3 test/perf/history_bench.py [--runs 3] [--duration 5] [--entities 10000]
                                     [--instances 100000] [--shapes ingest,lastN,hourly,memory]
  python3 test/perf/history_bench.py --shapes snapshot --snap-instances 1000000 --snap-series 10
                                     [--base-bin /tmp/coraine_base] [--runs 3] [--duration 6]
A benchmark: it never fails CI; it prints figures (doc/performance.md).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import re
import tempfile
import threading
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


def wrk_lat(url, duration, conns, script, args):
    """wrk with --latency: (requests/s, non-2xx, p99 us, max us)."""
    out = subprocess.run(["wrk", "-t2", "-c%d" % conns, "-d%ds" % duration, "--latency", "-s", script, url,
                          "--"] + list(args), capture_output=True, text=True, check=True).stdout

    def us(v, u):
        return float(v) * {"us": 1, "ms": 1000, "s": 1000000}[u]
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)\b", out)
    mx = re.search(r"Latency\s+\S+\s+\S+\s+([\d.]+)(us|ms|s)\b", out)
    return (rps, int(bad.group(1)) if bad else 0, us(*p99.groups()) if p99 else 0,
            us(*mx.groups()) if mx else 0)


def snapshot_run(a, binary):
    """One broker of `binary` on a fresh --dbDir: fill, then quiet and snapshotted PATCH windows."""
    port = perf_run.free_port()
    base = "http://127.0.0.1:%d" % port
    logf = tempfile.NamedTemporaryFile(prefix="coraine-hsnap-", suffix=".log", delete=False)
    p = subprocess.Popen([binary, "-fg", "--port", str(port), "--bind", "127.0.0.1", "--logLevel", "info",
                          "--history", a.snap_history, "--dbDir", tempfile.mkdtemp(prefix="coraine-hsnap-"),
                          "--dbSnapshotSize", "0"], stdout=subprocess.DEVNULL, stderr=logf)
    try:
        perf_run.wait_up(base + "/version")
        perf_run.load(base, a.entities)
        per = a.snap_instances // a.snap_series
        for k in range(a.snap_series if a.snap_history == "corDB" else 0):     # the history: the first SNAP_SERIES Vehicles' speed
            eid = "urn:ngsi-ld:Vehicle:%d" % k
            for start in range(0, per, 2000):
                post(base + "/ngsi-ld/v1/temporal/entities/%s/attrs" % eid,
                     {"speed": [{"type": "Property", "value": (i % 97) * 1.5, "observedAt": iso(i)}
                                for i in range(start, min(per, start + 2000))]})
        post(base + "/admin/snapshot", {})   # the log compacted: each window starts alike
        for _ in range(600):                 # (the snapshot thread writes it; the answer does not wait)
            with open(logf.name) as f:
                if "history: snapshot of" in f.read():
                    break
            time.sleep(0.1)
        out = {}
        for phase in ("quiet", "snapshot"):
            stop = []
            def snapper():
                time.sleep(1)
                while not stop:
                    post(base + "/admin/snapshot", {})
                    time.sleep(1)
            th = threading.Thread(target=snapper) if phase == "snapshot" else None
            if th:
                th.start()
            out[phase] = wrk_lat(base + "/", a.duration, a.conns, PATCH_LUA, [str(a.entities)])
            stop.append(1)
            if th:
                th.join()
        st = stats(base).get("history", {})
    finally:
        p.terminate()
        p.wait()
    with open(logf.name) as f:
        lines = [ln.strip() for ln in f if "history: snapshot of" in ln]
    os.unlink(logf.name)
    return out, lines, st


def snapshot_shape(a):
    bins = [("this", perf_run.BIN)] + ([("base", a.base_bin)] if a.base_bin else [])
    res = {k: [] for k, _ in bins}
    for _ in range(a.runs):
        for name, binary in bins:
            res[name].append(snapshot_run(a, binary))
    print("snapshot  %d instances in %d series, PATCH on %d Vehicles, %d connections, %d s windows, %d runs" %
          (a.snap_instances, a.snap_series, a.entities, a.conns, a.duration, a.runs))
    for name, binary in bins:
        runs = res[name]
        for phase in ("quiet", "snapshot"):
            rps = statistics.median(r[0][phase][0] for r in runs)
            p99 = statistics.median(r[0][phase][2] for r in runs)
            mx = statistics.median(r[0][phase][3] for r in runs)
            bad = sum(r[0][phase][1] for r in runs)
            print("  %-5s %-8s %8.0f PATCH/s  p99 %8.0f us  max %8.0f us  (medians; non-2xx %d)  %s" %
                  (name, phase, rps, p99, mx, bad, binary))
        print("  %-5s history after: %s instances; its snapshot log lines (last run):" %
              (name, runs[-1][2].get("instances")))
        for ln in runs[-1][1][-3:]:
            print("        " + ln[ln.find("history: snapshot"):])


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
    ap.add_argument("--snap-instances", type=int, default=1000000)
    ap.add_argument("--snap-series", type=int, default=10)
    ap.add_argument("--snap-history", choices=["corDB", "none"], default="corDB",
                    help="snapshot: none measures what the store's own snapshot costs the same load")
    ap.add_argument("--base-bin", default=None, help="snapshot: a second binary, measured side by side")
    ap.add_argument("--bin", default=None, help="the broker binary (build/release/coraine)")
    ap.add_argument("--dbsync", choices=["always", "interval", "none"], default=None,
                    help="ingest: both brokers on a --dbDir with this --dbSync")
    a = ap.parse_args()
    shapes = a.shapes.split(",")
    if a.bin:
        perf_run.BIN = a.bin
    if "snapshot" in shapes:
        snapshot_shape(a)
    if "ingest" in shapes:
        ingest(a)
    if set(shapes) & {"lastN", "hourly", "memory"}:
        reads(a, shapes)


if __name__ == "__main__":
    main()
