#!/usr/bin/env python3
"""mongo_scaling.py - --database mongoc: the rate of one coraine process on one database, and of two.

  python3 test/perf/mongo_scaling.py [--runs 3] [--duration 5] [--conns 16] [-n 1000] [--pools 0]
                                     [--shapes retrieve,patch] [--csv test/perf/results/mongo_scaling.csv]

Issue 16 asks how the rate scales from one coraine process to two on one
database. FerretDB (test/functional/ferret.py builds it) is the database;
--runs times, alternated, one process and then two on a database of their
own (the same --dbName), N Vehicles loaded through the first (perf_run.py's
shape). For each shape wrk sends --conns connections in all for --duration
seconds: to the one process, or half to each of the two at once. Per step:
the requests/s summed over the processes (median of the runs), the ratio
two / one, the brokers' CPU per request (all of them, from /proc), the
database's CPU per request and the share of a core it used, non-2xx
answers (a PATCH through two processes of one entity retries on the version
check: doc/mongodb.md; none may fail). On this 2-core machine the database,
the brokers and wrk share the cores; the database's share says which one is
the limit. --pools: the --connectionPoolSize values to run each step with,
side by side (0: the broker's default): every request holds its HTTP worker
while the database answers, so a process's workers bound its requests in
flight. A benchmark: it never fails.
"""
import argparse
import os
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "functional"))
sys.path.insert(0, os.path.join(HERE, "tune"))
import ferret  # noqa: E402
import perf_run  # noqa: E402
import tuneRun  # noqa: E402


def url_of(base, shape, n):
    if shape == "retrieve":
        return base + "/ngsi-ld/v1/entities/urn:ngsi-ld:Vehicle:1", None, ()
    if shape == "query":
        return base + "/ngsi-ld/v1/entities?type=Vehicle&q=speed%3E50&limit=20", None, ()
    return base + "/", os.path.join(HERE, "patch.lua"), (str(n),)


def step(srv, procs, pool, shapes, n, duration, conns):
    """One run of `procs` processes on a fresh database: {shape: (rps, broker µs, db µs, db share, non2xx)}."""
    prefix = ferret.new_prefix()
    flags = list(ferret.mongo_flags(srv, prefix, "--dbTimeout", "60000", "--syncInterval", "1000",
                                    "--connectionPoolSize", str(pool)))
    ports = [perf_run.free_port() for _ in range(procs)]
    ps = [perf_run.start_broker(p, flags) for p in ports]
    out = {}
    try:
        bases = ["http://127.0.0.1:%d" % p for p in ports]
        for b in bases:
            perf_run.wait_up(b + "/version", 60)
        perf_run.load(bases[0], n)
        for s in shapes:
            res = [None] * procs

            def one(i):
                u, script, args = url_of(bases[i], s, n)
                res[i] = perf_run.wrk_full(u, duration, max(1, conns // procs), 1, script, args)

            c0 = sum(tuneRun.cpu_seconds(p.pid) for p in ps)
            d0, w0 = tuneRun.cpu_seconds(srv.proc.pid), time.perf_counter()
            th = [threading.Thread(target=one, args=(i,)) for i in range(procs)]
            for t in th:
                t.start()
            for t in th:
                t.join()
            wall = time.perf_counter() - w0
            cpu = sum(tuneRun.cpu_seconds(p.pid) for p in ps) - c0
            db = tuneRun.cpu_seconds(srv.proc.pid) - d0
            reqs = max(1, sum(r["requests"] for r in res))
            out[s] = (sum(r["rps"] for r in res), cpu / reqs * 1e6, db / reqs * 1e6, db / wall,
                      sum(r["non2xx"] for r in res))
    finally:
        for p in ps:
            p.terminate()
        for p in ps:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--conns", type=int, default=16, help="wrk connections in all, split between the processes")
    ap.add_argument("-n", type=int, default=1000, help="Vehicles loaded")
    ap.add_argument("--shapes", default="retrieve,patch")
    ap.add_argument("--pools", default="0", help="--connectionPoolSize values, side by side (0: the default)")
    ap.add_argument("--csv", default=os.path.join(perf_run.ROOT, "test/perf/results/mongo_scaling.csv"))
    a = ap.parse_args()
    shapes = a.shapes.split(",")
    pools = [int(x) for x in a.pools.split(",")]
    srv = ferret.FerretServer()
    got = {}        # (shape, pool, procs) -> [per run tuples]
    try:
        for _ in range(a.runs):
            for pool in pools:
                for procs in (1, 2):
                    for s, v in step(srv, procs, pool, shapes, a.n, a.duration, a.conns).items():
                        got.setdefault((s, pool, procs), []).append(v)
    finally:
        srv.close()
    rows = []
    for s, pool, procs in sorted(got, key=lambda k: (shapes.index(k[0]), pools.index(k[1]), k[2])):
        one = statistics.median(v[0] for v in got[(s, pool, 1)])
        vs = got[(s, pool, procs)]
        med = statistics.median(v[0] for v in vs)
        rows.append({"shape": s, "connectionPoolSize": pool or "default", "processes": procs,
                     "medianRequestsPerSecond": round(med),
                     "runs": " ".join("%.0f" % v[0] for v in vs),
                     "vsOneProcess": "%.2f" % (med / one if one else 0),
                     "brokersCpuUsPerRequest": "%.0f" % statistics.median(v[1] for v in vs),
                     "databaseCpuUsPerRequest": "%.0f" % statistics.median(v[2] for v in vs),
                     "databaseCoreShare": "%.2f" % statistics.median(v[3] for v in vs),
                     "non2xx": sum(v[4] for v in vs)})
    tuneRun.write_csv(a.csv, rows, "test/perf/mongo_scaling.py", runs=a.runs, durationSeconds=a.duration)
    print("| " + " | ".join(rows[0]) + " |")
    for r in rows:
        print("| " + " | ".join(str(x) for x in r.values()) + " |")


if __name__ == "__main__":
    main()
