#!/usr/bin/env python3
"""create_stall.py - the longest answer of a stream of creates into one growing tenant.

Every index of a corDB tenant grows with its entities under the tenant's write
lock; a growth step that is O(entities) stops every write (and read) of the
tenant for its length, and its requests wait: their latency, not the rate, is
what it costs. The geo index re-chooses its grid level each time its entries
double (src/store/cordb/geoidx.c); done at once, that rebuild read every
entity under the lock. This drives wrk -c CONNS for --duration seconds of
POST /ngsi-ld/v1/entities, each a new entity with a GeoProperty, into a fresh
broker, and reads wrk's latency distribution: its maximum is the longest stall.

  stacked  the creates of test/perf/tune/workload.ingest.json's mix (make tune's
           wrk script: every new entity at the same point, where a finer grid
           never helps and a rebuild is tried and dropped)
  spread   each new entity (create.lua's Vehicle) at a random point of a
           2 x 2 degree box (the grid level changes as the count grows)

--bin is repeatable (e.g. a build of the commit before, in a temporary
directory); the binaries and shapes alternate over --runs. One row per run
(requests/s, p50, p99 and max latency in µs, the entities created, non-2xx
answers); a table of the medians goes to stdout and the rows to --csv (with
.meta.json) for report.py. A benchmark: it never fails on slow figures.

  python3 test/perf/create_stall.py [--bin build/release/coraine] [--bin /tmp/base/build/release/coraine]
                                    [--shapes stacked,spread] [--runs 3] [--duration 15] [--conns 50]
                                    [--csv test/perf/results/create_stall.csv]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import shutil
import tempfile
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "tune"))
import perf_run  # noqa: E402
import tuneGen  # noqa: E402
import tuneRun  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))



def us(v, unit):
    return float(v) * {"us": 1, "ms": 1000, "s": 1000000}[unit]


def one(binary, shape, duration, conns):
    script, args = shape                    # the wrk script and its arguments
    port = perf_run.free_port()
    p = perf_run.start_broker(port, binary=binary)
    base = "http://127.0.0.1:%d" % port
    try:
        perf_run.wait_up(base + "/version")
        cmd = perf_run.PIN_LOAD + ["wrk", "-t2", "-c%d" % conns, "-d%ds" % duration, "--latency",
                                   "--timeout", "10s", "-s", script, base] + (["--"] + args if args else [])
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=duration + 60).stdout
        lat = re.search(r"Latency\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)", out)
        row = {"rps": round(float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))),
               "maxUs": round(us(lat.group(5), lat.group(6)))}
        for pct in ("50", "99"):
            m = re.search(r"\s%s%%\s+([\d.]+)(us|ms|s)\b" % pct, out)
            row["p%sUs" % pct] = round(us(m.group(1), m.group(2))) if m else ""
        bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
        row["non2xx"] = int(bad.group(1)) if bad else 0
        row["entities"] = count(base)
        return row
    finally:
        perf_run.stop(p)


def count(base):
    r = urllib.request.urlopen(base + "/ngsi-ld/v1/entities?type=Meter,Vehicle&count=true&limit=0", timeout=60)
    return int(r.headers.get("NGSILD-Results-Count", 0))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", action="append")
    ap.add_argument("--shapes", default="stacked,spread")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=int, default=15)
    ap.add_argument("--conns", type=int, default=50)
    ap.add_argument("--csv", default=os.path.join(ROOT, "test", "perf", "results", "create_stall.csv"))
    a = ap.parse_args()
    bins = a.bin or [perf_run.BIN]
    tmp = tempfile.mkdtemp(prefix="coraine-stall-")
    w = tuneGen.check(tuneGen.load_file(os.path.join(HERE, "tune", "workload.ingest.json")))
    w["load"]["mix"] = {"create": 1.0}
    tuneGen.gen(w, tmp)
    scripts = {"stacked": (os.path.join(tmp, "mix.lua"), []),
               "spread": (os.path.join(HERE, "create.lua"), ["0", "spread"])}
    shapes = [s for s in a.shapes.split(",") if s]
    for s in shapes:
        if s not in scripts:
            sys.exit("create_stall: unknown shape %r (stacked, spread)" % s)
    combos = [(b, s) for s in shapes for b in bins]

    def name(b):
        rel = os.path.relpath(os.path.abspath(b), ROOT)
        return os.path.abspath(b) if rel.startswith("..") else rel
    rows = []
    for run in range(1, a.runs + 1):
        for b, s in (combos if run % 2 else list(reversed(combos))):
            r = one(b, scripts[s], a.duration, a.conns)
            ver = subprocess.run([b, "--version"], capture_output=True, text=True).stdout.strip()
            rows.append(dict({"binary": name(b), "version": ver,
                              "shape": s, "run": run}, **r))
            print("create_stall %s %s run %d: %s" % (s, b, run, r), file=sys.stderr)
    shutil.rmtree(tmp, ignore_errors=True)
    tuneRun.write_csv(a.csv, rows, "test/perf/create_stall.py", durationSeconds=a.duration, conns=a.conns)
    table = []
    for b, s in combos:
        rs = [r for r in rows if r["binary"] == name(b) and r["shape"] == s]
        table.append({"binary": rs[0]["binary"], "version": rs[0]["version"], "shape": s,
                      "median requests/s": round(statistics.median(r["rps"] for r in rs)),
                      "median p99 µs": round(statistics.median(r["p99Us"] for r in rs if r["p99Us"] != "")),
                      "median max µs": round(statistics.median(r["maxUs"] for r in rs)),
                      "max µs (runs)": " ".join(str(r["maxUs"]) for r in rs),
                      "non-2xx": sum(r["non2xx"] for r in rs)})
    tuneRun.print_table(table, "create_stall (%s)" % a.csv)


if __name__ == "__main__":
    main()
