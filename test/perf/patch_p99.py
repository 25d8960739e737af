#!/usr/bin/env python3
"""patch_p99.py - PATCH latency alone and under a stream of full-scan queries.

Issue 10: no scan may hold the tenant lock for its whole length. This loads N
Vehicles (perf_run.py's shape) into a fresh broker, then alternates RUNS times:
  alone   wrk -t1 -c4 PATCH /ngsi-ld/v1/entities/{random id} (a merge of speed)
  scans   the same while `wrk -t1 -cS` keeps asking
          GET /ngsi-ld/v1/entities?q=brand=="none"&count=true&limit=1
          (q over an unindexed attribute, no type: every entity is read)
One row per binary and load: the binary and its commit (`coraine --version`),
the medians over the runs of PATCH p50 and p99 (µs) and requests/s, each
run's p99 and requests/s, the p99 against the same binary's alone p99, the
median scans/s (under scans), and the non-2xx answers of the PATCHes and of
the scans (none may fail). Several --bin compare builds (e.g. the base commit
built in a temporary directory). Loopback only; bounded by --duration.

  python3 test/perf/patch_p99.py [--bin build/release/coraine] [--bin /tmp/base/build/release/coraine]
                                 [--entities 100000] [--runs 5] [--duration 5] [--scanners 2]
                                 [--workers 8] [--broker-flags '--dbLockPrefer writes']
                                 [--csv test/perf/results/patch_p99.csv]

A benchmark: it never fails on slow figures. The rows go to --csv (with
.meta.json) for report.py; a markdown table goes to stdout.
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
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tune"))
import tuneRun  # noqa: E402

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
    return p50_us(out), p99, rps, non2xx(out)


def non2xx(out):
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return int(bad.group(1)) if bad else 0


def measure(binary, a):
    port = perf_run.free_port()
    base = "http://127.0.0.1:%d" % port
    b = perf_run.start_broker(port, ["--connectionPoolSize", str(a.workers)] + a.broker_flags.split(), binary)
    res = {"alone": [], "scans": [], "scan_rps": [], "scan_non2xx": 0}
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
            res["scan_non2xx"] += non2xx(out)
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
    ap.add_argument("--csv", default=os.path.join(perf_run.ROOT, "test/perf/results/patch_p99.csv"))
    a = ap.parse_args()
    bins = a.bin or [perf_run.BIN]
    rows = []
    for binary in bins:
        ver = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
        commit = re.search(r"\(([0-9a-f]+)\)", ver)
        r = measure(binary, a)
        alone_p99 = statistics.median(x[1] for x in r["alone"])
        for load, runs in (("alone", r["alone"]), ("under %d scanning clients" % a.scanners, r["scans"])):
            p99 = statistics.median(x[1] for x in runs)
            path = os.path.abspath(binary)
            rows.append({"binary": os.path.relpath(path, perf_run.ROOT) if path.startswith(perf_run.ROOT + os.sep)
                         else path,
                         "commit": commit.group(1) if commit else "unknown",
                         "load": load,
                         "medianPatchP50us": round(statistics.median(x[0] for x in runs if x[0] is not None)),
                         "medianPatchP99us": round(p99),
                         "p99Runs": " ".join("%.0f" % x[1] for x in runs),
                         "p99VsAlone": "%.2f" % (p99 / alone_p99 if alone_p99 else 0),
                         "medianPatchesPerSecond": round(statistics.median(x[2] for x in runs)),
                         "patchRuns": " ".join("%.0f" % x[2] for x in runs),
                         "medianScansPerSecond": "%.1f" % statistics.median(r["scan_rps"]) if runs is r["scans"]
                         else "",
                         "scanRuns": " ".join("%.1f" % x for x in r["scan_rps"]) if runs is r["scans"] else "",
                         "patchNon2xx": sum(x[3] for x in runs),
                         "scanNon2xx": r["scan_non2xx"] if runs is r["scans"] else ""})
    tuneRun.write_csv(a.csv, rows, "test/perf/patch_p99.py", runs=a.runs, durationSeconds=a.duration,
                      entities=a.entities, scanners=a.scanners, connectionPoolSize=a.workers,
                      brokerFlags=a.broker_flags, patch="wrk -t1 -c4 -s patch.lua", scan="wrk -t1 -c%d GET %s"
                      % (a.scanners, SCAN))
    print("| " + " | ".join(rows[0]) + " |")
    print("|" + "---|" * len(rows[0]))
    for r in rows:
        print("| " + " | ".join(str(x) for x in r.values()) + " |")
    if any(r["patchNon2xx"] or r["scanNon2xx"] for r in rows):
        print("\nWARNING: some requests failed (non-2xx): those figures do not count")


if __name__ == "__main__":
    main()
