#!/usr/bin/env python3
"""callgrind_seq.py - instruction counts of the request handlers on a short
fixed sequence of requests, for before/after comparisons of code changes
(instruction counts are stable on a shared, noisy machine; wall-clock
throughput is test/perf/perf_run.py).

The broker runs under valgrind --tool=callgrind with one HTTP thread and
collection switched on only inside the libmicrohttpd request callback
(on_request: everything a request costs the broker's own code, from the
request head to the answer handed back). The counts printed are inclusive
costs of each route handler: parsing, @context, operation, store,
rendering. The sequence: N creates, N retrieves, N/5 queries (a page of 20
with q), N merges (PATCH /entities/{id}), N attribute updates (PATCH .../attrs),
N/10 batch upserts of 10 entities. Prints the inclusive instructions per
request of each handler.

  python3 test/perf/callgrind_seq.py [--bin build/release/coraine] [--n 300]
"""
import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from perf_run import free_port, vehicle, wait_up  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

HANDLERS = ["api_entity_create", "api_entity_get", "api_entities_query", "api_entity_merge",
            "api_attrs_update", "api_batch_upsert"]


def run(binary, n):
    port = free_port()
    out = tempfile.mktemp(prefix="callgrind.", suffix=".out")
    vg = subprocess.Popen(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
                           "--collect-atstart=no", "--toggle-collect=on_request",
                           binary, "-fg", "--port", str(port), "--bind", "127.0.0.1", "--logLevel", "error",
                           "--connectionPoolSize", "1"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_up("http://127.0.0.1:%d/version" % port, timeout=60)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        js = {"Content-Type": "application/json"}

        def req(method, path, body=None, ok=(200, 201, 204)):
            c.request(method, path, body=json.dumps(body) if body is not None else None, headers=js)
            r = c.getresponse()
            r.read()
            if r.status not in ok:
                raise RuntimeError("%s %s -> %d" % (method, path, r.status))

        e = "/ngsi-ld/v1/entities"
        for i in range(n):
            req("POST", e, vehicle(i))
        for i in range(n):
            req("GET", e + "/urn:ngsi-ld:Vehicle:%d" % i)
        for i in range(n // 5):
            req("GET", e + "?type=Vehicle&q=speed%%3E%d&limit=20" % (i % 100))
        for i in range(n):
            req("PATCH", e + "/urn:ngsi-ld:Vehicle:%d" % i, {"speed": {"type": "Property", "value": i % 7}})
        for i in range(n):
            req("PATCH", e + "/urn:ngsi-ld:Vehicle:%d/attrs" % i, {"brand": {"type": "Property", "value": "B%d" % i}})
        for i in range(n // 10):
            req("POST", "/ngsi-ld/v1/entityOperations/upsert", [vehicle(n + 10 * i + k) for k in range(10)])
        c.close()
    finally:
        vg.send_signal(signal.SIGINT)
        vg.wait(timeout=120)
    ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", out],
                         capture_output=True, text=True, check=True).stdout
    if os.environ.get("CALLGRIND_KEEP"):
        print("callgrind output kept in", out)
    else:
        os.unlink(out)
    calls = {"api_entity_create": n, "api_entity_get": n, "api_entities_query": n // 5, "api_entity_merge": n,
             "api_attrs_update": n, "api_batch_upsert": n // 10}
    res = {}
    for h in HANDLERS:
        m = re.search(r"^\s*([\d,]+) \([^)]*\)\s+\S*:%s\b" % h, ann, re.M)
        res[h] = int(m.group(1).replace(",", "")) / calls[h] if m else None
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/release/coraine"))
    ap.add_argument("--n", type=int, default=300)
    a = ap.parse_args()
    res = run(a.bin, a.n)
    for h in HANDLERS:
        print("%-22s %12s instructions/request" % (h, "%.0f" % res[h] if res[h] else "?"))


if __name__ == "__main__":
    main()
