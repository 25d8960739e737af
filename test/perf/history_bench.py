#!/usr/bin/env python3
"""history_bench.py - what attribute history costs and how fast its reads are.

  ingest    PATCH /entities/{id}/attrs of one of ENTITIES Vehicles (a speed
            with observedAt: patch_obs.lua, CONNS connections) on two brokers
            side by side, --history none and --history corDB, alternated RUNS
            times, for each store of --dbsync (ram: no --dbDir; always,
            interval, none: both on a fresh --dbDir with that --dbSync):
            median requests/s of each, the ratio to --history none, median
            p99, and corDB's history after the runs (instances, bytes)
  lastN     GET /temporal/entities/{id}?attrs=speed&lastN=100 on one attribute
            holding INSTANCES instances (1 s apart), 1 and CONNS connections:
            requests/s, p50, p99 (medians of RUNS)
  hourly    GET ...?format=aggregatedValues&aggrMethods=avg&aggrPeriodDuration=PT1H
            over a day of 1-second instances (86,400), 1 connection: the same
  memory    bytes per numeric instance with observedAt (/statistics history.bytes
            / instances, and the broker's RSS growth per instance) after the
            INSTANCES of lastN, and how fast they went in through the temporal
            API (POST .../attrs, 2,000 per request)
  snapshot  what a history snapshot costs the writers (--dbDir): SNAP_INSTANCES
            instances in S series (the speed of the first S Vehicles, so S <=
            ENTITIES; POST .../attrs; each S of --snap-series in turn),
            then PATCH load (CONNS connections on ENTITIES Vehicles) for
            DURATION s, once quiet and once with POST /admin/snapshot every
            second: wrk's p99 and max latency of both, and from the broker's
            snapshot log lines the longest copy, the longest a lock was held,
            the longest a writer waited and the log's tail; per binary (--bin,
            --base-bin: side by side, alternated RUNS times)

  python3 test/perf/history_bench.py [--runs 3] [--duration 4] [--entities 10000] [--conns 8]
          [--instances 100000] [--dbsync ram,always,interval] [--snap-series 10,10000]
          [--snap-instances 1000000] [--base-bin /tmp/coraine_base]
          [--shapes ingest,lastN,hourly,memory,snapshot] [--csv-dir test/perf/results]

The rows go to --csv-dir (each CSV with its .meta.json, tuneRun.write_csv) for
report.py: history_ingest.csv (ingest), history_reads.csv (lastN, hourly),
history_memory.csv (memory), history_snapshot.csv (snapshot); a shape group not
run leaves its file as it is. The same tables are printed (markdown). A
benchmark: slow figures never fail it; non-2xx answers are counted in the rows
(the exit status is then 1, after the CSVs are written), and a broker that
does not answer stops it.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import perf_run  # noqa: E402  (free_port, wait_up, load, start_broker, wrk)
sys.path.insert(0, os.path.join(HERE, "tune"))
import tuneRun  # noqa: E402  (write_csv)

PATCH_LUA = os.path.join(HERE, "patch_obs.lua")
DAY = 86400
EPOCH = 1577836800          # 2020-01-01T00:00:00Z
RESULTS = os.path.join(perf_run.ROOT, "test", "perf", "results")
SCRIPT = "test/perf/history_bench.py"


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


def alive(p, what):
    """A broker that exited stops the benchmark (its figures would be of nothing)."""
    if p.poll() is not None:
        raise RuntimeError("the broker (%s) exited with %d" % (what, p.returncode))


def stats(base):
    with urllib.request.urlopen(base + "/statistics", timeout=30) as r:
        return json.loads(r.read())


def med(xs, fmt="%.0f"):
    xs = [x for x in xs if x is not None]
    return fmt % statistics.median(xs) if xs else "-"


def joined(xs, fmt="%.0f"):
    return " ".join(fmt % x for x in xs)


def print_table(title, rows):
    tuneRun.print_table(rows, title)


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
    """The ingest rows: per store of --dbsync, --history none then corDB."""
    rows = []
    for store in a.dbsync.split(","):
        dirs = []

        def flags(history):
            f = ["--history", history]
            if store != "ram":       # both on --dbDir with that --dbSync (history as durable as the store)
                dirs.append(tempfile.mkdtemp(prefix="coraine-hbench-"))
                f += ["--dbDir", dirs[-1], "--dbSync", store]
            return f
        brokers = {}
        try:
            for name in ("none", "corDB"):
                brokers[name] = broker(flags(name))
            for _, base in brokers.values():
                perf_run.load(base, a.entities)
            rates = {k: [] for k in brokers}
            p99 = {k: [] for k in brokers}
            bad = {k: 0 for k in brokers}
            for _ in range(a.runs):
                for name, (_, base) in brokers.items():
                    rps, n, lat = perf_run.wrk(base + "/", a.duration, a.conns, 1, PATCH_LUA, [str(a.entities)])
                    rates[name].append(rps)
                    p99[name].append(lat)
                    bad[name] += n
            for name, (p, _) in brokers.items():
                alive(p, "--history %s, %s" % (name, store))
            st = stats(brokers["corDB"][1]).get("history", {})
        finally:
            for p, _ in brokers.values():
                perf_run.stop(p, 30)
            for d in dirs:
                shutil.rmtree(d, ignore_errors=True)
        none = statistics.median(rates["none"])
        for name in ("none", "corDB"):
            m = statistics.median(rates[name])
            hist = name == "corDB" and st.get("instances")
            rows.append({"store": "RAM" if store == "ram" else "--dbDir, --dbSync " + store,
                         "history": name, "entities": a.entities, "connections": a.conns,
                         "medianPatchesPerSecond": "%.0f" % m, "runs": joined(rates[name]),
                         "vsHistoryNone": "%.2f" % (m / none if none else 0),
                         "medianP99us": med(p99[name]), "non2xx": bad[name],
                         "historyInstancesAfter": st["instances"] if hist else "-",
                         "historyMBAfter": "%.1f" % (st["bytes"] / 1e6) if hist else "-",
                         "historyBytesPerInstance": "%.1f" % (st["bytes"] / st["instances"]) if hist else "-"})
    return rows


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
    return (rps, int(bad.group(1)) if bad else 0, us(*p99.groups()) if p99 else None,
            us(*mx.groups()) if mx else None)


# hcordb.c's line: "history: snapshot of N instances: marked in X ms (writers waited), copied entity by entity in
# X ms (a tenant's lock held X ms at most; ...; a writer waited X ms at most), written in X ms (appends waited
# X ms for the log's tail)"
SNAP_LINE = re.compile(r"copied entity by entity in ([\d.]+) ms \(a tenant's lock held ([\d.]+) ms at most;.*"
                       r"a writer waited ([\d.]+) ms at most\), written in [\d.]+ ms \(appends waited ([\d.]+) ms")


def snapshot_run(a, binary, series):
    """One broker of `binary` on a fresh --dbDir: fill, then quiet and snapshotted PATCH windows:
    ({phase: wrk_lat()}, the log lines of the snapshots taken in the snapshotted window)."""
    port = perf_run.free_port()
    base = "http://127.0.0.1:%d" % port
    logf = tempfile.NamedTemporaryFile(prefix="coraine-hsnap-", suffix=".log", delete=False)
    dbdir = tempfile.mkdtemp(prefix="coraine-hsnap-")
    p = subprocess.Popen([binary, "-fg", "--port", str(port), "--bind", "127.0.0.1", "--logLevel", "info",
                          "--history", a.snap_history, "--dbDir", dbdir,
                          "--dbSnapshotSize", "0"], stdout=subprocess.DEVNULL, stderr=logf)
    mark = "history: snapshot of" if a.snap_history == "corDB" else "corDB: snapshot "

    def log_lines():
        with open(logf.name) as f:
            return [ln.strip() for ln in f if mark in ln]
    try:
        perf_run.wait_up(base + "/version")
        perf_run.load(base, a.entities)
        per = a.snap_instances // series
        for k in range(series if a.snap_history == "corDB" else 0):     # the history: the first S Vehicles' speed
            eid = "urn:ngsi-ld:Vehicle:%d" % k
            for start in range(0, per, 2000):
                post(base + "/ngsi-ld/v1/temporal/entities/%s/attrs" % eid,
                     {"speed": [{"type": "Property", "value": (i % 97) * 1.5, "observedAt": iso(i)}
                                for i in range(start, min(per, start + 2000))]})
        post(base + "/admin/snapshot", {})   # the log compacted: each window starts alike
        for _ in range(600):                 # (the snapshot thread writes it; the answer does not wait)
            if log_lines():
                break
            time.sleep(0.1)
        out, before = {}, 0
        for phase in ("quiet", "snapshot"):
            halt = []

            def snapper():
                time.sleep(1)
                while not halt:
                    post(base + "/admin/snapshot", {})
                    time.sleep(1)
            th = threading.Thread(target=snapper) if phase == "snapshot" else None
            if th:
                before = len(log_lines())
                th.start()
            out[phase] = wrk_lat(base + "/", a.duration, a.conns, PATCH_LUA, [str(a.entities)])
            halt.append(1)
            if th:
                th.join()
        time.sleep(0.5)                      # the last snapshot's line
        alive(p, binary)
    finally:
        perf_run.stop(p, 30)
        shutil.rmtree(dbdir, ignore_errors=True)
    lines = log_lines()[before:]
    os.unlink(logf.name)
    return out, lines


def snapshot_shape(a):
    bins = [perf_run.BIN] + ([a.base_bin] if a.base_bin else [])
    sizes = [int(s) for s in a.snap_series.split(",")]
    res = {(s, b): [] for s in sizes for b in bins}
    for _ in range(a.runs):
        for s in sizes:
            for b in bins:
                res[(s, b)].append(snapshot_run(a, b, s))
    rows = []
    for s in sizes:
        for b in bins:
            runs = res[(s, b)]
            quiet_p99 = statistics.median(r[0]["quiet"][2] or 0 for r in runs)
            for phase in ("quiet", "snapshot"):
                w = [r[0][phase] for r in runs]
                got = [m.groups() for r in runs for ln in r[1] for m in [SNAP_LINE.search(ln)] if m] \
                    if phase == "snapshot" else []
                p99 = statistics.median(x[2] or 0 for x in w)

                def most(i):
                    return "%.1f" % max(float(g[i]) for g in got) if got else "-"
                hist = a.snap_history == "corDB"
                rows.append({"history": a.snap_history, "series": s if hist else "-",
                             "instancesPerSeries": a.snap_instances // s if hist else "-",
                             "binary": os.path.relpath(b, perf_run.ROOT) if b.startswith(perf_run.ROOT) else b,
                             "phase": "quiet" if phase == "quiet" else "POST /admin/snapshot every second",
                             "medianPatchesPerSecond": med(x[0] for x in w), "runs": joined(x[0] for x in w),
                             "medianP99us": "%.0f" % p99,
                             "p99VsQuiet": "%.2f" % (p99 / quiet_p99) if quiet_p99 else "-",
                             "medianMaxUs": med(x[3] for x in w), "non2xx": sum(x[1] for x in w),
                             "snapshotsLogged": len([ln for r in runs for ln in r[1]]) if phase == "snapshot" else "-",
                             "longestCopyMs": most(0), "lockHeldMsAtMost": most(1),
                             "writerWaitedMsAtMost": most(2), "logTailMsAtMost": most(3)})
    return rows


def reads(a, shapes, flags=("--history", "corDB"), written=None):
    """The read rows (lastN, hourly) and the memory rows, on one broker with `flags`. written(n), when
    given, returns once n instances in all are stored (a backend whose writer trails the answers)."""
    p, base = broker(list(flags))
    read_rows, mem_rows = [], []
    try:
        rss0 = perf_run.rss_kib(p.pid)
        total = 0
        todo = []                                   # (shape, query, url, connections)
        if "lastN" in shapes or "memory" in shapes:
            t0 = time.time()
            fill(base, "urn:ngsi-ld:Sensor:n", a.instances)
            load_s = time.time() - t0
            total += a.instances
            rss1 = perf_run.rss_kib(p.pid)
            if "memory" in shapes:
                st = stats(base)["history"]
                mem_rows.append({"instances": st["instances"], "series": 1,
                                 "historyBytesPerInstance": "%.1f" % (st["bytes"] / st["instances"]),
                                 "rssGrowthBytesPerInstance": "%.1f" % ((rss1 - rss0) * 1024.0 / a.instances),
                                 "loadSeconds": "%.2f" % load_s,
                                 "loadInstancesPerSecond": "%.0f" % (a.instances / load_s)})
            if written:
                written(total)
        if "lastN" in shapes:
            url = base + "/ngsi-ld/v1/temporal/entities/urn:ngsi-ld:Sensor:n?attrs=speed&lastN=100"
            for conns in sorted({1, a.conns}):
                todo.append(("lastN", "lastN=100 of %d instances" % a.instances, url, conns))
        if "hourly" in shapes:
            fill(base, "urn:ngsi-ld:Sensor:d", DAY)
            total += DAY
            if written:
                written(total)
            url = (base + "/ngsi-ld/v1/temporal/entities/urn:ngsi-ld:Sensor:d?attrs=speed&format=aggregatedValues"
                   "&aggrMethods=avg&aggrPeriodDuration=PT1H&timerel=between&timeAt=%s&endTimeAt=%s" %
                   (iso(0), iso(DAY)))
            todo.append(("hourly", "avg per hour (PT1H) over a day of 1-s instances (%d)" % DAY, url, 1))
        got = {k: [] for k in range(len(todo))}
        for _ in range(a.runs):
            for k, (_, _, url, conns) in enumerate(todo):
                got[k].append(perf_run.wrk_full(url, a.duration, conns, 1))
        alive(p, " ".join(flags))
        for k, (shape, query, _, conns) in enumerate(todo):
            rs = got[k]
            fmt = "%.0f" if statistics.median(r["rps"] for r in rs) >= 100 else "%.1f"
            read_rows.append({"shape": shape, "query": query, "connections": conns,
                              "medianRequestsPerSecond": med((r["rps"] for r in rs), fmt),
                              "runs": joined((r["rps"] for r in rs), fmt),
                              "medianP50us": med(r["p50us"] for r in rs), "medianP99us": med(r["p99us"] for r in rs),
                              "non2xx": sum(r["non2xx"] for r in rs)})
    finally:
        perf_run.stop(p, 30)
    return read_rows, mem_rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=int, default=4)
    ap.add_argument("--entities", type=int, default=10000)
    ap.add_argument("--instances", type=int, default=100000)
    ap.add_argument("--conns", type=int, default=8)
    ap.add_argument("--shapes", default="ingest,lastN,hourly,memory,snapshot")
    ap.add_argument("--snap-instances", type=int, default=1000000)
    ap.add_argument("--snap-series", default="10,10000", help="snapshot: the series counts, one row group each")
    ap.add_argument("--snap-history", choices=["corDB", "none"], default="corDB",
                    help="snapshot: none measures what the store's own snapshot costs the same load")
    ap.add_argument("--base-bin", default=None, help="snapshot: a second binary, measured side by side")
    ap.add_argument("--bin", default=None, help="the broker binary (build/release/coraine)")
    ap.add_argument("--dbsync", default="ram,always,interval",
                    help="ingest: the stores, one pair of brokers each: ram (no --dbDir), or always, interval, "
                         "none (both brokers on a fresh --dbDir with that --dbSync)")
    ap.add_argument("--csv-dir", default=RESULTS, help="where the CSVs go (history_*.csv and .meta.json)")
    a = ap.parse_args()
    shapes = a.shapes.split(",")
    unknown = set(shapes) - {"ingest", "lastN", "hourly", "memory", "snapshot"}
    bad_store = set(a.dbsync.split(",")) - {"ram", "always", "interval", "none"}
    if unknown or bad_store:
        ap.error("unknown shape(s) or --dbsync value(s): %s" % ", ".join(sorted(unknown | bad_store)))
    if a.bin:
        perf_run.BIN = os.path.abspath(a.bin)
    if a.base_bin:
        a.base_bin = os.path.abspath(a.base_bin)
    out = []                       # (title, rows): each CSV is written as soon as its shapes are done

    def emit(name, title, rows, **extra):
        path = os.path.join(a.csv_dir, name)
        tuneRun.write_csv(path, rows, SCRIPT, **extra)
        out.append(("%s (%s)" % (title, path), rows))
    if "ingest" in shapes:
        emit("history_ingest.csv", "ingest: PATCH with observedAt, --history none and corDB side by side",
             ingest(a), runs=a.runs, durationSeconds=a.duration)
    if set(shapes) & {"lastN", "hourly", "memory"}:
        rr, mr = reads(a, shapes)
        if rr:
            emit("history_reads.csv", "reads of --history corDB", rr, runs=a.runs, durationSeconds=a.duration)
        if mr:
            emit("history_memory.csv", "memory of --history corDB", mr)
    if "snapshot" in shapes:
        emit("history_snapshot.csv", "snapshot: what a history snapshot costs the writers",
             snapshot_shape(a), runs=a.runs, durationSeconds=a.duration)
    failed = 0
    for title, rows in out:
        print_table(title, rows)
        failed += sum(int(r["non2xx"]) for r in rows if r.get("non2xx") not in (None, "-"))
    if failed:
        print("history_bench: %d non-2xx answers (counted in the rows above)" % failed, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
