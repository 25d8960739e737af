#!/usr/bin/env python3
"""fwd_temporal.py - the hub's CPU per forwarded temporal query (5.7.4 distributed), beside the
forwarded entity query of the same entities, over HTTP and cor://.

Two brokers with --history corDB: the source S holds N Vehicles with I observed instances of speed
each (written with POST /temporal/entities); the hub H holds the first half of them too, each with
I other instances (local=true), so every merged entity has 2*I instances from two places. H holds
two registrations of S for type Vehicle (operations queryTemporal, retrieveTemporal, queryEntity,
retrieveEntity), one per tenant: `viahttp` (http://) and `viacor` (cor://). Sequential requests (one
client, loopback) ask H for

  temporal:  /temporal/entities?type=Vehicle&lastN=5&limit=20
  entities:  /entities?type=Vehicle&limit=20

and the hub's CPU (utime + stime from /proc/<pid>/stat) per request is printed per shape and
transport: the median of --runs alternated runs of --requests each.

  python3 test/perf/fwd_temporal.py [--bin build/release/coraine] [--entities 200] [--instances 10]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cor_chain import free_port  # noqa: E402

BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "release", "coraine")
TENANTS = {"http": "viahttp", "cor": "viacor"}
SHAPES = {"temporal": "/ngsi-ld/v1/temporal/entities?type=Vehicle&lastN=5&limit=20",
          "entities": "/ngsi-ld/v1/entities?type=Vehicle&limit=20"}
TICK = os.sysconf("SC_CLK_TCK")


def call(method, url, body=None, tenant=None):
    data = json.dumps(body).encode() if body is not None else None
    r = urllib.request.Request(url, data=data, method=method)
    if data:
        r.add_header("Content-Type", "application/json")
    if tenant:
        r.add_header("NGSILD-Tenant", tenant)
    with urllib.request.urlopen(r, timeout=30) as f:
        return f.status, f.read()


class Broker:
    def __init__(self, binp, name):
        self.port, self.cor = free_port(), free_port()
        self.base = "http://127.0.0.1:%d" % self.port
        self.proc = subprocess.Popen([binp, "-fg", "--port", str(self.port), "--corPort", str(self.cor),
                                      "--bind", "127.0.0.1", "--brokerAlias", "tbench-" + name, "--history",
                                      "corDB", "--logLevel", "error"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                call("GET", self.base + "/version")
                return
            except OSError:
                time.sleep(0.05)
        raise SystemExit("broker %s did not start" % name)

    def cpu(self):
        with open("/proc/%d/stat" % self.proc.pid) as f:
            v = f.read().rsplit(")", 1)[1].split()
        return (int(v[11]) + int(v[12])) / TICK

    def stop(self):
        self.proc.terminate()
        self.proc.wait(20)


def temporal_entity(i, n_inst, minute0):
    return {"id": "urn:ngsi-ld:Vehicle:%06d" % i, "type": "Vehicle",
            "speed": [{"type": "Property", "value": i + k, "observedAt": "2020-08-01T%02d:%02d:00Z" %
                       ((minute0 + k) // 60 % 24, (minute0 + k) % 60)} for k in range(n_inst)]}


def setup(binp, n, n_inst):
    hub, src = Broker(binp, "H"), Broker(binp, "S")
    try:
        for scheme, tenant in TENANTS.items():
            for i in range(n):
                call("POST", src.base + "/ngsi-ld/v1/temporal/entities", temporal_entity(i, n_inst, 0), tenant)
                if i < n // 2:
                    call("POST", hub.base + "/ngsi-ld/v1/temporal/entities?local=true",
                         temporal_entity(i, n_inst, n_inst), tenant)
            ep = src.base if scheme == "http" else "cor://127.0.0.1:%d" % src.cor
            call("POST", hub.base + "/ngsi-ld/v1/csourceRegistrations",
                 {"type": "ContextSourceRegistration", "information": [{"entities": [{"type": "Vehicle"}]}],
                  "endpoint": ep, "tenant": tenant,
                  "operations": ["queryTemporal", "retrieveTemporal", "queryEntity", "retrieveEntity"]}, tenant)
    except BaseException:
        hub.stop()
        src.stop()
        raise
    return hub, src


def run(hub, url, tenant, n):
    c0 = hub.cpu()
    for _ in range(n):
        status, _ = call("GET", url, tenant=tenant)
        assert status == 200, status
    return (hub.cpu() - c0) / n * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=BIN)
    ap.add_argument("--entities", type=int, default=200)
    ap.add_argument("--instances", type=int, default=10)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    hub, src = setup(a.bin, a.entities, a.instances)
    try:
        got = {}
        for _ in range(a.runs):                      # alternated: every shape and transport once per run
            for scheme, tenant in TENANTS.items():
                for shape, path in SHAPES.items():
                    got.setdefault((shape, scheme), []).append(run(hub, hub.base + path, tenant, a.requests))
        print("load average %.2f; %d entities (half of them also at the hub), %d instances each place" %
              (os.getloadavg()[0], a.entities, a.instances))
        print("| shape | transport | hub CPU per request (µs, median of %d) | runs |" % a.runs)
        print("|---|---|---:|---|")
        for (shape, scheme), v in got.items():
            print("| %s | %s | %.0f | %s |" % (shape, scheme, statistics.median(v), ", ".join("%.0f" % x for x in v)))
    finally:
        hub.stop()
        src.stop()


if __name__ == "__main__":
    main()
