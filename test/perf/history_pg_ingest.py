#!/usr/bin/env python3
"""history_pg_ingest.py - PATCH ingest with --history timescale (PostgreSQL).

Starts a PostgreSQL of its own (test/functional/pg.py's PgServer: initdb in a
temporary directory, Unix socket only, fsync off as in the tests, or --pg-fsync
to keep PostgreSQL's defaults), then for each broker configuration (`none`,
then `timescale`) a fresh broker loaded with N Vehicles, and runs wrk's
patch.lua (a merge of speed on one of the N, keep-alive) for --duration
seconds. Reported per configuration:
  - requests/s (wrk), non-2xx answers;
  - the broker's CPU per PATCH (utime + stime from /proc, over the run);
  - PostgreSQL's CPU per PATCH (every process of the cluster), counted until
    the history of the run is in the database (the writer may trail wrk);
  - how long after wrk ended the last instance arrived (the queue's lag).

  python3 test/perf/history_pg_ingest.py [--duration 10] [--entities 10000] [--connections 50]

--temporal-load N: instead, N instances of one attribute through the temporal
API (POST .../attrs, 2,000 per request: the upsert path), per binary (--bin,
and --base-bin side by side, alternated --runs times): the wall time until
all are in PostgreSQL, instances/s, and PostgreSQL's and the broker's CPU per
instance.

  python3 test/perf/history_pg_ingest.py --temporal-load 100000 --runs 3 [--base-bin B]

--reads lastN,hourly: instead, history_bench.py's read shapes against
--history timescale (lastN=100 of --instances instances of one attribute;
an hourly avg over a day of 1-second instances), on the same kind of server.
"""
import argparse
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "test", "functional"))
sys.path.insert(0, HERE)

from pg import PgServer                                       # noqa: E402
from perf_run import free_port, load, start_broker, wait_up, wrk   # noqa: E402
import perf_run                                               # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK      # utime, stime


def cluster_pids(pg):
    with open(os.path.join(pg.data, "postmaster.pid")) as f:
        master = int(f.readline())
    pids = [master]
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                if ppid == master:
                    pids.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return pids


def cluster_cpu(pg):
    """CPU seconds of the cluster's live processes (exited backends are lost:
    the broker keeps its connections, so none exit during a run)."""
    total = 0.0
    for p in cluster_pids(pg):
        try:
            total += cpu_seconds(p)
        except OSError:
            pass
    return total


def run(pg, mode, a):
    port = free_port()
    extra = ["--history", mode]
    db = None
    if mode == "timescale":
        db = pg.new_database()
        extra += ["--historyURI", pg.uri(db)]
    b = start_broker(port, extra)
    try:
        base = "http://127.0.0.1:%d" % port
        wait_up(base + "/version")
        load(base, a.entities)
        count = (lambda: int(pg.psql("SELECT count(*) FROM coraine_instances", db))) if db else None
        if count:
            while True:                    # the load's own history in first
                n0 = count()
                time.sleep(0.5)
                if count() == n0:
                    break
        c0, p0 = cpu_seconds(b.pid), cluster_cpu(pg) if db else 0.0
        t0 = time.time()
        rps, bad, p99 = wrk(base + "/", a.duration, a.connections, a.threads,
                            os.path.join(HERE, "patch.lua"), (str(a.entities),))
        t_end = time.time()
        c1 = cpu_seconds(b.pid)
        lag, rows = 0.0, 0
        if count:
            # the run's instances: one per PATCH; wait until they are all in
            expect = n0 + int(rps * (t_end - t0) * 0.98)
            while count() < expect and time.time() - t_end < 60:
                time.sleep(0.1)
            lag = time.time() - t_end
            rows = count() - n0
        p1 = cluster_cpu(pg) if db else 0.0
        patches = rps * (t_end - t0)
        return {"mode": mode, "rps": rps, "bad": bad, "p99": p99,
                "broker_us": (c1 - c0) * 1e6 / patches, "pg_us": (p1 - p0) * 1e6 / patches if db else 0,
                "lag": lag, "rows": rows, "patches": patches}
    finally:
        b.terminate()
        b.wait()


def temporal_load(pg, binary, a):
    """N instances through POST /temporal/entities/{id}/attrs; the time until all are in PostgreSQL."""
    import history_bench
    db = pg.new_database()
    port = free_port()
    b = start_broker(port, ["--history", "timescale", "--historyURI", pg.uri(db)], binary=binary)
    try:
        base = "http://127.0.0.1:%d" % port
        wait_up(base + "/version")
        c0, p0, t0 = cpu_seconds(b.pid), cluster_cpu(pg), time.time()
        history_bench.fill(base, "urn:ngsi-ld:Sensor:load", a.temporal_load)
        posted = time.time() - t0
        count = lambda: int(pg.psql("SELECT count(*) FROM coraine_instances", db))
        while count() < a.temporal_load and time.time() - t0 < 900:
            time.sleep(0.05)
        wall = time.time() - t0
        n = count()
        return {"wall": wall, "posted": posted, "rate": n / wall, "n": n,
                "pg_us": (cluster_cpu(pg) - p0) * 1e6 / n, "broker_us": (cpu_seconds(b.pid) - c0) * 1e6 / n}
    finally:
        b.terminate()
        b.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--entities", type=int, default=10000)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--bin", help="the broker binary (default build/release/coraine)")
    ap.add_argument("--reads", help="history_bench.py's read shapes (lastN,hourly) on timescale")
    ap.add_argument("--instances", type=int, default=100000)
    ap.add_argument("--conns", type=int, default=8)
    ap.add_argument("--temporal-load", type=int, default=0, help="N instances through the temporal API")
    ap.add_argument("--base-bin", help="--temporal-load: a second binary, side by side")
    a = ap.parse_args()
    if a.bin:
        perf_run.BIN = a.bin
    pg = PgServer()
    if a.temporal_load:
        import statistics
        bins = [("this", a.bin or perf_run.BIN)] + ([("base", a.base_bin)] if a.base_bin else [])
        res = {k: [] for k, _ in bins}
        try:
            for _ in range(a.runs):
                for name, binary in bins:
                    r = temporal_load(pg, binary, a)
                    res[name].append(r)
                    print("%-5s %d instances in PostgreSQL after %.2f s (answered after %.2f s): %.0f instances/s, "
                          "PostgreSQL %.1f us/instance, broker %.1f us/instance" %
                          (name, r["n"], r["wall"], r["posted"], r["rate"], r["pg_us"], r["broker_us"]),
                          file=sys.stderr)
        finally:
            pg.close()
        print("| binary | instances/s (median of %d) | PostgreSQL CPU per instance (µs) | broker CPU per instance (µs) |"
              % a.runs)
        print("|---|---:|---:|---:|")
        for name, binary in bins:
            rs = res[name]
            print("| %s (%s) | %.0f | %.1f | %.1f |" % (name, binary, statistics.median(r["rate"] for r in rs),
                                                       statistics.median(r["pg_us"] for r in rs),
                                                       statistics.median(r["broker_us"] for r in rs)))
        return
    if a.reads:
        import history_bench
        uri = pg.uri(pg.new_database())
        start = history_bench.broker
        # the same shapes, on a broker with the PostgreSQL backend
        history_bench.broker = lambda flags: start(["--history", "timescale", "--historyURI", uri])
        fill = history_bench.fill

        def fill_then_wait(base, eid, n, step=1):
            """The load is queued when fill returns; the reads are timed once it is written."""
            import urllib.request
            t0 = time.time()
            fill(base, eid, n, step)
            while time.time() - t0 < 900:
                try:
                    with urllib.request.urlopen(base + "/ngsi-ld/v1/temporal/entities/%s?lastN=1" % eid,
                                                timeout=30) as r:
                        if r.status == 200:
                            break
                except Exception:
                    time.sleep(0.5)
            print("load    %d instances through the temporal API, in PostgreSQL after %.1f s" %
                  (n, time.time() - t0), file=sys.stderr)
        history_bench.fill = fill_then_wait
        try:
            history_bench.reads(a, a.reads.split(","))
        finally:
            pg.close()
        return
    try:
        res = []
        for _ in range(a.runs):
            for mode in ("none", "timescale"):
                r = run(pg, mode, a)
                res.append(r)
                print("%-9s %8.0f req/s  non-2xx %d  broker %.1f us/PATCH  postgres %.1f us/PATCH  "
                      "lag %.2f s  rows %d" % (mode, r["rps"], r["bad"], r["broker_us"], r["pg_us"],
                                               r["lag"], r["rows"]), file=sys.stderr)
        print("| --history | PATCH/s | non-2xx | p99 (µs) | broker CPU/PATCH (µs) | PostgreSQL CPU/PATCH (µs) | history lag after the run (s) |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for r in res:
            print("| %s | %.0f | %d | %.0f | %.1f | %s | %s |" % (
                r["mode"], r["rps"], r["bad"], r["p99"] or 0, r["broker_us"],
                "%.1f" % r["pg_us"] if r["mode"] == "timescale" else "-",
                "%.2f" % r["lag"] if r["mode"] == "timescale" else "-"))
    finally:
        pg.close()


if __name__ == "__main__":
    main()
