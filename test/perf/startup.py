#!/usr/bin/env python3
"""startup.py - time to the first answer and RSS: an empty broker, and one recovering N entities from disk.

  python3 test/perf/startup.py [--bin build/release/coraine] [--entities 1000000] [--runs 3]
                               [--csv test/perf/results/startup.csv]

Empty: a fresh broker (corDB in RAM), from exec to the first 200 of GET /version.
Recovered: a broker on --dbDir loaded with N of perf_run's Vehicles through the
batch API, stopped, then started again on the same directory (a snapshot is
taken first, POST /admin/snapshot, so the start reads it and the log's tail);
the time to the first answer, the RSS then, and the entities it answers.
"""
import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf_run  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tune"))
import tuneRun  # noqa: E402


def first_answer(extra):
    port = perf_run.free_port()
    t0 = time.monotonic()
    p = perf_run.start_broker(port, extra)
    url = "http://127.0.0.1:%d/version" % port
    while True:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            break
        except Exception:
            if p.poll() is not None:
                raise RuntimeError("the broker exited with %d" % p.returncode)
            if time.monotonic() - t0 > 600:
                raise RuntimeError("no answer in 600 s")
            time.sleep(0.002)
    return p, port, time.monotonic() - t0


def count(port):
    req = urllib.request.Request("http://127.0.0.1:%d/ngsi-ld/v1/entities?type=Vehicle&count=true&limit=0" % port)
    with urllib.request.urlopen(req, timeout=60) as r:
        return int(r.headers.get("NGSILD-Results-Count", "-1"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin")
    ap.add_argument("--entities", type=int, default=1000000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--csv", default=os.path.join(perf_run.ROOT, "test/perf/results/startup.csv"))
    a = ap.parse_args()
    if a.bin:
        perf_run.BIN = a.bin
    rows = []
    for run in range(a.runs):
        p, port, secs = first_answer([])
        rows.append({"case": "empty", "entities": 0, "run": run + 1, "seconds": round(secs, 4),
                     "rssKiB": perf_run.rss_kib(p.pid), "answered": count(port)})
        p.terminate()
        p.wait()
    with tempfile.TemporaryDirectory(prefix="coraine-startup-") as d:
        p, port, _ = first_answer(["--dbDir", d])
        perf_run.load("http://127.0.0.1:%d" % port, a.entities)
        perf_run.post("http://127.0.0.1:%d/admin/snapshot" % port, {})
        while json.loads(urllib.request.urlopen("http://127.0.0.1:%d/admin/snapshot" % port).read())["running"]:
            time.sleep(0.2)
        p.terminate()
        p.wait()
        for run in range(a.runs):
            p, port, secs = first_answer(["--dbDir", d])
            rows.append({"case": "recovered", "entities": a.entities, "run": run + 1, "seconds": round(secs, 4),
                         "rssKiB": perf_run.rss_kib(p.pid), "answered": count(port)})
            p.terminate()
            p.wait()
    tuneRun.write_csv(a.csv, rows, "test/perf/startup.py")
    print("| case | entities | run | seconds to the first answer | RSS (MiB) | entities answered |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print("| %s | %d | %d | %.3f | %.1f | %d |" % (r["case"], r["entities"], r["run"], r["seconds"],
                                                     r["rssKiB"] / 1024, r["answered"]))


if __name__ == "__main__":
    main()
