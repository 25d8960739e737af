#!/usr/bin/env python3
"""notify_bench.py - notification throughput and the cost of notifying on writes.

Starts its own broker and tools/receiver on free loopback ports, loads N
Vehicles (perf_run.py's shape), then measures:

  fan-out   S subscriptions (S in --fanout, default 1,50,500) on ONE entity;
            wrk -t1 -c1 PATCHes that entity for --duration s; the receiver's
            count and the broker's /statistics give delivered notifications
            per second (from the first PATCH to the last arrival), and how
            many were dropped (queue full) or failed
  knee      an open-model driver offers PATCHes of that entity at fixed rates
            (--rates, per s) to --knee-subs subscriptions for --duration s:
            delivered / due and dropped at each rate; the knee is the highest
            rate delivered 100 % with nothing dropped
  writes    wrk -t2 -c16 PATCH of random Vehicles for --duration s, with no
            subscription and then with one subscription on type Vehicle that
            every write notifies; requests/s, p50 and p99 side by side

  python3 test/perf/notify_bench.py [--bin build/release/coraine] [--entities 1000]
                                    [--duration 5] [--fanout 1,50,500] [--broker-flags '...']
                                    [--phases fanout,knee,writes] [--repeat 3]

Benchmarks never fail CI; loopback only; bounded by --duration per phase.
"""
import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf_run  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))


def get(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read() or b"null")


def req(method, url, body=None):
    data = json.dumps(body).encode() if body is not None else None
    r = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(r, timeout=30) as resp:
        return resp.status, resp.headers


def wrk(url, duration, conns, threads, script, args):
    cmd = ["wrk", "-t%d" % threads, "-c%d" % conns, "-d%ds" % duration, "--latency", "-s", script, url, "--"] + args
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    total = int(re.search(r"(\d+) requests in", out).group(1))
    lat = {}
    for pct in ("50", "99"):
        m = re.search(r"\s%s%%\s+([\d.]+)(us|ms|s)" % pct, out)
        lat[pct] = float(m.group(1)) * {"us": 1, "ms": 1000, "s": 1000000}[m.group(2)] if m else None
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return rps, total, lat, int(bad.group(1)) if bad else 0


def subscribe(base, uri, entities):
    st, _ = req("POST", base + "/ngsi-ld/v1/subscriptions",
                {"type": "Subscription", "entities": entities, "notification": {"endpoint": {"uri": uri}}})
    assert st == 201


def settle(rbase, quiet=0.5, timeout=120):
    last, t_last = get(rbase + "/count")["notifications"], time.time()
    end = time.time() + timeout
    while time.time() < end:
        time.sleep(0.05)
        n = get(rbase + "/count")["notifications"]
        if n != last:
            last, t_last = n, time.time()
        elif time.time() - t_last > quiet:
            break
    return last, t_last


def offer(port, eid, rate, duration):
    """Open model: a PATCH every 1/rate s (on schedule, whatever the answers
    take, up to what one client connection can send); the number sent."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    t0, sent = time.time(), 0
    while True:
        due_at = t0 + sent / rate
        now = time.time()
        if due_at - t0 >= duration:
            break
        if due_at > now:
            time.sleep(due_at - now)
        c.request("PATCH", "/ngsi-ld/v1/entities/%s/attrs" % eid,
                  body='{"speed":{"type":"Property","value":%d}}' % sent,
                  headers={"Content-Type": "application/json"})
        c.getresponse().read()
        sent += 1
    return sent, time.time() - t0


def stats(base):
    return get(base + "/statistics")["notifications"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "release", "coraine"))
    ap.add_argument("--entities", type=int, default=1000)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--fanout", default="1,50,500")
    ap.add_argument("--broker-flags", default="")
    ap.add_argument("--knee-subs", type=int, default=50)
    ap.add_argument("--rates", default="100,200,400,800,1600")
    ap.add_argument("--phases", default="fanout,knee,writes", help="which phases to run")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each measurement (medians are printed)")
    a = ap.parse_args()
    phases = a.phases.split(",")
    receiver = os.path.join(os.path.dirname(a.bin), "tools", "receiver")
    patch1 = os.path.join(HERE, "patch_one.lua")
    patch = os.path.join(HERE, "patch.lua")

    def fresh():
        port, rport = perf_run.free_port(), perf_run.free_port()
        b = perf_run.start_broker(port, a.broker_flags.split(), binary=a.bin)
        r = subprocess.Popen([receiver, "--port", str(rport)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base, rbase = "http://127.0.0.1:%d" % port, "http://127.0.0.1:%d" % rport
        perf_run.wait_up(base + "/version")
        perf_run.wait_up(rbase + "/count")
        perf_run.load(base, a.entities)
        return b, r, base, rbase

    def median(v):
        v = sorted(v)
        return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2

    if "fanout" in phases:
        print("fan-out: one entity, S subscriptions, wrk -t1 -c1 PATCH for %d s (median of %d)" % (a.duration, a.repeat))
        print("%6s %10s %12s %14s %9s %8s   %s" % ("subs", "patches", "delivered", "delivered/s", "dropped", "failed",
                                                  "delivered/s of each run"))
        for s in [int(x) for x in a.fanout.split(",")]:
            runs = []
            for _ in range(a.repeat):
                b, r, base, rbase = fresh()
                try:
                    for _ in range(s):
                        subscribe(base, rbase + "/n", [{"id": "urn:ngsi-ld:Vehicle:0", "type": "Vehicle"}])
                    t0 = time.time()
                    _, total, _, _ = wrk(base + "/", a.duration, 1, 1, patch1, ["urn:ngsi-ld:Vehicle:0"])
                    n, t_last = settle(rbase)
                    st = stats(base)
                    runs.append((n / max(t_last - t0, 1e-9), total, n, st["droppedQueueFull"], st["failed"]))
                finally:
                    b.terminate(); r.terminate(); b.wait(); r.wait()
            m = sorted(runs)[len(runs) // 2]
            print("%6d %10d %12d %14.0f %9d %8d   %s" % (s, m[1], m[2], m[0], m[3], m[4],
                                                      " ".join("%.0f" % x[0] for x in runs)))

    if "knee" in phases:
        print("\nknee: %d subscriptions on one entity, PATCHes offered at a fixed rate for %d s" % (a.knee_subs, a.duration))
        print("%8s %8s %10s %12s %10s %9s" % ("rate/s", "sent", "due", "delivered", "delivered%", "dropped"))
        for rate in [int(x) for x in a.rates.split(",")]:
            b, r, base, rbase = fresh()
            try:
                for _ in range(a.knee_subs):
                    subscribe(base, rbase + "/n", [{"id": "urn:ngsi-ld:Vehicle:0", "type": "Vehicle"}])
                sent, _ = offer(int(base.rsplit(":", 1)[1]), "urn:ngsi-ld:Vehicle:0", rate, a.duration)
                n, _ = settle(rbase)
                st = stats(base)
                print("%8d %8d %10d %12d %9.1f%% %9d" % (rate, sent, st["due"], n, 100.0 * n / max(st["due"], 1),
                                                        st["droppedQueueFull"]))
            finally:
                b.terminate(); r.terminate(); b.wait(); r.wait()

    if "writes" in phases:
        print("\nwrites: wrk -t2 -c16 PATCH of random Vehicles (of %d) for %d s; medians of %d runs, alternated"
              % (a.entities, a.duration, a.repeat))
        res = {False: [], True: []}
        for _ in range(a.repeat):
            for with_sub in (False, True):
                b, r, base, rbase = fresh()
                try:
                    if with_sub:
                        subscribe(base, rbase + "/n", [{"type": "Vehicle"}])
                    rps, total, lat, bad = wrk(base + "/", a.duration, 16, 2, patch, [str(a.entities)])
                    n, _ = settle(rbase) if with_sub else (0, 0)
                    ents = get(rbase + "/count")["entities"]
                    st = stats(base)
                    res[with_sub].append((rps, lat["50"] or 0, lat["99"] or 0, n, ents, st["droppedQueueFull"]))
                finally:
                    b.terminate(); r.terminate(); b.wait(); r.wait()
        print("%-26s %10s %9s %9s %14s %14s %8s   %s" % ("", "req/s", "p50 µs", "p99 µs", "notifications",
                                                         "entities sent", "dropped", "req/s of each run"))
        for label, with_sub in (("no subscription", False), ("1 subscription (all)", True)):
            v = res[with_sub]
            print("%-26s %10.0f %9.0f %9.0f %14d %14d %8d   %s" % (
                label, median([x[0] for x in v]), median([x[1] for x in v]), median([x[2] for x in v]),
                median([x[3] for x in v]), median([x[4] for x in v]), median([x[5] for x in v]),
                " ".join("%.0f" % x[0] for x in v)))
        print("ratio (1 subscription / none): %.2fx" % (median([x[0] for x in res[True]]) /
                                                        max(median([x[0] for x in res[False]]), 1)))


if __name__ == "__main__":
    main()
