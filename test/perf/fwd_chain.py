#!/usr/bin/env python3
"""fwd_chain.py - a query forwarded through a chain of three brokers over HTTP.

The entities (perf_run's Vehicles) live in the last broker C; B holds a
registration of C for type Vehicle, A a registration of B. wrk asks A for the
query page (type=Vehicle&q=speed>50&limit=20), so each request crosses A -> B
-> C and back. pgoTrain.sh uses it to train the forwarding path; alone it is
the forwarded-query shape of the harness:

  python3 test/perf/fwd_chain.py [--bin build/release/coraine] [--duration 5] [--entities 2000]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf_run  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", help="the broker binary (default build/release/coraine)")
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--entities", type=int, default=2000)
    ap.add_argument("--connections", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    if a.bin:
        perf_run.BIN = a.bin
    ports = [perf_run.free_port() for _ in range(3)]
    procs = [perf_run.start_broker(p) for p in ports]
    try:
        a_base, b_base, c_base = ("http://127.0.0.1:%d" % p for p in ports)
        for base in (a_base, b_base, c_base):
            perf_run.wait_up(base + "/version")
        perf_run.load(c_base, a.entities)
        for hub, src in ((b_base, c_base), (a_base, b_base)):
            perf_run.post(hub + "/ngsi-ld/v1/csourceRegistrations",
                          {"type": "ContextSourceRegistration",
                           "information": [{"entities": [{"type": "Vehicle"}]}], "endpoint": src})
        url = a_base + "/ngsi-ld/v1/entities?type=Vehicle&q=speed%3E50&limit=20"
        rps, bad, p99 = perf_run.wrk(url, a.duration, a.connections, a.threads)
        print("| shape | requests/s | non-2xx | p99 (µs) |")
        print("|---|---:|---:|---:|")
        print("| forwarded_chain_http | %.0f | %d | %.0f |" % (rps, bad, p99 or 0))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()


if __name__ == "__main__":
    main()
