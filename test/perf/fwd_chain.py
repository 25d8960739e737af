#!/usr/bin/env python3
"""fwd_chain.py - a query forwarded through a chain of three brokers, over HTTP and over cor://.

The entities (perf_run's Vehicles) live in the last broker C; B holds a
registration of C for type Vehicle, A a registration of B. The brokers are
cor_chain.py's (each with --corPort); two tenants carry the two transports
through the same processes, as in cor_chain.py: in `viahttp` the
registrations' endpoints are http://, in `viacor` cor://. wrk asks A for the
query page (type=Vehicle&q=speed>50&limit=20) in each tenant, so each request
crosses A -> B -> C and back. chain() is the setup perf_run.py's fwd_http and
fwd_cor shapes and pgoTrain.sh use; alone it prints one run of each:

  python3 test/perf/fwd_chain.py [--bin build/release/coraine] [--duration 5] [--entities 2000]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf_run  # noqa: E402
from cor_chain import Broker  # noqa: E402

TENANTS = {"http": "viahttp", "cor": "viacor"}     # transport -> the tenant that carries it
PAGE = "/ngsi-ld/v1/entities?type=Vehicle&q=speed%3E50&limit=20"


def chain(binary, entities):
    """The three brokers (A, B, C), loaded and registered for both transports; the caller stops them."""
    brokers = [Broker(binary or perf_run.BIN, n) for n in "ABC"]
    a, b, c = brokers
    try:
        for scheme, tenant in TENANTS.items():
            perf_run.load(c.base, entities, tenant=tenant)
            for at, to in ((b, c), (a, b)):
                ep = to.base if scheme == "http" else "cor://127.0.0.1:%d" % to.cor
                perf_run.post(at.base + "/ngsi-ld/v1/csourceRegistrations",
                              {"type": "ContextSourceRegistration",
                               "information": [{"entities": [{"type": "Vehicle"}]}], "endpoint": ep,
                               "tenant": tenant}, tenant=tenant)
    except BaseException:
        for x in brokers:
            x.stop()
        raise
    return brokers


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", help="the broker binary (default build/release/coraine)")
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--entities", type=int, default=2000)
    ap.add_argument("--connections", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    brokers = chain(a.bin, a.entities)
    try:
        print("| shape | requests/s | non-2xx | p99 (µs) |")
        print("|---|---:|---:|---:|")
        for scheme, tenant in TENANTS.items():
            rps, bad, p99 = perf_run.wrk(brokers[0].base + PAGE, a.duration, a.connections, a.threads,
                                         headers=("NGSILD-Tenant: " + tenant,))
            print("| fwd_%s | %.0f | %d | %.0f |" % (scheme, rps, bad, p99 or 0))
    finally:
        for b in brokers:
            b.stop()


if __name__ == "__main__":
    main()
