#!/usr/bin/env python3
"""mongo_bench.py - --database mongoc beside corDB: the broker's CPU per
request, the database's CPU per request and the wall time per request.

Starts FerretDB (test/functional/ferret.py builds it from test/ferretdb), a
broker on corDB and one on mongoc, loads each with N Vehicles (perf_run.py's
shape), then sends R requests of each shape over one keep-alive connection
(cpu_per_request.py's shapes: retrieve, query = type=Vehicle&q=speed>50&limit=20,
create, patch) and prints, per store and shape: the broker's CPU µs per
request (user + system from /proc), FerretDB's, and the wall µs per request
(one connection: latency, not throughput). A benchmark: it never fails.

  python3 test/perf/mongo_bench.py [-n 2000] [-r 1000] [--shapes retrieve,query,create,patch]

The broker's CPU is what the issue's target compares (mongoc at most 2x
corDB); FerretDB on SQLite is much slower than a MongoDB server, so its
column says where the time goes here, not what MongoDB would cost.
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "functional"))
import cpu_per_request as cpr  # noqa: E402
import ferret  # noqa: E402


def measure(srv, flags, n, r, shapes):
    out = {}
    with cpr.loaded_broker(None, flags, n) as (b, c):
        for s in shapes:
            cpr.send(c, s, 20)
            t0, d0, w0 = cpr.cpu_seconds(b.pid), cpr.cpu_seconds(srv.proc.pid), time.perf_counter()
            cpr.send(c, s, r)
            out[s] = ((cpr.cpu_seconds(b.pid) - t0) / r * 1e6,
                      (cpr.cpu_seconds(srv.proc.pid) - d0) / r * 1e6,
                      (time.perf_counter() - w0) / r * 1e6)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=2000, help="Vehicles loaded")
    ap.add_argument("-r", type=int, default=1000, help="requests per shape")
    ap.add_argument("--shapes", default="retrieve,query,create,patch")
    a = ap.parse_args()
    shapes = a.shapes.split(",")
    srv = ferret.FerretServer()
    try:
        res = {"corDB": measure(srv, (), a.n, a.r, shapes),
               "mongoc": measure(srv, ferret.mongo_flags(srv), a.n, a.r, shapes)}
    finally:
        srv.close()
    print("%-10s %12s %12s %12s %12s %12s" % ("shape", "corDB cpu", "mongoc cpu", "ratio",
                                              "ferret cpu", "mongoc wall"))
    for s in shapes:
        c, m = res["corDB"][s], res["mongoc"][s]
        print("%-10s %10.1fus %10.1fus %11.2fx %10.1fus %10.1fus" % (s, c[0], m[0], m[0] / c[0] if c[0] else 0,
                                                                   m[1], m[2]))
    print("(corDB wall: %s)" % ", ".join("%s %.1fus" % (s, res["corDB"][s][2]) for s in shapes))


if __name__ == "__main__":
    main()
