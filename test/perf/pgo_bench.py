#!/usr/bin/env python3
"""pgo_bench.py - builds against each other on perf_run.py's shapes, alternated.

  python3 test/perf/pgo_bench.py [--runs 3] [--duration 5] [--shapes retrieve,query,create,patch]
                                 [--bins build/release/coraine,build/pgo/coraine,build/pgo-nolto/coraine]
                                 [--csv test/perf/results/pgo_bench.csv]

Each run starts every build in turn on a fresh broker (corDB in RAM, the same
entities) and drives the same shapes with wrk, so the machine's drift spreads
over all builds; the table gives each build's median requests/s per shape,
the runs and the ratio to the first build (plain -O2). A build that does not
exist is left out and named. The CSV (one line per build, shape and run) is
report.py's input. Say how busy the machine was: the figures measure it too.
"""
import argparse
import json
import os
import statistics
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf_run  # noqa: E402

ROOT = perf_run.ROOT


def shape_url(base, shape):
    page = "/ngsi-ld/v1/entities?type=Vehicle&q=speed%3E50&limit=20"
    return {"retrieve": (base + "/ngsi-ld/v1/entities/urn:ngsi-ld:Vehicle:1", None),
            "query": (base + page, None),
            "create": (base + "/ngsi-ld/v1/entities", os.path.join(ROOT, "test/perf/create.lua")),
            "patch": (base + "/", os.path.join(ROOT, "test/perf/patch.lua")),
            "orderby": (base + "/ngsi-ld/v1/entities?type=Vehicle&orderBy=speed%3Bdesc&limit=20", None)}[shape]


def build_name(binary):
    b = os.path.basename(os.path.dirname(os.path.abspath(binary)))
    return b


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--entities", type=int, default=10000)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--shapes", default="retrieve,query,create,patch")
    ap.add_argument("--bins", default="build/release/coraine,build/pgo/coraine,build/pgo-nolto/coraine")
    ap.add_argument("--csv", default=os.path.join(ROOT, "test/perf/results/pgo_bench.csv"))
    ap.add_argument("--pin", default="", help="SERVER_CPUS:LOAD_CPUS (taskset lists)")
    a = ap.parse_args()
    if a.pin:
        srv, ld = a.pin.split(":")
        perf_run.PIN_SERVER[:] = ["taskset", "-c", srv]
        perf_run.PIN_LOAD[:] = ["taskset", "-c", ld]
    bins = []
    for b in a.bins.split(","):
        p = b if os.path.isabs(b) else os.path.join(ROOT, b)
        if os.access(p, os.X_OK):
            bins.append(p)
        else:
            print("pgo_bench: %s does not exist: left out" % b, file=sys.stderr)
    shapes = a.shapes.split(",")
    rows, info = [], {}
    for run in range(a.runs):
        for b in (bins if run % 2 == 0 else list(reversed(bins))):
            port = perf_run.free_port()
            proc = perf_run.start_broker(port, binary=b)
            try:
                base = "http://127.0.0.1:%d" % port
                perf_run.wait_up(base + "/version")
                info[b] = json.loads(urllib.request.urlopen(base + "/version").read())
                perf_run.load(base, a.entities)
                for s in shapes:
                    url, script = shape_url(base, s)
                    rps, bad, p99 = perf_run.wrk(url, a.duration, a.connections, 2, script,
                                                 (str(a.entities),) if s == "patch" else ())
                    rows.append({"build": build_name(b), "shape": s, "run": run + 1, "rps": round(rps),
                                 "non2xx": bad, "p99us": round(p99 or 0)})
                    print("run %d %-10s %-8s %8.0f req/s non-2xx %d" % (run + 1, build_name(b), s, rps, bad),
                          file=sys.stderr)
            finally:
                proc.terminate()
                proc.wait()
    sys.path.insert(0, os.path.join(ROOT, "test", "perf", "tune"))
    import tuneRun
    tuneRun.write_csv(a.csv, rows, "test/perf/pgo_bench.py", runs=a.runs, durationSeconds=a.duration,
                      builds={build_name(b): info.get(b, {}) for b in bins})
    with open(a.csv + ".meta.json") as f:
        meta = json.load(f)
    print("commit %s, %s, load average %.2f at the end; `%s`" %
          (meta["commit"], meta["machine"], meta["loadAverageAtEnd"], meta["command"]))
    print()
    names = [build_name(b) for b in bins]
    for b in bins:
        v = info.get(b, {})
        print("- %s: cflags `%s`, pgo %s (%s), lto %s" % (build_name(b), v.get("cflags"), v.get("pgo"),
                                                       v.get("pgoTraining") or "-", v.get("lto")))
    print()
    print("| shape | " + " | ".join("%s req/s (runs)" % n for n in names) + " | " +
          " | ".join("%s / %s" % (n, names[0]) for n in names[1:]) + " |")
    print("|---|" + "---:|" * (2 * len(names) - 1))
    for s in shapes:
        med = {}
        cells = []
        for n in names:
            rs = [r["rps"] for r in rows if r["build"] == n and r["shape"] == s]
            med[n] = statistics.median(rs)
            cells.append("%.0f (%s)" % (med[n], ", ".join(str(x) for x in rs)))
        ratios = ["%.3f" % (med[n] / med[names[0]]) for n in names[1:]]
        print("| %s | %s | %s |" % (s, " | ".join(cells), " | ".join(ratios)))
    if any(r["non2xx"] for r in rows):
        print("\nWARNING: some requests failed (non-2xx): those figures do not count")


if __name__ == "__main__":
    main()
