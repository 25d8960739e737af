#!/usr/bin/env python3
"""callgrind_paths.py - instructions per request of the store's fast paths.

Wall-clock benchmarks on a shared 2-core machine drift by 2x between runs;
instruction counts do not. This starts each --bin under
`valgrind --tool=callgrind`, loads N Vehicles (perf_run.py's shape), then
sends R requests of each kind over one keep-alive connection:
  patch     PATCH /entities/{id} (merge of speed)     -> store_modify
  retrieve  GET /entities/{id}                        -> store_get (cdb_get)
  query     GET /entities?type=Vehicle&limit=20       -> store_query (type index, small page)
and prints the inclusive instructions per call of store_modify, cdb_get and
store_query, from callgrind_annotate.

  python3 test/perf/callgrind_paths.py --bin build/release/coraine --bin /tmp/base/build/release/coraine
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf_run  # noqa: E402

# store_get is a tail call (a jump) into the backend: cdb_get stands for it.
FUNCS = ("store_modify", "cdb_get", "store_query")


def drive(port, n, r):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    h = {"Content-Type": "application/json"}
    for i in range(r):
        c.request("PATCH", "/ngsi-ld/v1/entities/urn:ngsi-ld:Vehicle:%d" % (i * 7919 % n),
                  json.dumps({"speed": {"type": "Property", "value": i % 120}}), h)
        c.getresponse().read()
    for i in range(r):
        c.request("GET", "/ngsi-ld/v1/entities/urn:ngsi-ld:Vehicle:%d" % (i * 7919 % n))
        c.getresponse().read()
    for i in range(r):
        c.request("GET", "/ngsi-ld/v1/entities?type=Vehicle&limit=20&offset=%d" % (i % 50))
        c.getresponse().read()
    c.close()


def measure(binary, a):
    out = tempfile.mktemp(prefix="callgrind.", dir="/tmp")
    port = perf_run.free_port()
    base = "http://127.0.0.1:%d" % port
    b = perf_run.start_broker(port, (), binary, ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out])
    try:
        perf_run.wait_up(base + "/version", timeout=120)
        perf_run.load(base, a.entities)
        drive(port, a.entities, a.requests)
    finally:
        b.terminate()
        b.wait()
    time.sleep(0.5)
    ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", out], capture_output=True,
                         text=True).stdout
    res = {}
    for f in FUNCS:
        m = re.search(r"^\s*([\d,]+) \([^)]*\)\s+\S*:%s\b" % f, ann, re.M)
        res[f] = int(m.group(1).replace(",", "")) if m else None
    os.unlink(out)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", action="append")
    ap.add_argument("--entities", type=int, default=2000)
    ap.add_argument("--requests", type=int, default=2000)
    a = ap.parse_args()
    print("command: %s" % " ".join(["python3", "test/perf/callgrind_paths.py"] + sys.argv[1:]))
    print("| binary | %s |" % " | ".join("%s (instr/call)" % f for f in FUNCS))
    print("|---|" + "---:|" * len(FUNCS))
    for binary in a.bin or [perf_run.BIN]:
        r = measure(binary, a)
        # each function ran `requests` times (the load goes through store_create)
        print("| %s | %s |" % (binary, " | ".join("%.0f" % (r[f] / a.requests) if r[f] else "-"
                                                   for f in FUNCS)))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
