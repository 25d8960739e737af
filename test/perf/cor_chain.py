#!/usr/bin/env python3
"""cor_chain.py - a query forwarded through a chain of three brokers,
A -> B -> C, over HTTP and over cor://, side by side (issue 15, "Speed").

Three coraine processes on loopback, each with --corPort. C holds N
Vehicles; B has a registration for type Vehicle at C, A one at B. Two
tenants of the same processes carry the two chains: in tenant `viahttp` the
registrations' endpoints are http://, in `viacor` they are cor://, so both
chains run through the same brokers, the same data and the same code but
the transport. wrk sends GET /entities?type=Vehicle&limit=L to A at the same
concurrency for each, the runs alternated (http, cor, http, cor ...). One
row per transport: the median of the runs' rates and the runs, the ratio
to http://, and the medians over the runs of each broker's CPU time
(utime + stime from /proc/PID/stat) per query at A: for A, the hub, that is
its CPU per forwarded request (each query at A forwards one to B), with its
ratio to http://; and the non-2xx answers of all the runs.

  python3 test/perf/cor_chain.py [--bin build/release/coraine] [-n 20] [--limit 20]
                                 [-c 8] [-t 2] [-d 5] [--runs 5]
                                 [--csv test/perf/results/cor_chain.csv]

The rows go to --csv (with .meta.json: the parameters and the load average
before too) for report.py, and as a markdown table to stdout. A benchmark:
slow figures never fail it (on a machine shared with other work the rates
drift, which is why the runs alternate and the medians are compared); a
chain that answers the check query wrongly does. fwd_chain.py (perf_run.py's
fwd_http and fwd_cor shapes) uses this file's Broker.
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
sys.path.insert(0, os.path.join(HERE, "tune"))
from perf_run import free_port  # noqa: E402
import tuneRun  # noqa: E402


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
    """One wrk run: (requests/s, requests, non-2xx answers)."""
    out = subprocess.run(["wrk", "-t%d" % threads, "-c%d" % conns, "-d%ds" % secs, "-H", "NGSILD-Tenant: " + tenant,
                          url], capture_output=True, text=True).stdout
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    n = re.search(r"(\d+) requests in", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if non2xx:
        print("  warning: %s non-2xx answers" % non2xx.group(1), file=sys.stderr)
    return (float(m.group(1)) if m else 0.0, int(n.group(1)) if n else 0,
            int(non2xx.group(1)) if non2xx else 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "release", "coraine"))
    ap.add_argument("-n", type=int, default=20, help="Vehicles at C")
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("-c", type=int, default=8, help="wrk connections")
    ap.add_argument("-t", type=int, default=2, help="wrk threads")
    ap.add_argument("-d", type=int, default=5, help="seconds per run")
    ap.add_argument("--runs", type=int, default=5, help="runs per transport")
    ap.add_argument("--csv", default=os.path.join(REPO, "test/perf/results/cor_chain.csv"))
    a = ap.parse_args()

    A, B, C = (Broker(a.bin, n) for n in "ABC")
    rates = {"viahttp": [], "viacor": []}
    cpu = {"viahttp": [[], [], []], "viacor": [[], [], []]}  # per run: µs of A, B, C per query
    bad = {"viahttp": 0, "viacor": 0}
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
        hz = os.sysconf("SC_CLK_TCK")
        load0 = os.getloadavg()
        for _ in range(a.runs):
            for tenant in ("viahttp", "viacor"):
                before = [cpu_ticks(b.proc.pid) for b in (A, B, C)]
                rate, n, non2xx = wrk(url, tenant, a.c, a.t, a.d)
                after = [cpu_ticks(b.proc.pid) for b in (A, B, C)]
                for i in range(3):
                    if n:
                        cpu[tenant][i].append(1e6 * (after[i] - before[i]) / hz / n)
                rates[tenant].append(rate)
                bad[tenant] += non2xx
                print("  %-8s %9.0f req/s" % ("http" if tenant == "viahttp" else "cor", rate), flush=True)
    finally:
        for b in (A, B, C):
            b.stop()

    def med(xs):
        return statistics.median(xs) if xs else 0.0

    rate_http, cpu_a_http = med(rates["viahttp"]), med(cpu["viahttp"][0])
    rows = []
    for tenant, transport in (("viahttp", "http://"), ("viacor", "cor://")):
        r, t = med(rates[tenant]), cpu[tenant]
        rows.append({"transport": transport,
                     "medianQueriesPerSecond": round(r),
                     "runs": " ".join("%.0f" % x for x in rates[tenant]),
                     "vsHttp": "%.2f" % (r / rate_http if rate_http else 0),
                     "cpuUsPerQueryA": "%.0f" % med(t[0]),
                     "cpuAVsHttp": "%.2f" % (med(t[0]) / cpu_a_http if cpu_a_http else 0),
                     "cpuUsPerQueryB": "%.0f" % med(t[1]),
                     "cpuUsPerQueryC": "%.0f" % med(t[2]),
                     "non2xx": bad[tenant]})
    tuneRun.write_csv(a.csv, rows, "test/perf/cor_chain.py", runs=a.runs, durationSeconds=a.d,
                      vehiclesAtC=a.n, limit=a.limit, wrkConnections=a.c, wrkThreads=a.t,
                      loadAverageBefore=[round(x, 2) for x in load0])
    print("chain A->B->C, %d Vehicles at C, GET /entities?type=Vehicle&limit=%d at A, wrk -t%d -c%d -d%ds, "
          "%d runs each, alternated; medians" % (a.n, a.limit, a.t, a.c, a.d, a.runs))
    print("| " + " | ".join(rows[0]) + " |")
    print("|" + "---|" * len(rows[0]))
    for row in rows:
        print("| " + " | ".join(str(x) for x in row.values()) + " |")
    print("load average before %.2f %.2f %.2f, after %.2f %.2f %.2f" % (load0 + os.getloadavg()))


if __name__ == "__main__":
    main()
