#!/usr/bin/env python3
"""notify_bench.py - notification throughput and the cost of notifying on writes.

Starts its own broker and tools/receiver on free loopback ports (a fresh pair
for every run), loads N Vehicles (perf_run.py's shape), then measures:

  writes    wrk -t2 -c16 PATCH of random Vehicles for --duration s, with no
            subscription and then with one subscription on type Vehicle that
            every write is due, alternated, --repeat times: requests/s (median,
            and each run), the ratio with / without, p50 and p99, the changes
            due, the notifications and entities tools/receiver got, dropped
  fanout    S subscriptions (S in --fanout) on ONE entity; wrk -t1 -c1 PATCHes
            that entity for --duration s (a closed loop offering far more than
            can be delivered: the queue fills, the rest is dropped and
            counted); the receiver's count and the broker's /statistics give
            delivered notifications per second (from the first PATCH to the
            last arrival), how many were dropped (queue full) or failed;
            medians of --repeat runs
  knee      an open-model driver offers PATCHes of that entity at fixed rates
            (--rates, per s) to --knee-subs subscriptions for --duration s:
            delivered / due and dropped at each rate, --knee-repeat runs; the
            knee is the highest rate every run delivered 100 % of with nothing
            dropped (allDelivered)

  python3 test/perf/notify_bench.py [--bin build/release/coraine] [--entities 1000] [--duration 4]
                                    [--phases writes,fanout,knee] [--repeat 3] [--fanout 1,50,500]
                                    [--knee-subs 50] [--rates 200,400,800,1200,1600] [--knee-repeat 1]
                                    [--broker-flags '...'] [--csv-dir test/perf/results]

The defaults are the runs of doc/performance.md's "Notifications (issue 12)";
all three phases take about 3 minutes on the project's 2-core machine
(writes ~40 s, fanout ~80 s, knee ~40 s; each run starts a fresh broker).
Each phase writes its rows, one line of its table each, to --csv-dir (with
.meta.json: commit, machine, load, the command), for report.py's sections
notify_writes, notify_fanout and notify_knee of doc/performance.md:
  notify_writes.csv  one row per case (no subscription, one subscription)
  notify_fanout.csv  one row per number of subscriptions
  notify_knee.csv    one row per offered rate
A phase not run leaves its file as it is. The same tables go to stdout.

A benchmark: slow figures never fail it (only a broker or a tool that fails
does); loopback only; bounded by --duration per run.
"""
import argparse
import contextlib
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "tune"))
import perf_run  # noqa: E402
import tuneRun  # noqa: E402

REPO = perf_run.ROOT
SCRIPT = "test/perf/notify_bench.py"
ENTITY = "urn:ngsi-ld:Vehicle:0"


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
        m = re.search(r"\s%s%%\s+([\d.]+)(us|ms|s)\b" % pct, out)
        lat[pct] = float(m.group(1)) * {"us": 1, "ms": 1000, "s": 1000000}[m.group(2)] if m else None
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return rps, total, lat, int(bad.group(1)) if bad else 0


def subscribe(base, uri, entities):
    st, _ = req("POST", base + "/ngsi-ld/v1/subscriptions",
                {"type": "Subscription", "entities": entities, "notification": {"endpoint": {"uri": uri}}})
    assert st == 201, st


def settle(rbase, quiet=0.5, timeout=120):
    """Wait until the receiver's count has not moved for `quiet` s; (count, time of the last change)."""
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
    take, up to what one client connection can send); (sent, seconds, non-2xx)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    t0, sent, bad = time.time(), 0, 0
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
        rs = c.getresponse()
        rs.read()
        bad += not 200 <= rs.status < 300
        sent += 1
    c.close()
    return sent, time.time() - t0, bad


def stats(base):
    return get(base + "/statistics")["notifications"]


def median(xs):
    return statistics.median(list(xs))


def print_table(title, rows):
    tuneRun.print_table(rows, title)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "release", "coraine"))
    ap.add_argument("--entities", type=int, default=1000)
    ap.add_argument("--duration", type=int, default=4, help="s of load per run, every phase")
    ap.add_argument("--phases", default="writes,fanout,knee", help="which phases to run")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each writes and fanout measurement (medians)")
    ap.add_argument("--fanout", default="1,50,500", help="numbers of subscriptions of the fanout phase")
    ap.add_argument("--knee-subs", type=int, default=50, help="subscriptions of the knee phase")
    ap.add_argument("--rates", default="200,400,800,1200,1600", help="PATCH/s offered in the knee phase")
    ap.add_argument("--knee-repeat", type=int, default=1, help="runs of each rate of the knee phase (medians)")
    ap.add_argument("--broker-flags", default="")
    ap.add_argument("--csv-dir", default=os.path.join(REPO, "test", "perf", "results"),
                    help="where notify_<phase>.csv (and .meta.json) go")
    a = ap.parse_args()
    phases = a.phases.split(",")
    unknown = set(phases) - {"writes", "fanout", "knee"}
    if unknown:
        ap.error("unknown phase(s): %s" % ", ".join(sorted(unknown)))
    receiver = os.path.join(os.path.dirname(a.bin), "tools", "receiver")
    patch1 = os.path.join(HERE, "patch_one.lua")
    patch = os.path.join(HERE, "patch.lua")
    meta = dict(entities=a.entities, brokerFlags=a.broker_flags, bin=os.path.relpath(os.path.abspath(a.bin), REPO))

    @contextlib.contextmanager
    def fresh():
        """A broker and a receiver of their own, N Vehicles loaded: (base, rbase, broker port)."""
        port, rport = perf_run.free_port(), perf_run.free_port()
        b = perf_run.start_broker(port, a.broker_flags.split(), binary=a.bin)
        r = subprocess.Popen([receiver, "--port", str(rport)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            base, rbase = "http://127.0.0.1:%d" % port, "http://127.0.0.1:%d" % rport
            perf_run.wait_up(base + "/version")
            perf_run.wait_up(rbase + "/count")
            perf_run.load(base, a.entities)
            yield base, rbase, port
        finally:
            perf_run.stop(b)
            perf_run.stop(r)

    def write(phase, rows, runs):
        path = os.path.join(a.csv_dir, "notify_%s.csv" % phase)
        tuneRun.write_csv(path, rows, SCRIPT, runs=runs, durationSeconds=a.duration, **meta)
        print("(%s: %s)" % (phase, path), file=sys.stderr)

    t_start = time.time()
    if "writes" in phases:
        t0 = time.time()
        res = {False: [], True: []}
        for _ in range(a.repeat):
            for with_sub in (False, True):
                with fresh() as (base, rbase, _):
                    if with_sub:
                        subscribe(base, rbase + "/n", [{"type": "Vehicle"}])
                    rps, total, lat, bad = wrk(base + "/", a.duration, 16, 2, patch, [str(a.entities)])
                    if with_sub:
                        settle(rbase)
                    cnt = get(rbase + "/count")
                    st = stats(base)
                    res[with_sub].append({"rps": rps, "p50": lat["50"], "p99": lat["99"], "due": st["due"],
                                          "notifications": cnt["notifications"], "entities": cnt["entities"],
                                          "dropped": st["droppedQueueFull"], "failed": st["failed"], "non2xx": bad})
        plain = median(x["rps"] for x in res[False])
        rows = []
        for case, with_sub in (("no subscription", False), ("1 subscription on type Vehicle (every write due)", True)):
            v = res[with_sub]
            med = median(x["rps"] for x in v)
            rows.append({"case": case, "subscriptions": int(with_sub),
                         "medianRequestsPerSecond": round(med), "runs": " ".join("%.0f" % x["rps"] for x in v),
                         "vsNoSubscription": "%.2f" % (med / plain if plain else 0),
                         "medianP50us": round(median(x["p50"] or 0 for x in v)),
                         "medianP99us": round(median(x["p99"] or 0 for x in v)),
                         "medianChangesDue": round(median(x["due"] for x in v)),
                         "medianNotificationsReceived": round(median(x["notifications"] for x in v)),
                         "medianEntitiesReceived": round(median(x["entities"] for x in v)),
                         "medianDroppedQueueFull": round(median(x["dropped"] for x in v)),
                         "failedNotifications": sum(x["failed"] for x in v),
                         "non2xx": sum(x["non2xx"] for x in v)})
        write("writes", rows, a.repeat)
        print_table("writes: wrk -t2 -c16 PATCH of random Vehicles (of %d) for %d s; medians of %d runs, alternated "
                    "(%.0f s)" % (a.entities, a.duration, a.repeat, time.time() - t0), rows)

    if "fanout" in phases:
        t0 = time.time()
        rows = []
        for s in [int(x) for x in a.fanout.split(",")]:
            runs = []
            for _ in range(a.repeat):
                with fresh() as (base, rbase, _):
                    for _ in range(s):
                        subscribe(base, rbase + "/n", [{"id": ENTITY, "type": "Vehicle"}])
                    t_first = time.time()
                    _, total, _, bad = wrk(base + "/", a.duration, 1, 1, patch1, [ENTITY])
                    n, t_last = settle(rbase)
                    st = stats(base)
                    runs.append({"rate": n / max(t_last - t_first, 1e-9), "patches": total, "due": st["due"],
                                 "delivered": n, "dropped": st["droppedQueueFull"], "failed": st["failed"],
                                 "non2xx": bad})
            rows.append({"subscriptions": s, "medianPatches": round(median(x["patches"] for x in runs)),
                         "medianNotificationsDue": round(median(x["due"] for x in runs)),
                         "medianNotificationsDelivered": round(median(x["delivered"] for x in runs)),
                         "medianDeliveredPerSecond": round(median(x["rate"] for x in runs)),
                         "runs": " ".join("%.0f" % x["rate"] for x in runs),
                         "medianDroppedQueueFull": round(median(x["dropped"] for x in runs)),
                         "failedNotifications": sum(x["failed"] for x in runs),
                         "non2xx": sum(x["non2xx"] for x in runs)})
        write("fanout", rows, a.repeat)
        print_table("fanout: one entity, S subscriptions, wrk -t1 -c1 PATCH for %d s; medians of %d runs (%.0f s)"
                    % (a.duration, a.repeat, time.time() - t0), rows)

    if "knee" in phases:
        t0 = time.time()
        rows = []
        for rate in [int(x) for x in a.rates.split(",")]:
            runs = []
            for _ in range(a.knee_repeat):
                with fresh() as (base, rbase, port):
                    for _ in range(a.knee_subs):
                        subscribe(base, rbase + "/n", [{"id": ENTITY, "type": "Vehicle"}])
                    sent, secs, bad = offer(port, ENTITY, rate, a.duration)
                    n, _ = settle(rbase)
                    st = stats(base)
                    runs.append({"sentRate": sent / max(secs, 1e-9), "due": st["due"], "delivered": n,
                                 "percent": 100.0 * n / max(st["due"], 1), "dropped": st["droppedQueueFull"],
                                 "failed": st["failed"], "non2xx": bad})
            rows.append({"offeredPatchesPerSecond": rate, "subscriptions": a.knee_subs,
                         "medianPatchesSentPerSecond": round(median(x["sentRate"] for x in runs)),
                         "medianNotificationsDue": round(median(x["due"] for x in runs)),
                         "medianNotificationsDelivered": round(median(x["delivered"] for x in runs)),
                         "medianDeliveredPercent": "%.1f" % median(x["percent"] for x in runs),
                         "runs": " ".join("%.1f" % x["percent"] for x in runs),
                         "medianDroppedQueueFull": round(median(x["dropped"] for x in runs)),
                         "failedNotifications": sum(x["failed"] for x in runs),
                         "non2xx": sum(x["non2xx"] for x in runs),
                         "allDelivered": "yes" if all(x["delivered"] >= x["due"] and not x["dropped"]
                                                      and not x["failed"] for x in runs) else "no"})
        write("knee", rows, a.knee_repeat)
        print_table("knee: %d subscriptions on one entity, PATCHes offered at a fixed rate for %d s; medians of %d "
                    "runs, runs = delivered %% of each (%.0f s)" % (a.knee_subs, a.duration, a.knee_repeat,
                                                                    time.time() - t0), rows)
        within = [r["offeredPatchesPerSecond"] for r in rows if r["allDelivered"] == "yes"]
        print("knee: %s" % ("%d PATCH/s offered, the highest rate delivered 100 %% with nothing dropped" % max(within)
                            if within else "no rate was delivered 100 % with nothing dropped"))
    print("(%.0f s in all)" % (time.time() - t_start), file=sys.stderr)


if __name__ == "__main__":
    main()
