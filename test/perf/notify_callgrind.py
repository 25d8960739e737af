#!/usr/bin/env python3
"""notify_callgrind.py - what notifying costs per write, in instructions.

Wall-clock ratios on the shared 2-core machine drift by 2x between runs; the
CPU a write and its notification take does not. For each --bin this starts
the broker under `valgrind --tool=callgrind` (tools/receiver outside it),
loads N Vehicles, then sends R PATCHes over one keep-alive connection (one
at a time: every change is its own notification, the worst case for
batching), first without a subscription and then with one on type Vehicle
that every PATCH notifies, and prints the instructions per PATCH of the
whole process and of the parts of the notification path (inclusive):

  store_deliver   the change stream on the writer (the diff, the hooks)
  on_changes      the matcher (index lookup, conditions, the job, the queue push)
  sender_main     the sender threads (batching, rendering, the hand-off)
  notify_render   the notification body
  httpc_loop      the HTTP client thread (httpc.c: the POSTs and their answers)
  loop_main       libcurl's multi thread (https:// and host names; an older build's only client)
  lane_attempted  the outcome of each POST (counts, the lane freed)

  python3 test/perf/notify_callgrind.py [--bin build/release/coraine ...] [--entities 1000] [--requests 2000]
"""
import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf_run  # noqa: E402

FUNCS = ("store_deliver", "on_changes", "sender_main", "notify_render", "httpc_loop", "loop_main", "lane_attempted")


def drive(port, n, r):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    h = {"Content-Type": "application/json"}
    for i in range(r):
        c.request("PATCH", "/ngsi-ld/v1/entities/urn:ngsi-ld:Vehicle:%d/attrs" % (i * 7919 % n),
                  json.dumps({"speed": {"type": "Property", "value": i % 120}}), h)
        c.getresponse().read()
    c.close()


def measure(binary, a, with_sub):
    out = tempfile.mktemp(prefix="callgrind.", dir="/tmp")
    port, rport = perf_run.free_port(), perf_run.free_port()
    base, rbase = "http://127.0.0.1:%d" % port, "http://127.0.0.1:%d" % rport
    receiver = os.path.join(os.path.dirname(binary), "tools", "receiver")
    rcv = subprocess.Popen([receiver, "--port", str(rport)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    b = perf_run.start_broker(port, (), binary, ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out])
    try:
        perf_run.wait_up(base + "/version", timeout=120)
        perf_run.wait_up(rbase + "/count")
        perf_run.load(base, a.entities)
        if with_sub:
            body = {"type": "Subscription", "entities": [{"type": "Vehicle"}],
                    "notification": {"endpoint": {"uri": rbase + "/n"}}}
            rq = urllib.request.Request(base + "/ngsi-ld/v1/subscriptions", data=json.dumps(body).encode(),
                                        method="POST", headers={"Content-Type": "application/json"})
            urllib.request.urlopen(rq, timeout=60).read()
        # the counts start here: zero them (callgrind_control) after the load
        subprocess.run(["callgrind_control", "-z", str(b.pid)], capture_output=True)
        drive(port, a.entities, a.requests)
        deadline = time.time() + 120
        while with_sub and time.time() < deadline:
            with urllib.request.urlopen(rbase + "/count", timeout=30) as r:
                if json.loads(r.read())["entities"] >= a.requests:
                    break
            time.sleep(0.2)
    finally:
        b.terminate()
        b.wait()
        rcv.terminate()
        rcv.wait()
    time.sleep(0.5)
    files = [f for f in os.listdir("/tmp") if f.startswith(os.path.basename(out))]
    total, res = 0, {f: 0 for f in FUNCS}
    for fn in files:
        path = os.path.join("/tmp", fn)
        ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
                             capture_output=True, text=True).stdout
        m = re.search(r"^\s*([\d,]+) \([^)]*\)\s+PROGRAM TOTALS", ann, re.M)
        total += int(m.group(1).replace(",", "")) if m else 0
        for f in FUNCS:
            m = re.search(r"^\s*([\d,]+) \([^)]*\)\s+\S*:%s\b" % f, ann, re.M)
            res[f] += int(m.group(1).replace(",", "")) if m else 0
        os.unlink(path)
    return total, res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", action="append")
    ap.add_argument("--entities", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=2000)
    a = ap.parse_args()
    print("command: %s" % " ".join(["python3", "test/perf/notify_callgrind.py"] + sys.argv[1:]))
    print("| binary | subscription | instr/PATCH (process) | %s |" % " | ".join(FUNCS))
    print("|---|---|---:|" + "---:|" * len(FUNCS))
    for binary in a.bin or [perf_run.BIN]:
        for with_sub in (False, True):
            total, r = measure(binary, a, with_sub)
            print("| %s | %s | %.0f | %s |" % (binary, "1, every PATCH notified" if with_sub else "none",
                                               total / a.requests,
                                               " | ".join("%.0f" % (r[f] / a.requests) for f in FUNCS)))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
