#!/usr/bin/env python3
"""cor_chain.py - a query forwarded through a chain of three brokers,
A -> B -> C, over HTTP and over cor://, side by side (issue 15, "Speed").

Three coraine processes on loopback, each with --corPort. C holds N
Vehicles; B has a registration for type Vehicle at C, A one at B. Two
tenants of the same processes carry the two chains: in tenant `viahttp` the
registrations' endpoints are http://, in `viacor` they are cor://, so both
chains run through the same brokers, the same data and the same code but
the transport. wrk sends GET /entities?type=Vehicle&limit=L to A at the same
concurrency for each, the runs alternated (http, cor, http, cor ...), and
the medians of the rates are printed, with their ratio, and the medians over
the runs of each broker's CPU time (utime + stime from /proc/PID/stat) per
query at A: for A, the hub, that is its CPU per forwarded request (each
query at A forwards one to B). The load average is printed before and after.

  python3 test/perf/cor_chain.py [--bin build/release/coraine] [-n 20] [--limit 20]
                                 [-c 8] [-t 2] [-d 5] [--runs 3]

A benchmark: it never fails; on a machine shared with other work the rates
drift, which is why the runs alternate and the medians are compared.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from perf_run import free_port  # noqa: E402


def req(method, url, body=None, tenant=None):
    h = {"Content-Type": "application/json"} if body is not None else {}
    if tenant:
        h["NGSILD-Tenant"] = tenant
    data = json.dumps(body).encode() if body is not None else None
    r = urllib.request.Request(url, data=data, method=method, headers=h)
    with urllib.request.urlopen(r, timeout=10) as resp:
        return resp.status, resp.read()


def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])       # utime + stime


class Broker:
    def __init__(self, binp, name):
        self.port, self.cor = free_port(), free_port()
        self.base = "http://127.0.0.1:%d" % self.port
        self.proc = subprocess.Popen([binp, "-fg", "--port", str(self.port), "--corPort", str(self.cor),
                                      "--bind", "127.0.0.1", "--brokerAlias", "bench-" + name, "--logLevel", "error"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                req("GET", self.base + "/version")
                return
            except OSError:
                time.sleep(0.05)
        raise SystemExit("broker %s did not start" % name)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(20)


def wrk(url, tenant, conns, threads, secs):
    out = subprocess.run(["wrk", "-t%d" % threads, "-c%d" % conns, "-d%ds" % secs, "-H", "NGSILD-Tenant: " + tenant,
                          url], capture_output=True, text=True).stdout
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    n = re.search(r"(\d+) requests in", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if non2xx:
        print("  warning: %s non-2xx answers" % non2xx.group(1), file=sys.stderr)
    return float(m.group(1)) if m else 0.0, int(n.group(1)) if n else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "release", "coraine"))
    ap.add_argument("-n", type=int, default=20, help="Vehicles at C")
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("-c", type=int, default=8, help="wrk connections")
    ap.add_argument("-t", type=int, default=2, help="wrk threads")
    ap.add_argument("-d", type=int, default=5, help="seconds per run")
    ap.add_argument("--runs", type=int, default=3, help="runs per transport")
    a = ap.parse_args()

    A, B, C = (Broker(a.bin, n) for n in "ABC")
    try:
        for tenant, scheme in (("viahttp", "http"), ("viacor", "cor")):
            for i in range(a.n):
                req("POST", C.base + "/ngsi-ld/v1/entities",
                    {"id": "urn:ngsi-ld:Vehicle:%d" % i, "type": "Vehicle", "speed": {"type": "Property", "value": i},
                     "brand": {"type": "Property", "value": "b%d" % (i % 7)}}, tenant)
            for at, to in ((A, B), (B, C)):
                ep = to.base if scheme == "http" else "cor://127.0.0.1:%d" % to.cor
                req("POST", at.base + "/ngsi-ld/v1/csourceRegistrations",
                    {"type": "ContextSourceRegistration", "information": [{"entities": [{"type": "Vehicle"}]}],
                     "endpoint": ep, "tenant": tenant}, tenant)
        url = A.base + "/ngsi-ld/v1/entities?type=Vehicle&limit=%d" % a.limit
        for tenant in ("viahttp", "viacor"):
            st, body = req("GET", url, tenant=tenant)
            got = len(json.loads(body))
            if st != 200 or got != min(a.n, a.limit):
                raise SystemExit("%s: the chain answered %d with %d entities" % (tenant, st, got))
            wrk(url, tenant, a.c, a.t, 1)                       # warm-up
        rates = {"viahttp": [], "viacor": []}
        cpu = {"viahttp": [[], [], []], "viacor": [[], [], []]}  # per run: µs of A, B, C per query
        hz = os.sysconf("SC_CLK_TCK")
        load0 = os.getloadavg()
        for _ in range(a.runs):
            for tenant in ("viahttp", "viacor"):
                before = [cpu_ticks(b.proc.pid) for b in (A, B, C)]
                rate, n = wrk(url, tenant, a.c, a.t, a.d)
                after = [cpu_ticks(b.proc.pid) for b in (A, B, C)]
                for i in range(3):
                    if n:
                        cpu[tenant][i].append(1e6 * (after[i] - before[i]) / hz / n)
                rates[tenant].append(rate)
                print("  %-8s %9.0f req/s" % ("http" if tenant == "viahttp" else "cor", rate), flush=True)
        mh, mc = statistics.median(rates["viahttp"]), statistics.median(rates["viacor"])
        print("chain A->B->C, %d Vehicles at C, limit %d, wrk -t%d -c%d -d%ds, %d runs each, alternated"
              % (a.n, a.limit, a.t, a.c, a.d, a.runs))
        print("  http:// median %9.0f req/s   %s" % (mh, " ".join("%.0f" % r for r in rates["viahttp"])))
        print("  cor://  median %9.0f req/s   %s" % (mc, " ".join("%.0f" % r for r in rates["viacor"])))
        print("  cor/http: %.2fx" % (mc / mh if mh else 0))
        for tenant in ("viahttp", "viacor"):
            t = cpu[tenant]
            per = ["%s %.0f" % (n, statistics.median(t[i])) if t[i] else "-" for i, n in enumerate("ABC")]
            print("  CPU us per query at A (%s), medians: %s" % ("http" if tenant == "viahttp" else "cor",
                                                               ", ".join(per)))
        ha, ca = cpu["viahttp"][0], cpu["viacor"][0]
        if ha and ca:
            print("  hub (A) CPU per forwarded request, cor/http: %.2fx" % (statistics.median(ca) / statistics.median(ha)))
        print("  load average before %.2f %.2f %.2f, after %.2f %.2f %.2f" % (load0 + os.getloadavg()))
    finally:
        for b in (A, B, C):
            b.stop()


if __name__ == "__main__":
    main()
