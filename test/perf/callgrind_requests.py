#!/usr/bin/env python3
"""callgrind_requests.py - the broker's instructions per request, shape by shape.

Requests/s and CPU time on a shared 2-core machine drift with the other load;
instruction counts do not. This starts each --bin under valgrind --tool=callgrind,
loads N Vehicles (perf_run.py's shape), and for each shape sends a few requests
to warm up, zeroes the counters (callgrind_control -z), sends R requests over one
keep-alive connection, dumps (callgrind_control -d) and prints the instructions
of the whole process (every thread) per request. The shapes are those of
cpu_per_request.py (retrieve, query, query_ldjson, join_inline, orderby).

  python3 test/perf/callgrind_requests.py [--bin A --bin B] [--flags '--renderCache 0'] [-n 2000] [-r 100]
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf_run  # noqa: E402
from cpu_per_request import SHAPES, loaded_broker, send  # noqa: E402


def total(pid, prefix):
    subprocess.run(["callgrind_control", "-d", str(pid)], capture_output=True, check=False)
    time.sleep(0.5)
    newest = max(glob.glob(prefix + ".*"), key=os.path.getmtime)
    with open(newest) as f:
        m = re.search(r"^(?:summary|totals):\s+(\d+)", f.read(), re.M)
    return int(m.group(1))


def per_request(pid, prefix, warm, run, r):
    """warm(), the counters zeroed, run() (r requests): its instructions per request."""
    warm()
    subprocess.run(["callgrind_control", "-z", str(pid)], capture_output=True, check=False)
    time.sleep(0.3)
    run()
    return total(pid, prefix) / r


def table(bins, shapes, keep, measure_one):
    """measure_one(binary, dump_dir) -> {shape: instructions per request} for
    each binary, printed as a markdown table row by row (dumps kept under
    keep/<i> when keep is set); returns [(binary, counts)]."""
    print("| binary | " + " | ".join(shapes) + " |")
    print("|---|" + "---:|" * len(shapes))
    res = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, b in enumerate(bins):
            d = os.path.join(keep, str(i)) if keep else tmp
            os.makedirs(d, exist_ok=True)
            m = measure_one(b, d)
            print("| %s | " % b + " | ".join("%.0f" % m[s] for s in shapes) + " |", flush=True)
            res.append((b, m))
    return res


def measure(binary, flags, n, r, shapes, tmp):
    prefix = os.path.join(tmp, "cg.%s" % os.path.basename(binary))
    out = {}
    cg = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + prefix + ".%p"]
    with loaded_broker(binary, flags, n, cg) as (b, c):
        for s in shapes:
            out[s] = per_request(b.pid, prefix, lambda: send(c, s, 5), lambda: send(c, s, r), r)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", action="append")
    ap.add_argument("--flags", default="")
    ap.add_argument("-n", type=int, default=2000)
    ap.add_argument("-r", type=int, default=100)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--keep", help="keep the callgrind dumps in this directory (for callgrind_annotate)")
    ap.add_argument("--csv", help="also write binary,shape,instructions rows here (report.py's input)")
    a = ap.parse_args()
    shapes = a.shapes.split(",")
    res = table(a.bin or [perf_run.BIN], shapes, a.keep, lambda b, d: measure(b, a.flags.split(), a.n, a.r, shapes, d))
    rows = [(os.path.basename(os.path.dirname(os.path.abspath(b))), s, round(m[s])) for b, m in res for s in shapes]
    if a.csv:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tune"))
        import tuneRun
        tuneRun.write_csv(a.csv, [{"build": b, "shape": s, "instructionsPerRequest": n} for b, s, n in rows],
                          "test/perf/callgrind_requests.py")


if __name__ == "__main__":
    main()
