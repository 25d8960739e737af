#!/usr/bin/env python3
"""perf_run.py - coraine's request benchmarks, side by side in one run.

Shapes (wrk with Lua scripts on loopback, keep-alive); the default set is every
one the issue names (ALL_SHAPES):
  trivial   GET on the trivial libmicrohttpd responder (the ceiling of a
            one-entity answer and of the writes)
  trivial20 the same responder answering an array of 20 entities: the
            ceiling of a query page (the same bytes on the wire)
  create    POST /ngsi-ld/v1/entities (a new Vehicle per request, create.lua)
  batch_create  POST /entityOperations/create of 20 new Vehicles (create.lua 20)
  retrieve  GET /ngsi-ld/v1/entities/{id}
  query     GET /ngsi-ld/v1/entities?type=Vehicle&q=speed>50&limit=20 over N entities
  patch     PATCH /entities/{one of the N}/attrs (Update Attributes, patch_attrs.lua)
  patch_notify  the same on 1,000 Trackers, one subscription on type Tracker:
            every write notifies tools/receiver (due and received counted)
  merge     PATCH /entities/{one of the N} (Merge Entity, 5.6.17; patch.lua)
  temporal  GET /ngsi-ld/v1/temporal/entities/{id}?lastN=10 on a broker with
            --history corDB (21 instances of speed)
  fwd_http, fwd_cor  the query page asked of A in fwd_chain.py's three-broker
            chain A -> B -> C, the registrations over http:// and over cor://
Others, on request: join / join_inline (join=inline, 4.5.23), query_ldjson
(Accept: application/ld+json), query_nocache / retrieve_nocache (a second
broker with --renderCache 0), orderby (orderBy=speed;desc, 4.23),
orderby_patched (a PATCH and the ordered page in turn).

The shapes are alternated RUNS times, so the machine's drift spreads over
all of them; the report gives the median requests/s of each, its spread, p50
and p99 (medians over the runs), the non-2xx count, the CPU seconds of the
processes that served it (utime+stime from /proc: the chain's three brokers
for fwd_*) and their peak RSS (VmHWM after its last run: the process's peak
so far, loading included). With --csv the trivial responders join the run
and each shape's ceiling column is its responder's median from the same run.

  python3 test/perf/perf_run.py [--runs 3] [--duration 10] [--entities 10000] [--csv build/perf/perf_run.csv]
  python3 test/perf/perf_run.py --memory 100000,1000000 [--memory-csv test/perf/results/memory.csv]
  python3 test/perf/perf_run.py --broker-flags '--renderCache 0'   (every read renders)
  python3 test/perf/perf_run.py --bin /tmp/base/build/release/coraine --shapes retrieve,query,patch

--memory N,...: resident bytes per entity of the Vehicle shape (4 attributes,
one with observedAt and a sub-attribute, one GeoProperty), measured on a
fresh broker as (RSS after loading N entities - RSS before) / (N - 1) (the
first Vehicle and 50 Parkings are loaded before "before", to warm the tenant
and the interned names; the rest in batch creates of 1,000); one row per
count (entities, RSS before and after in MiB, bytes per entity) to
--memory-csv (default test/perf/results/memory.csv, with .meta.json) for
report.py, and a markdown table to stdout.
"""
import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, "build/release/coraine")
TRIVIAL = os.path.join(ROOT, "build/release/perf/trivial_responder")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_up(url, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except Exception:
            time.sleep(0.05)
    raise RuntimeError("server at %s did not come up" % url)


def vehicle(i):
    return {
        "id": "urn:ngsi-ld:Vehicle:%d" % i,
        "type": "Vehicle",
        "speed": {"type": "Property", "value": i % 120, "observedAt": "2024-01-01T00:00:00Z",
                  "accuracy": {"type": "Property", "value": 0.5}},
        "location": {"type": "GeoProperty",
                     "value": {"type": "Point", "coordinates": [round(-3.7 + (i % 1000) / 10000.0, 6), 40.4]}},
        "isParked": {"type": "Relationship", "object": "urn:ngsi-ld:Parking:%d" % (i % 50)},
        "brand": {"type": "Property", "value": "Mercedes"},
    }


def parking(i):
    return {"id": "urn:ngsi-ld:Parking:%d" % i, "type": "Parking",
            "name": {"type": "Property", "value": "Parking %d" % i},
            "spots": {"type": "Property", "value": 100 + i}}


def post(url, body, tenant=None):
    h = {"Content-Type": "application/json"}
    if tenant:
        h["NGSILD-Tenant"] = tenant
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers=h)
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.status


def load(base, n, chunk=1000, tenant=None):
    post(base + "/ngsi-ld/v1/entityOperations/create", [parking(i) for i in range(50)], tenant)
    for start in range(0, n, chunk):
        post(base + "/ngsi-ld/v1/entityOperations/create",
             [vehicle(i) for i in range(start, min(n, start + chunk))], tenant)


PIN_SERVER, PIN_LOAD = [], []   # taskset prefixes, set by --pin


def start_broker(port, extra=(), binary=None, prefix=()):
    """The broker (BIN unless `binary`) on 127.0.0.1:port; prefix: e.g. valgrind's command."""
    return subprocess.Popen(PIN_SERVER + list(prefix) + [binary or BIN, "-fg", "--port", str(port), "--bind",
                             "127.0.0.1", "--logLevel", "warn", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop(p, timeout=20):
    """A process started here (a broker, a receiver) terminated, killed if it does not end within timeout s."""
    p.terminate()
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def wrk_full(url, duration, conns, threads, script=None, args=(), headers=()):
    """One wrk run: {rps, requests, non2xx, p50us, p99us} (latencies None when wrk printed none)."""
    cmd = PIN_LOAD + ["wrk", "-t%d" % threads, "-c%d" % conns, "-d%ds" % duration, "--latency"]
    for h in headers:
        cmd += ["-H", h]
    if script:
        cmd += ["-s", script]
    out = subprocess.run(cmd + [url] + (["--"] + list(args) if args else []), capture_output=True,
                         text=True, check=True).stdout
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    res = {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
           "requests": int(re.search(r"(\d+) requests in", out).group(1)),
           "non2xx": int(bad.group(1)) if bad else 0}
    for pct in ("50", "99"):
        m = re.search(r"\s%s%%\s+([\d.]+)(us|ms|s)\b" % pct, out)
        res["p%sus" % pct] = float(m.group(1)) * {"us": 1, "ms": 1000, "s": 1000000}[m.group(2)] if m else None
    return res


def wrk(url, duration, conns, threads, script=None, args=(), headers=()):
    """wrk_full's requests/s, non-2xx count and p99 (µs)."""
    r = wrk_full(url, duration, conns, threads, script, args, headers)
    return r["rps"], r["non2xx"], r["p99us"]


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def memory(counts, csv_path):
    sys.path.insert(0, os.path.join(ROOT, "test/perf/tune"))
    import tuneRun
    rows = []
    print("| entities | RSS before (MiB) | RSS after (MiB) | bytes per entity |")
    print("|---:|---:|---:|---:|")
    for n in counts:
        port = free_port()
        b = start_broker(port)
        try:
            base = "http://127.0.0.1:%d" % port
            wait_up(base + "/version")
            load(base, 1)          # warm the tenant and the interned names
            time.sleep(0.2)
            before = rss_kib(b.pid)
            for start in range(1, n, 1000):
                post(base + "/ngsi-ld/v1/entityOperations/create",
                     [vehicle(i) for i in range(start, min(n, start + 1000))])
            time.sleep(0.5)
            after = rss_kib(b.pid)
            print("| %d | %.1f | %.1f | %.0f |" % (n, before / 1024, after / 1024, (after - before) * 1024 / (n - 1)))
            rows.append({"entities": n, "rssBeforeMiB": "%.1f" % (before / 1024),
                         "rssAfterMiB": "%.1f" % (after / 1024),
                         "bytesPerEntity": "%.0f" % ((after - before) * 1024 / (n - 1))})
        finally:
            b.terminate()
            b.wait()
    tuneRun.write_csv(csv_path, rows, "test/perf/perf_run.py", shape="Vehicle (perf_run.vehicle)",
                      batchSize=1000)


ALL_SHAPES = "trivial,trivial20,create,batch_create,retrieve,query,patch,patch_notify,merge,temporal,fwd_http,fwd_cor"
PAGE = "/ngsi-ld/v1/entities?type=Vehicle&q=speed%3E50&limit=20"
TRACKERS = 1000          # patch_notify's entities: type Tracker, one subscription on the type


def lua(name):
    return os.path.join(ROOT, "test/perf", name)


def stats(base):
    with urllib.request.urlopen(base + "/statistics", timeout=10) as r:
        return json.loads(r.read())["notifications"]


def received(rbase):
    """(notifications, entities in them) the receiver counted: the broker may send several due
    changes of a subscription in one notification."""
    with urllib.request.urlopen(rbase + "/count", timeout=10) as r:
        c = json.loads(r.read())
    return c["notifications"], c["entities"]


def dropped(st):
    return sum(v for k, v in st.items() if k.startswith("dropped"))


def settle(base, timeout=15):
    """Wait until the broker's notification queue is empty (at most timeout s)."""
    end = time.time() + timeout
    while time.time() < end and stats(base)["queued"]:
        time.sleep(0.1)


class Servers:
    """The processes the chosen shapes need, started once and shared by the runs:
    main (default flags), nocache (--renderCache 0), hist (--history corDB),
    the three-broker chain (fwd_chain.py), the trivial responders and the
    notification receiver (tools/receiver)."""

    def __init__(self, shapes, a):
        self.procs, self.chain, self.urls = [], [], {}
        flags = a.broker_flags.split()

        def broker(extra=()):
            port = free_port()
            p = start_broker(port, flags + list(extra))
            self.procs.append(p)
            base = "http://127.0.0.1:%d" % port
            wait_up(base + "/version")
            return p, base

        def responder(n):
            port = free_port()
            p = subprocess.Popen(PIN_SERVER + [TRIVIAL, str(port)] + (["0", str(n)] if n else []),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.procs.append(p)
            wait_up("http://127.0.0.1:%d/" % port)
            return p, "http://127.0.0.1:%d" % port

        main_shapes = {"retrieve", "query", "create", "batch_create", "patch", "patch_notify", "merge", "join",
                       "join_inline", "query_ldjson", "orderby", "orderby_patched"}
        self.main = self.nocache = self.hist = self.receiver = None
        if main_shapes & set(shapes):
            self.main = broker()
            load(self.main[1], a.entities)
        if "patch_notify" in shapes:
            rport = free_port()
            rbin = os.path.join(os.path.dirname(BIN), "tools", "receiver")
            if not os.path.exists(rbin):
                rbin = os.path.join(ROOT, "build/release/tools/receiver")
            r = subprocess.Popen(PIN_SERVER + [rbin, "--port", str(rport)], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
            self.procs.append(r)
            self.receiver = "http://127.0.0.1:%d" % rport
            wait_up(self.receiver + "/count")
            base = self.main[1]
            for start in range(0, TRACKERS, 500):
                post(base + "/ngsi-ld/v1/entityOperations/create",
                     [{"id": "urn:ngsi-ld:Tracker:%d" % k, "type": "Tracker",
                       "speed": {"type": "Property", "value": k}} for k in range(start, min(TRACKERS, start + 500))])
            post(base + "/ngsi-ld/v1/subscriptions",
                 {"type": "Subscription", "entities": [{"type": "Tracker"}],
                  "notification": {"endpoint": {"uri": self.receiver + "/notify"}}})
        if any(s.endswith("_nocache") for s in shapes):
            self.nocache = broker(["--renderCache", "0"])
            load(self.nocache[1], a.entities)
        if "temporal" in shapes and "--history" in flags and self.main:
            self.hist = self.main             # the flags give the main broker a history (pgoTrain.sh)
        elif "temporal" in shapes:
            self.hist = broker(["--history", "corDB"])
            load(self.hist[1], min(a.entities, 1000))
        if "temporal" in shapes:
            for k in range(20):               # 21 instances of speed: lastN=10 answers 10
                req = urllib.request.Request(
                    self.hist[1] + "/ngsi-ld/v1/entities/urn:ngsi-ld:Vehicle:1/attrs", method="PATCH",
                    data=json.dumps({"speed": {"type": "Property", "value": k}}).encode(),
                    headers={"Content-Type": "application/json"})
                urllib.request.urlopen(req, timeout=10).read()
        if "fwd_http" in shapes or "fwd_cor" in shapes:
            import fwd_chain
            self.chain = fwd_chain.chain(BIN, min(a.entities, 2000))
        self.trivial = responder(0) if "trivial" in shapes else None
        self.trivial20 = responder(20) if "trivial20" in shapes else None

    def shape(self, s, entities):
        """(url, script, script args, headers, the processes whose CPU and RSS it costs)."""
        m = self.main[1] if self.main else None
        mp = [self.main[0].pid] if self.main else []
        if s == "trivial":
            return self.trivial[1] + "/ngsi-ld/v1/entities/urn:ngsi-ld:Vehicle:1", None, (), (), [self.trivial[0].pid]
        if s == "trivial20":
            return self.trivial20[1] + "/ngsi-ld/v1/entities?type=Vehicle", None, (), (), [self.trivial20[0].pid]
        if s in ("fwd_http", "fwd_cor"):
            import fwd_chain
            return (self.chain[0].base + fwd_chain.PAGE, None, (),
                    ("NGSILD-Tenant: " + fwd_chain.TENANTS[s[4:]],), [b.proc.pid for b in self.chain])
        if s == "temporal":
            return (self.hist[1] + "/ngsi-ld/v1/temporal/entities/urn:ngsi-ld:Vehicle:1?lastN=10", None, (), (),
                    [self.hist[0].pid])
        if s.endswith("_nocache"):
            u = PAGE if s == "query_nocache" else "/ngsi-ld/v1/entities/urn:ngsi-ld:Vehicle:1"
            return self.nocache[1] + u, None, (), (), [self.nocache[0].pid]
        n = str(entities)
        table = {
            "retrieve": (m + "/ngsi-ld/v1/entities/urn:ngsi-ld:Vehicle:1", None, ()),
            "query": (m + PAGE, None, ()),
            "create": (m + "/ngsi-ld/v1/entities", lua("create.lua"), ()),
            "batch_create": (m + "/", lua("create.lua"), ("20",)),
            "patch": (m + "/", lua("patch_attrs.lua"), (n,)),
            "patch_notify": (m + "/", lua("patch_attrs.lua"), (str(TRACKERS), "urn:ngsi-ld:Tracker:")),
            "merge": (m + "/", lua("patch.lua"), (n,)),
            "join": (m + PAGE + "&join=inline", None, ()),
            "join_inline": (m + PAGE + "&join=inline", None, ()),
            "query_ldjson": (m + PAGE, None, ()),
            "orderby": (m + "/ngsi-ld/v1/entities?type=Vehicle&orderBy=speed%3Bdesc&limit=20", None, ()),
            "orderby_patched": (m + "/", lua("orderby_patched.lua"), (n,)),
        }
        url, script, args = table[s]
        headers = ("Accept: application/ld+json",) if s == "query_ldjson" else ()
        return url, script, args, headers, mp

    def stop(self):
        for b in self.chain:
            b.stop()
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait()


# the ceiling of each shape: the trivial responder answering the same number of entities
CEILING = {"query": "trivial20", "fwd_http": "trivial20", "fwd_cor": "trivial20", "join": "trivial20",
           "join_inline": "trivial20", "query_ldjson": "trivial20", "query_nocache": "trivial20",
           "orderby": "trivial20"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--entities", type=int, default=10000)
    ap.add_argument("--shapes", default=ALL_SHAPES)
    ap.add_argument("--csv", help="write one line per shape here (and CSV.meta.json); the trivial responders "
                    "join the shapes as the ceiling column")
    ap.add_argument("--memory", help="comma-separated entity counts: measure bytes per entity instead")
    ap.add_argument("--memory-csv", default=os.path.join(ROOT, "test/perf/results/memory.csv"),
                    help="--memory's rows go here (and CSV.meta.json)")
    ap.add_argument("--broker-flags", default="", help="extra broker flags, e.g. '--renderCache 0'")
    ap.add_argument("--bin", help="the broker binary (default build/release/coraine)")
    ap.add_argument("--pin", default="", help="SERVER_CPUS:LOAD_CPUS, e.g. 0:1 (taskset lists): the servers "
                    "and wrk on their own cores, for steadier figures")
    a = ap.parse_args()
    if a.bin:
        global BIN
        BIN = a.bin
    if a.pin:
        srv, load_cpus = a.pin.split(":")
        PIN_SERVER[:] = ["taskset", "-c", srv]
        PIN_LOAD[:] = ["taskset", "-c", load_cpus]
    if a.memory:
        memory([int(x) for x in a.memory.split(",")], a.memory_csv)
        return
    sys.path.insert(0, os.path.join(ROOT, "test/perf/tune"))
    import tuneRun

    shapes = a.shapes.split(",")
    if a.csv:
        for c in sorted({CEILING.get(s, "trivial") for s in shapes} - set(shapes)):
            shapes.insert(0, c)
    srv = Servers(shapes, a)
    try:
        res = {s: [] for s in shapes}
        cpu = {s: 0.0 for s in shapes}
        rss = {s: 0 for s in shapes}
        notified = {s: [0, 0, 0, 0] for s in shapes}    # due, notifications and entities received, dropped
        for run in range(a.runs):
            for s in shapes:
                url, script, args, headers, pids = srv.shape(s, a.entities)
                if s == "patch_notify":
                    st0, got0 = stats(srv.main[1]), received(srv.receiver)
                c0 = sum(tuneRun.cpu_seconds(p) for p in pids)
                r = wrk_full(url, a.duration, a.connections, a.threads, script, args, headers)
                if s == "patch_notify":
                    settle(srv.main[1])
                    st1, got1 = stats(srv.main[1]), received(srv.receiver)
                    notified[s][0] += st1["due"] - st0["due"]
                    notified[s][1] += got1[0] - got0[0]
                    notified[s][2] += got1[1] - got0[1]
                    notified[s][3] += dropped(st1) - dropped(st0)
                cpu[s] += sum(tuneRun.cpu_seconds(p) for p in pids) - c0
                rss[s] = sum(tuneRun.peak_rss_kib(p) for p in pids)
                res[s].append(r)
                print("run %d %-12s %10.0f req/s  non-2xx %d  p99 %s us" % (run + 1, s, r["rps"], r["non2xx"],
                                                                           r["p99us"]), file=sys.stderr)
        med = {s: statistics.median(r["rps"] for r in res[s]) for s in shapes}

        def mid(s, k):
            v = [r[k] for r in res[s] if r[k] is not None]
            return statistics.median(v) if v else 0

        rows = []
        for s in shapes:
            xs = [r["rps"] for r in res[s]]
            n = sum(r["requests"] for r in res[s])
            ceil = CEILING.get(s, "trivial") if not s.startswith("trivial") else ""
            rows.append({"shape": s, "runs": len(xs), "rpsMedian": round(med[s]),
                         "rpsSpreadPct": round((max(xs) - min(xs)) / 2 / med[s] * 100, 1) if med[s] else 0,
                         "rpsRuns": ";".join("%.0f" % x for x in xs),
                         "p50us": round(mid(s, "p50us")), "p99us": round(mid(s, "p99us")),
                         "non2xx": sum(r["non2xx"] for r in res[s]), "requests": n,
                         "cpuSeconds": round(cpu[s], 2), "cpuUsPerRequest": round(cpu[s] / n * 1e6, 1) if n else 0,
                         "peakRssKiB": rss[s], "ceilingShape": ceil,
                         "ceilingRps": round(med[ceil]) if ceil in med else "",
                         "ofCeiling": round(med[s] / med[ceil], 3) if ceil in med and med[ceil] else "",
                         "notificationsDue": notified[s][0] if s == "patch_notify" else "",
                         "notificationsReceived": notified[s][1] if s == "patch_notify" else "",
                         "entitiesReceived": notified[s][2] if s == "patch_notify" else "",
                         "notificationsDropped": notified[s][3] if s == "patch_notify" else ""})
        print("| shape | median requests/s | spread | runs | p50 (µs) | p99 (µs) | non-2xx | CPU µs/request "
              "| peak RSS (MiB) | of the ceiling |")
        print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            print("| %s | %d | ±%s %% | %s | %d | %d | %d | %s | %.1f | %s |" % (
                r["shape"], r["rpsMedian"], r["rpsSpreadPct"], r["rpsRuns"].replace(";", ", "), r["p50us"],
                r["p99us"], r["non2xx"], r["cpuUsPerRequest"], r["peakRssKiB"] / 1024,
                "%s of %s" % (r["ofCeiling"], r["ceilingShape"]) if r["ofCeiling"] != "" else ""))
        print()
        for s in ("query", "create", "batch_create", "join", "join_inline", "query_ldjson", "query_nocache",
                  "orderby", "patch", "merge", "patch_notify", "orderby_patched"):
            if s in med and "retrieve" in med:
                print("- %s / retrieve: %.2f" % (s, med[s] / med["retrieve"]))
        if "retrieve_nocache" in med and "query_nocache" in med:
            print("- query_nocache / retrieve_nocache (both --renderCache 0): %.2f"
                  % (med["query_nocache"] / med["retrieve_nocache"]))
        if "fwd_http" in med and "fwd_cor" in med:
            print("- fwd_cor / fwd_http: %.2f" % (med["fwd_cor"] / med["fwd_http"]))
        if "patch_notify" in notified and notified["patch_notify"][0]:
            print("- patch_notify: %d changes due, %d notifications received carrying %d entities, %d dropped"
                  % tuple(notified["patch_notify"]))
        if any(r["non2xx"] for r in rows):
            print("\nWARNING: some requests failed (non-2xx): those figures do not count")
        if a.csv:
            tuneRun.write_csv(a.csv, rows, "test/perf/perf_run.py", runs=a.runs, durationSeconds=a.duration,
                              connections=a.connections, wrkThreads=a.threads, entities=a.entities)
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
