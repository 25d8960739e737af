#!/usr/bin/env python3
"""ingest_headroom.py - what a broker's own work per request costs a workload's rate on this machine.

On a small machine the load generator, the kernel's loopback TCP and the
broker share the cores, so a target rate (workload.ingest.json's 100,000
requests/s) is a budget of the broker's own work per request, and that
budget is measured here rather than guessed: the trivial libmicrohttpd
responder (test/perf/trivial_responder.c, coraine's HTTP layer without the
broker) answers the workload's wrk script (tuneGen.py) after busy-waiting
--spins nanoseconds per request in user space, and the broker out of the box
(tuneRun.run: an empty store, the entities, the warm-up, the measured run)
answers the same script; alternated run by run, --runs times. Per way: the
median requests/s with the spread, and the server's user and system CPU
microseconds per request (/proc, every thread) and its page faults per request
(a store that grows pays one per fresh page). The spins give the curve of
the rate against the work per request; the broker's user CPU per request,
less the plain responder's, places it on that curve. The system time rises as
the server slows for every server alike (the peer's wake-ups: a fast server
finds wrk awake, a slow one wakes it for each answer), which the spins show.

  python3 test/perf/tune/ingest_headroom.py [WORKLOAD] --bin BROKER [--spins 0,2000,4000,6000]
          [--runs 3] [--duration 10] [--warmup 3] [--csv test/perf/results/headroom_<workload>.csv]
"""
import argparse
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, HERE)
import tuneGen  # noqa: E402
import tuneRun  # noqa: E402


def per_request(res, key):
    return round(res[key] * 1e6 / res["requests"], 2) if res.get(key) is not None and res["requests"] else ""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload", nargs="?", default=os.path.join(HERE, "workload.ingest.json"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "release", "coraine"))
    ap.add_argument("--spins", default="0,2000,4000,6000")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--warmup", type=float, default=3)
    ap.add_argument("--csv")
    a = ap.parse_args()
    try:
        w = tuneGen.check(tuneGen.load_file(a.workload))
    except tuneGen.WorkloadError as e:
        sys.exit("ingest_headroom: %s: %s" % (a.workload, e))
    name = os.path.splitext(os.path.basename(a.workload))[0]
    gendir = tempfile.mkdtemp(prefix="coraine-headroom-")
    tuneGen.gen(w, gendir)
    spins = [int(s) for s in a.spins.split(",") if s.strip()]
    ways = [("responder", s) for s in spins] + [("coraine", None)]
    rows = []
    for run in range(1, a.runs + 1):
        for way, spin in (ways if run % 2 else list(reversed(ways))):
            if way == "coraine":
                res = tuneRun.run(gendir, a.bin, a.duration, a.warmup, "", [])
            else:
                res = tuneRun.run_ceiling(gendir, a.duration, a.warmup, spin)
            if res.get("error"):
                sys.exit("ingest_headroom: %s run %d: %s" % (way, run, res["error"]))
            rows.append({"way": way, "spinNs": "" if spin is None else spin, "run": run, "rps": round(res["rps"]),
                         "userUsPerRequest": per_request(res, "brokerUserSeconds"),
                         "sysUsPerRequest": per_request(res, "brokerSysSeconds"),
                         "faultsPerRequest": round(res["brokerMinorFaults"] / res["requests"], 3)
                         if res.get("brokerMinorFaults") is not None and res["requests"] else "",
                         "failedRequests": res["failedRequests"]})
            tuneRun.log("headroom %s run %d %s: %d requests/s, user %s sys %s us, %s page faults per request" % (
                name, run, way if spin is None else "responder+%d ns" % spin, res["rps"],
                rows[-1]["userUsPerRequest"], rows[-1]["sysUsPerRequest"], rows[-1]["faultsPerRequest"]))
    path = a.csv or os.path.join(ROOT, "test", "perf", "results", "headroom_%s.csv" % name)
    tuneRun.write_csv(path, rows, "test/perf/tune/ingest_headroom.py", workload=name, durationSeconds=a.duration,
                      binary=os.path.relpath(os.path.abspath(a.bin), ROOT))
    table = []
    for way, spin in ways:
        rs = [r for r in rows if r["way"] == way and r["spinNs"] == ("" if spin is None else spin)]
        table.append({"way": way if spin is None else "responder + %d ns" % spin,
                      "median requests/s": round(statistics.median(r["rps"] for r in rs)),
                      "user us/request": statistics.median(float(r["userUsPerRequest"]) for r in rs),
                      "sys us/request": statistics.median(float(r["sysUsPerRequest"]) for r in rs),
                      "faults/request": statistics.median(float(r["faultsPerRequest"]) for r in rs)})
    tuneRun.print_table(table, "ingest_headroom %s (%s)" % (name, path))


if __name__ == "__main__":
    main()
