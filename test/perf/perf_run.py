#!/usr/bin/env python3
"""perf_run.py - coraine's request benchmarks, side by side in one run.

Shapes (wrk on loopback, keep-alive):
  trivial   GET on the trivial libmicrohttpd responder (the yardstick)
  trivial20 the same responder answering an array of 20 entities: the
            yardstick for a query page (the same bytes on the wire)
  retrieve  GET /ngsi-ld/v1/entities/{id}
  query     GET /ngsi-ld/v1/entities?type=Vehicle&q=speed>50&limit=20 over N entities
  create    POST /ngsi-ld/v1/entities (a new Vehicle per request)
  patch     PATCH /ngsi-ld/v1/entities/{one of the N} (a merge of speed; not in the default set)
  join      the query page with join=inline (4.5.23): each of the 20 Vehicles
            links one Parking of its own, inlined under isParked
  join_inline  the same (the name the issue gives it)
  query_ldjson the query page asked as application/ld+json (an @context member per entity)
  query_nocache, retrieve_nocache  query and retrieve on a second broker started with
            --renderCache 0 and the same entities: every read renders
  orderby   GET /ngsi-ld/v1/entities?type=Vehicle&orderBy=speed;desc&limit=20 over N entities
            (4.23: a page of 20 from corDB's ordered index)
  orderby_patched  alternately a PATCH of a random Vehicle's speed and the orderby page
            (the ordered page right after each write; requests/s counts both)
  temporal  GET /ngsi-ld/v1/temporal/entities/{id} (needs --broker-flags '--history corDB')
The shapes are alternated RUNS times, so the machine's drift spreads over
all of them; the report gives the median requests/s of each and the ratios.

  python3 test/perf/perf_run.py [--runs 3] [--duration 10] [--entities 10000]
  python3 test/perf/perf_run.py --memory 100000,1000000
  python3 test/perf/perf_run.py --broker-flags '--renderCache 0'   (every read renders)
  python3 test/perf/perf_run.py --bin /tmp/base/build/release/coraine --shapes retrieve,query,patch

--memory N,...: resident bytes per entity of the Vehicle shape (4 attributes,
one with observedAt and a sub-attribute, one GeoProperty), measured on a
fresh broker as (RSS after loading N entities - RSS before) / N.
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


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.status


def load(base, n, chunk=1000):
    post(base + "/ngsi-ld/v1/entityOperations/create", [parking(i) for i in range(50)])
    for start in range(0, n, chunk):
        post(base + "/ngsi-ld/v1/entityOperations/create",
             [vehicle(i) for i in range(start, min(n, start + chunk))])


PIN_SERVER, PIN_LOAD = [], []   # taskset prefixes, set by --pin


def start_broker(port, extra=(), binary=None, prefix=()):
    """The broker (BIN unless `binary`) on 127.0.0.1:port; prefix: e.g. valgrind's command."""
    return subprocess.Popen(PIN_SERVER + list(prefix) + [binary or BIN, "-fg", "--port", str(port), "--bind",
                             "127.0.0.1", "--logLevel", "warn", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wrk(url, duration, conns, threads, script=None, args=(), headers=()):
    cmd = PIN_LOAD + ["wrk", "-t%d" % threads, "-c%d" % conns, "-d%ds" % duration, "--latency"]
    for h in headers:
        cmd += ["-H", h]
    if script:
        cmd += ["-s", script]
    out = subprocess.run(cmd + [url] + (["--"] + list(args) if args else []), capture_output=True,
                         text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    p99us = None
    if p99:
        v, u = float(p99.group(1)), p99.group(2)
        p99us = v * {"us": 1, "ms": 1000, "s": 1000000}[u]
    return rps, int(bad.group(1)) if bad else 0, p99us


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def memory(counts):
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
        finally:
            b.terminate()
            b.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--entities", type=int, default=10000)
    ap.add_argument("--shapes", default="trivial,retrieve,trivial20,query,create")
    ap.add_argument("--memory", help="comma-separated entity counts: measure bytes per entity instead")
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
        memory([int(x) for x in a.memory.split(",")])
        return

    bport, tport, t20port, nport = free_port(), free_port(), free_port(), free_port()
    broker = start_broker(bport, a.broker_flags.split())
    shapes = a.shapes.split(",")
    nocache = None
    if any(s.endswith("_nocache") for s in shapes):
        nocache = start_broker(nport, a.broker_flags.split() + ["--renderCache", "0"])
    trivial = trivial20 = None
    if "trivial" in shapes:
        trivial = subprocess.Popen(PIN_SERVER + [TRIVIAL, str(tport)], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
    if "trivial20" in shapes:
        trivial20 = subprocess.Popen(PIN_SERVER + [TRIVIAL, str(t20port), "0", "20"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
    try:
        base = "http://127.0.0.1:%d" % bport
        wait_up(base + "/version")
        if trivial:
            wait_up("http://127.0.0.1:%d/" % tport)
        if trivial20:
            wait_up("http://127.0.0.1:%d/" % t20port)
        load(base, a.entities)
        nbase = "http://127.0.0.1:%d" % nport
        if nocache:
            wait_up(nbase + "/version")
            load(nbase, a.entities)
        page = "/ngsi-ld/v1/entities?type=Vehicle&q=speed%3E50&limit=20"
        urls = {
            "trivial": ("http://127.0.0.1:%d/ngsi-ld/v1/entities/urn:ngsi-ld:Vehicle:1" % tport, None),
            "trivial20": ("http://127.0.0.1:%d/ngsi-ld/v1/entities?type=Vehicle" % t20port, None),
            "retrieve": (base + "/ngsi-ld/v1/entities/urn:ngsi-ld:Vehicle:1", None),
            "query": (base + "/ngsi-ld/v1/entities?type=Vehicle&q=speed%3E50&limit=20", None),
            "create": (base + "/ngsi-ld/v1/entities", os.path.join(ROOT, "test/perf/create.lua")),
            "patch": (base + "/", os.path.join(ROOT, "test/perf/patch.lua")),
            "join": (base + page + "&join=inline", None),
            "join_inline": (base + page + "&join=inline", None),
            "query_ldjson": (base + page, None),
            "query_nocache": (nbase + page, None),
            "retrieve_nocache": (nbase + "/ngsi-ld/v1/entities/urn:ngsi-ld:Vehicle:1", None),
            "orderby": (base + "/ngsi-ld/v1/entities?type=Vehicle&orderBy=speed%3Bdesc&limit=20", None),
            "orderby_patched": (base + "/", os.path.join(ROOT, "test/perf/orderby_patched.lua")),
            "temporal": (base + "/ngsi-ld/v1/temporal/entities/urn:ngsi-ld:Vehicle:1?lastN=10", None),
        }
        headers = {"query_ldjson": ("Accept: application/ld+json",)}
        res = {s: [] for s in shapes}
        for run in range(a.runs):
            for s in shapes:
                url, script = urls[s]
                rps, bad, p99 = wrk(url, a.duration, a.connections, a.threads, script,
                                    (str(a.entities),) if s in ("patch", "orderby_patched") else (), headers.get(s, ()))
                res[s].append((rps, bad, p99))
                print("run %d %-8s %10.0f req/s  non-2xx %d  p99 %s us" % (run + 1, s, rps, bad, p99),
                      file=sys.stderr)
        med = {s: statistics.median(r[0] for r in res[s]) for s in shapes}
        print("| shape | median requests/s | runs | non-2xx | median p99 (µs) |")
        print("|---|---:|---|---:|---:|")
        for s in shapes:
            runs = ", ".join("%.0f" % r[0] for r in res[s])
            p99s = [r[2] for r in res[s] if r[2] is not None]
            print("| %s | %.0f | %s | %d | %.0f |" % (s, med[s], runs, sum(r[1] for r in res[s]),
                                                     statistics.median(p99s) if p99s else 0))
        print()
        if "trivial" in med and "retrieve" in med:
            print("- retrieve / trivial responder: %.2f" % (med["retrieve"] / med["trivial"]))
        for s in ("query", "create", "join", "join_inline", "query_ldjson", "query_nocache", "orderby",
                  "patch", "orderby_patched"):
            if s in med and "retrieve" in med:
                print("- %s / retrieve: %.2f" % (s, med[s] / med["retrieve"]))
        if "retrieve_nocache" in med and "query_nocache" in med:
            print("- query_nocache / retrieve_nocache (both --renderCache 0): %.2f"
                  % (med["query_nocache"] / med["retrieve_nocache"]))
        if "trivial20" in med and "query" in med:
            print("- query / trivial responder with the same 20-entity page: %.2f" % (med["query"] / med["trivial20"]))
        if any(sum(r[1] for r in res[s]) for s in shapes):
            print("\nWARNING: some requests failed (non-2xx): those figures do not count")
    finally:
        procs = [p for p in (broker, trivial, trivial20, nocache) if p]
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()


if __name__ == "__main__":
    main()
