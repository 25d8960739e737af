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

--runs alternated runs (every shape and transport once per run) of --requests each. One row per
shape and transport: the median over the runs of the hub's CPU (utime + stime from /proc/<pid>/stat)
per request and the runs, its ratio to http:// for the same shape, the median of the source's CPU
per request and of the wall time per request.

  python3 test/perf/fwd_temporal.py [--bin build/release/coraine] [--entities 200] [--instances 10]
                                    [--requests 2000] [--runs 5]
                                    [--csv test/perf/results/fwd_temporal.csv]

The rows go to --csv (with .meta.json: the parameters and the load average before) for report.py,
and as a markdown table to stdout. A benchmark: slow figures never fail it; a hub that answers
other than 200, or a page other than min(limit, N) entities, does.
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
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tune"))
from cor_chain import free_port  # noqa: E402
import tuneRun  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BIN = os.path.join(REPO, "build", "release", "coraine")
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


def run(hub, src, url, tenant, n):
    """n requests: (hub CPU µs, source CPU µs, wall µs) per request."""
    c0, s0, t0 = hub.cpu(), src.cpu(), time.monotonic()
    for _ in range(n):
        status, _ = call("GET", url, tenant=tenant)
        if status != 200:
            raise SystemExit("%s %s: the hub answered %d" % (tenant, url, status))
    return (hub.cpu() - c0) / n * 1e6, (src.cpu() - s0) / n * 1e6, (time.monotonic() - t0) / n * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=BIN)
    ap.add_argument("--entities", type=int, default=200)
    ap.add_argument("--instances", type=int, default=10)
    ap.add_argument("--requests", type=int, default=2000, help="requests per run")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--csv", default=os.path.join(REPO, "test/perf/results/fwd_temporal.csv"))
    a = ap.parse_args()
    hub, src = setup(a.bin, a.entities, a.instances)
    got = {}
    try:
        for scheme, tenant in TENANTS.items():       # the check: each shape answers a full page
            for shape, path in SHAPES.items():
                status, body = call("GET", hub.base + path, tenant=tenant)
                n = len(json.loads(body))
                if status != 200 or n != min(20, a.entities):
                    raise SystemExit("%s %s: the hub answered %d with %d entities" % (scheme, shape, status, n))
        load0 = os.getloadavg()
        for _ in range(a.runs):                      # alternated: every shape and transport once per run
            for scheme, tenant in TENANTS.items():
                for shape, path in SHAPES.items():
                    got.setdefault((shape, scheme), []).append(run(hub, src, hub.base + path, tenant, a.requests))
    finally:
        hub.stop()
        src.stop()
    rows = []
    for shape in SHAPES:
        http = statistics.median(v[0] for v in got[(shape, "http")])
        for scheme in TENANTS:
            v = got[(shape, scheme)]
            med = statistics.median(x[0] for x in v)
            rows.append({"shape": shape, "transport": scheme + "://",
                         "medianHubCpuUsPerRequest": "%.0f" % med,
                         "runs": " ".join("%.0f" % x[0] for x in v),
                         "vsHttp": "%.2f" % (med / http if http else 0),
                         "medianSourceCpuUsPerRequest": "%.0f" % statistics.median(x[1] for x in v),
                         "medianWallUsPerRequest": "%.0f" % statistics.median(x[2] for x in v)})
    tuneRun.write_csv(a.csv, rows, "test/perf/fwd_temporal.py", runs=a.runs, requestsPerRun=a.requests,
                      entities=a.entities, instancesPerPlace=a.instances,
                      loadAverageBefore=[round(x, 2) for x in load0])
    print("%d entities (half of them also at the hub), %d instances each place; %d alternated runs of %d "
          "requests each, medians" % (a.entities, a.instances, a.runs, a.requests))
    print("| " + " | ".join(rows[0]) + " |")
    print("|" + "---|" * len(rows[0]))
    for row in rows:
        print("| " + " | ".join(str(x) for x in row.values()) + " |")
    print("load average before %.2f %.2f %.2f, after %.2f %.2f %.2f" % (load0 + os.getloadavg()))


if __name__ == "__main__":
    main()
