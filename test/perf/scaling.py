#!/usr/bin/env python3
"""scaling.py - core scaling: the broker pinned to 1, 2, ... cores (taskset), the load on the rest.

  python3 test/perf/scaling.py [--bin build/release/coraine] [--shapes retrieve,query,patch]
                               [--duration 5] [--runs 3] [--csv test/perf/results/scaling.csv]

For k = 1 .. cores-1 the broker gets CPUs 0..k-1 (--connectionPoolSize k) and wrk
the others; at k = cores both share every core (said in the CSV: "shared").
Per step and shape: requests/s, the broker's CPU seconds per request (from
/proc) and the efficiency rps(k) / (k x rps(1)). On a 2-core machine the
ladder has two steps, the second shared; a bigger machine climbs further.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf_run  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tune"))
import tuneRun  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin")
    ap.add_argument("--shapes", default="retrieve,query,patch")
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--entities", type=int, default=10000)
    ap.add_argument("--csv", default=os.path.join(perf_run.ROOT, "test/perf/results/scaling.csv"))
    a = ap.parse_args()
    if a.bin:
        perf_run.BIN = a.bin
    n = os.cpu_count()
    rows = []
    for run in range(a.runs):
        for k in range(1, n + 1):
            shared = k == n
            srv = "0-%d" % (k - 1)
            perf_run.PIN_SERVER[:] = ["taskset", "-c", srv]
            perf_run.PIN_LOAD[:] = [] if shared else ["taskset", "-c", "%d-%d" % (k, n - 1)]
            port = perf_run.free_port()
            p = perf_run.start_broker(port, ["--connectionPoolSize", str(k)])
            try:
                base = "http://127.0.0.1:%d" % port
                perf_run.wait_up(base + "/version")
                perf_run.load(base, a.entities)
                for s in a.shapes.split(","):
                    url = {"retrieve": base + "/ngsi-ld/v1/entities/urn:ngsi-ld:Vehicle:1",
                           "query": base + "/ngsi-ld/v1/entities?type=Vehicle&q=speed%3E50&limit=20",
                           "patch": base + "/"}[s]
                    script = os.path.join(perf_run.ROOT, "test/perf/patch.lua") if s == "patch" else None
                    c0 = tuneRun.cpu_seconds(p.pid)
                    rps, bad, p99 = perf_run.wrk(url, a.duration, 50, 2, script,
                                                 (str(a.entities),) if s == "patch" else ())
                    cpu = tuneRun.cpu_seconds(p.pid) - c0
                    rows.append({"cores": k, "load": "shared" if shared else "apart", "shape": s, "run": run + 1,
                                 "rps": round(rps), "non2xx": bad, "p99us": round(p99 or 0),
                                 "cpuUsPerRequest": round(cpu / max(1, rps * a.duration) * 1e6, 1)})
                    print("run %d cores %d %-8s %8.0f req/s" % (run + 1, k, s, rps), file=sys.stderr)
            finally:
                p.terminate()
                p.wait()
    tuneRun.write_csv(a.csv, rows, "test/perf/scaling.py")
    print("| shape | cores | load | median requests/s | efficiency | CPU µs per request |")
    print("|---|---:|---|---:|---:|---:|")
    for s in a.shapes.split(","):
        one = statistics.median(r["rps"] for r in rows if r["shape"] == s and r["cores"] == 1)
        for k in range(1, n + 1):
            rs = [r for r in rows if r["shape"] == s and r["cores"] == k]
            med = statistics.median(r["rps"] for r in rs)
            print("| %s | %d | %s | %.0f | %.2f | %.1f |" % (s, k, rs[0]["load"], med, med / (k * one),
                                                           statistics.median(r["cpuUsPerRequest"] for r in rs)))


if __name__ == "__main__":
    main()
