#!/usr/bin/env python3
"""offload_bench.py - what running the requests of tenants with registrations
off the HTTP workers costs, and what it buys (http_set_offload, --forwardThreads;
doc/architecture.md "No HTTP worker waits for a source").

One broker on one HTTP worker (--connectionPoolSize 1: what a one-core
machine gets by default, and where a waiting worker hurts most), perf_run's
Vehicles loaded in three tenants: `plain` has no registration; `hub` has
one with federationOps (the default: reads only) and `writer` one with
redirectionOps, each for one Parking, urn:ngsi-ld:Parking:remote, at a
source that the retrieves and PATCHes of Vehicles never ask.

  handoff:   wrk retrieves one entity in `plain`, then in `hub`, alternated:
             a read is handed to the pool only when it asks a source, so
             the hub/plain ratio is what a local read of a tenant with
             registrations pays (the registry's match, no hand-off); then
             PATCHes of one entity in `plain`, `hub` and `writer`: a write
             of a tenant with a registration that takes writes is handed
             over before its handler runs (writer/plain: the hand-off's
             price), one of a tenant whose registrations take none stays on
             its worker (hub/plain).
  isolation: wrk retrieves in `plain` with no forward under way, then while
             K clients keep queries of `hub` for type Parking waiting on a
             source that answers after 1 s, alternated; the ratio says how
             much the slow forwards hold back (before the pool: every
             request waited behind them on the one worker).

  python3 test/perf/offload_bench.py [--bin build/release/coraine] [--runs 5] [--duration 5]
                                     [--slow 4] [--csv test/perf/results/offload.csv]

A benchmark: it never fails. The rows go to --csv (with .meta.json) for
report.py's `offload` section of doc/performance.md.
"""
import argparse
import os
import statistics
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf_run  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tune"))
import tuneRun  # noqa: E402
sys.path.insert(0, os.path.join(perf_run.ROOT, "test", "functional"))
from mocksource import MockSource  # noqa: E402  (the source of the distributed tests)

ENTITY_ID = "urn:ngsi-ld:Vehicle:7"
ENTITY = "/ngsi-ld/v1/entities/" + ENTITY_ID
PATCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "patch_one.lua")


class SlowLoad:
    """k client threads, each sending the hub's forwarded query again as soon as it is answered."""
    def __init__(self, base, k):
        self.stop, self.answered = threading.Event(), 0
        self.threads = [threading.Thread(target=self.run, args=(base,), daemon=True) for _ in range(k)]
        for t in self.threads:
            t.start()

    def run(self, base):
        while not self.stop.is_set():
            rq = urllib.request.Request(base + "/ngsi-ld/v1/entities?type=Parking", headers={"NGSILD-Tenant": "hub"})
            with urllib.request.urlopen(rq, timeout=30) as r:
                r.read()
            self.answered += 1

    def close(self):
        self.stop.set()
        for t in self.threads:
            t.join(30)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--slow", type=int, default=4, help="clients keeping a slow forwarded query in flight")
    ap.add_argument("--entities", type=int, default=1000)
    ap.add_argument("--csv", default=os.path.join(perf_run.ROOT, "test/perf/results/offload.csv"))
    a = ap.parse_args()
    if a.bin:
        perf_run.BIN = a.bin
    src = MockSource(delay=1.0)    # answers [] after 1 s
    port = perf_run.free_port()
    base = "http://127.0.0.1:%d" % port
    p = perf_run.start_broker(port, ["--connectionPoolSize", "1", "--forwardTimeout", "10000"])
    rows = []
    try:
        perf_run.wait_up(base + "/version")
        for t in ("plain", "hub", "writer"):
            perf_run.load(base, a.entities, tenant=t)
        for t, ops in (("hub", None), ("writer", ["redirectionOps"])):
            reg = {"type": "ContextSourceRegistration",
                   "information": [{"entities": [{"id": "urn:ngsi-ld:Parking:remote", "type": "Parking"}]}],
                   "endpoint": src.base}
            if ops:
                reg["operations"] = ops
            perf_run.post(base + "/ngsi-ld/v1/csourceRegistrations", reg, tenant=t)

        def rate(tenant, write=False):
            if write:
                rps, non2xx, p99 = perf_run.wrk(base, a.duration, 8, 2, script=PATCH, args=[ENTITY_ID],
                                                headers=["NGSILD-Tenant: " + tenant])
            else:
                rps, non2xx, p99 = perf_run.wrk(base + ENTITY, a.duration, 8, 2, headers=["NGSILD-Tenant: " + tenant])
            return rps, p99, non2xx

        runs = {"plain": [], "hub": [], "plainw": [], "hubw": [], "writerw": [], "quiet": [], "slow": []}
        p99s = {k: [] for k in runs}
        bad = {k: 0 for k in runs}
        for _ in range(a.runs):
            for key, tenant, write in (("plain", "plain", False), ("hub", "hub", False),
                                       ("plainw", "plain", True), ("hubw", "hub", True), ("writerw", "writer", True)):
                rps, p99, n = rate(tenant, write)
                runs[key].append(rps), p99s[key].append(p99)
                bad[key] += n
            rps, p99, n = rate("plain")
            runs["quiet"].append(rps), p99s["quiet"].append(p99)
            bad["quiet"] += n
            load = SlowLoad(base, a.slow)
            time.sleep(0.3)
            rps, p99, n = rate("plain")
            load.close()
            runs["slow"].append(rps), p99s["slow"].append(p99)
            bad["slow"] += n
        what = {"plain": ("handoff", "retrieve, plain (no registration)", 0),
                "hub": ("handoff", "retrieve, hub (a registration the retrieve does not match: on the worker)", 0),
                "plainw": ("handoff", "PATCH, plain (no registration)", 0),
                "hubw": ("handoff", "PATCH, hub (registrations that take no writes: on the worker)", 0),
                "writerw": ("handoff", "PATCH, writer (a registration that takes writes: handed to the pool)", 0),
                "quiet": ("isolation", "plain, no forward under way", 0),
                "slow": ("isolation", "plain, %d forwards waiting 1 s on a source" % a.slow, a.slow)}
        for key, (measure, case, k) in what.items():
            ref = {"hub": "plain", "hubw": "plainw", "writerw": "plainw", "slow": "quiet"}.get(key, key)
            med = statistics.median(runs[key])
            rows.append({"measure": measure, "case": case, "slowForwards": k,
                         "medianRequestsPerSecond": round(med), "runs": " ".join("%.0f" % x for x in runs[key]),
                         "ratio": "%.3f" % (med / statistics.median(runs[ref])),
                         "medianP99us": round(statistics.median(x for x in p99s[key] if x is not None)),
                         "non2xx": bad[key]})
    finally:
        p.terminate()
        p.wait(20)
        src.close()
    tuneRun.write_csv(a.csv, rows, "test/perf/offload_bench.py", runs=a.runs, durationSeconds=a.duration)
    print("| measure | case | median requests/s | ratio | median p99 µs | non-2xx |")
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        print("| %s | %s | %d | %s | %d | %d |" % (r["measure"], r["case"], r["medianRequestsPerSecond"], r["ratio"],
                                                 r["medianP99us"], r["non2xx"]))


if __name__ == "__main__":
    main()
