#!/usr/bin/env python3
"""patch_p99.py - PATCH latency alone and under a stream of full-scan queries.

Issue 10: no scan may hold the tenant lock for its whole length. This loads N
Vehicles (perf_run.py's shape) into a fresh broker, then alternates RUNS times:
  alone   wrk -t1 -c4 PATCH /ngsi-ld/v1/entities/{random id} (a merge of speed)
  scans   the same while `wrk -t1 -cS` keeps asking
          GET /ngsi-ld/v1/entities?q=brand=="none"&count=true&limit=1
          (q over an unindexed attribute, no type: every entity is read)
and prints, per binary, the medians of PATCH p50/p99 (µs) and requests/s and
of the scans' requests/s. Several --bin compare builds (e.g. the base commit
built in a temporary directory). Loopback only; bounded by --duration.

  python3 test/perf/patch_p99.py [--bin build/release/coraine] [--bin /tmp/base/build/release/coraine]
                                 [--entities 100000] [--runs 3] [--duration 5] [--scanners 2]
                                 [--workers 8] [--broker-flags '--dbLockPrefer writes']
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf_run  # noqa: E402  (free_port, wait_up, load, wrk)

HERE = os.path.dirname(os.path.abspath(__file__))
SCAN = '/ngsi-ld/v1/entities?q=brand==%22none%22&count=true&limit=1'


def p50_us(out):
    m = re.search(r"50%\s+([\d.]+)(us|ms|s)", out)
    return float(m.group(1)) * {"us": 1, "ms": 1000, "s": 1000000}[m.group(2)] if m else None


def patch_run(base, a):
    cmd = ["wrk", "-t1", "-c4", "-d%ds" % a.duration, "--latency", "-s", os.path.join(HERE, "patch.lua"),
           base + "/", "--", str(a.entities)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    m = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    p99 = float(m.group(1)) * {"us": 1, "ms": 1000, "s": 1000000}[m.group(2)]
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    if bad:
        raise RuntimeError("PATCH failed: %s non-2xx" % bad.group(1))
    return p50_us(out), p99, rps


def measure(binary, a):
    port = perf_run.free_port()
    base = "http://127.0.0.1:%d" % port
    b = perf_run.start_broker(port, ["--connectionPoolSize", str(a.workers)] + a.broker_flags.split(), binary)
    res = {"alone": [], "scans": [], "scan_rps": []}
    try:
        perf_run.wait_up(base + "/version")
        perf_run.load(base, a.entities)
        time.sleep(1)
        for _ in range(a.runs):
            res["alone"].append(patch_run(base, a))
            scan = subprocess.Popen(["wrk", "-t1", "-c%d" % a.scanners, "-d%ds" % (a.duration + 2), base + SCAN],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            time.sleep(1)
            res["scans"].append(patch_run(base, a))
            out = scan.communicate()[0]
            res["scan_rps"].append(float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)))
    finally:
        b.terminate()
        b.wait()
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", action="append")
    ap.add_argument("--entities", type=int, default=100000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--scanners", type=int, default=2)
    ap.add_argument("--workers", type=int, default=8,
                    help="--connectionPoolSize: more HTTP workers than scanners, so that a PATCH waits "
                         "for the store, not for a worker")
    ap.add_argument("--broker-flags", default="")
    a = ap.parse_args()
    bins = a.bin or [perf_run.BIN]
    print("command: %s" % " ".join(["python3", "test/perf/patch_p99.py"] + sys.argv[1:]))
    print("| binary | PATCH alone p50 / p99 (µs), req/s | PATCH under scans p50 / p99 (µs), req/s | scans/s |")
    print("|---|---|---|---:|")
    for binary in bins:
        r = measure(binary, a)
        med = lambda rows, i: statistics.median(x[i] for x in rows)  # noqa: E731
        print("| %s | %.0f / %.0f, %.0f | %.0f / %.0f, %.0f | %.1f |" % (
            binary, med(r["alone"], 0), med(r["alone"], 1), med(r["alone"], 2),
            med(r["scans"], 0), med(r["scans"], 1), med(r["scans"], 2), statistics.median(r["scan_rps"])))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
