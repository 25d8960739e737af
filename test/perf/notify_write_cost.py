#!/usr/bin/env python3
"""notify_write_cost.py - what matching costs the writer (issue 12).

PATCH of random Vehicles (patch.lua, wrk -t2 -c16 for --duration seconds, N
Vehicles loaded, perf_run.py's shape), a fresh broker per case, in three
cases alternated --runs times:
  none     no subscription
  qNever   one subscription on type Vehicle whose q (speed>1000) never
           matches: every write is matched, none is due
  dropped  one subscription on type Vehicle with --notifierQueueSize 1 and a
           receiver that never answers (tools/receiver --never): every write
           is matched and due, its job made and dropped at once (queue full),
           nothing is delivered
Per case: the median requests/s and the runs, the ratio to `none`, the
median p99, the broker's CPU microseconds per request (user+system from
/proc over the wrk run: the figure to read on a shared machine), the
notifications due and dropped (the broker's /statistics, summed over the
runs) and the non-2xx answers.

  python3 test/perf/notify_write_cost.py [--bin build/release/coraine] [--runs 5] [--duration 4]
                                         [--entities 1000] [--csv test/perf/results/notify_write_cost.csv]

A benchmark: it never fails on slow figures. The rows go to --csv (with
.meta.json) for report.py; a markdown table goes to stdout.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import perf_run  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "tune"))
import tuneRun  # noqa: E402

CASES = (("none", "no subscription", [], None),
         ("qNever", "1 subscription, q never true (every write matched, none due)", [], "q"),
         ("dropped", "1 subscription, every notification dropped (queue 1, receiver never answers)",
          ["--notifierQueueSize", "1"], "dead"))


def subscribe(base, uri, extra=None):
    body = {"type": "Subscription", "entities": [{"type": "Vehicle"}], "notification": {"endpoint": {"uri": uri}}}
    body.update(extra or {})
    perf_run.post(base + "/ngsi-ld/v1/subscriptions", body)


def notifications(base):
    with urllib.request.urlopen(base + "/statistics", timeout=10) as r:
        n = json.loads(r.read())["notifications"]
    return n.get("due", 0), sum(v for k, v in n.items() if k.startswith("dropped"))


def one(a, receiver, flags, mode):
    """One case on a fresh broker: (wrk_full's result, broker CPU s, notifications due, dropped)."""
    port, rport = perf_run.free_port(), perf_run.free_port()
    p = perf_run.start_broker(port, flags)
    r = subprocess.Popen([receiver, "--port", str(rport)] + (["--never"] if mode == "dead" else []),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = "http://127.0.0.1:%d" % port
    try:
        perf_run.wait_up(base + "/version")
        time.sleep(0.2)
        perf_run.load(base, a.entities)
        uri = "http://127.0.0.1:%d/notify" % rport
        if mode == "q":
            subscribe(base, uri, {"q": "speed>1000"})
        elif mode == "dead":
            subscribe(base, uri)
        due0, drop0 = notifications(base)
        c0 = tuneRun.cpu_seconds(p.pid)
        res = perf_run.wrk_full(base + "/", a.duration, 16, 2, os.path.join(HERE, "patch.lua"), [str(a.entities)])
        cpu = tuneRun.cpu_seconds(p.pid) - c0
        due1, drop1 = notifications(base)
        return res, cpu, due1 - due0, drop1 - drop0
    finally:
        r.kill()            # first: with a receiver that never answers the broker's senders wait on it
        r.wait()
        perf_run.stop(p, 10)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", help="the broker binary (default build/release/coraine)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=int, default=4, help="seconds of wrk per case and run")
    ap.add_argument("--entities", type=int, default=1000, help="Vehicles loaded, PATCHed at random")
    ap.add_argument("--csv", default=os.path.join(perf_run.ROOT, "test/perf/results/notify_write_cost.csv"))
    a = ap.parse_args()
    if a.bin:
        perf_run.BIN = a.bin
    receiver = os.path.join(os.path.dirname(os.path.abspath(perf_run.BIN)), "tools", "receiver")
    if not os.path.exists(receiver):
        receiver = os.path.join(perf_run.ROOT, "build/release/tools/receiver")
    got = {key: [] for key, _, _, _ in CASES}
    for _ in range(a.runs):
        for key, _, flags, mode in CASES:
            got[key].append(one(a, receiver, flags, mode))
    ref = statistics.median(x[0]["rps"] for x in got["none"])
    rows = []
    for key, case, _, _ in CASES:
        vs = got[key]
        med = statistics.median(x[0]["rps"] for x in vs)
        p99 = [x[0]["p99us"] for x in vs if x[0]["p99us"] is not None]
        rows.append({"case": case,
                     "medianRequestsPerSecond": round(med),
                     "runs": " ".join("%.0f" % x[0]["rps"] for x in vs),
                     "vsNoSubscription": "%.2f" % (med / ref if ref else 0),
                     "medianP99us": round(statistics.median(p99)) if p99 else "",
                     "brokerCpuUsPerRequest": "%.1f" % statistics.median(
                         x[1] / max(1, x[0]["requests"]) * 1e6 for x in vs),
                     "notificationsDue": sum(x[2] for x in vs),
                     "notificationsDropped": sum(x[3] for x in vs),
                     "non2xx": sum(x[0]["non2xx"] for x in vs)})
    tuneRun.write_csv(a.csv, rows, "test/perf/notify_write_cost.py", runs=a.runs, durationSeconds=a.duration,
                      entities=a.entities, wrk="wrk -t2 -c16 -s patch.lua")
    print("| " + " | ".join(rows[0]) + " |")
    print("|" + "---|" * len(rows[0]))
    for r in rows:
        print("| " + " | ".join(str(x) for x in r.values()) + " |")
    if any(r["non2xx"] for r in rows):
        print("\nWARNING: some PATCHes failed (non-2xx): those figures do not count")


if __name__ == "__main__":
    main()
