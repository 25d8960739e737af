#!/usr/bin/env python3
"""https_bench.py - a retrieve over HTTPS (--https) against plain HTTP, on loopback.

Starts a fresh broker per measurement (plain, then --https with a P-256
certificate made here by openssl in a temporary directory, never kept), creates one entity,
and drives GET /ngsi-ld/v1/entities/{id} with wrk (-t1 -c4 by default) for D
seconds in two shapes: keep-alive (the TLS handshake amortized) and
"Connection: close" (a new TCP connection, and handshake, per request), after
a 1 s warm-up of one connection. One row per shape: the medians over the
rounds (modes alternated) of wrk's requests/s and of the broker's CPU
microseconds per request (user+system from /proc/PID/stat), each round's
figures, the https/http ratios, and the failed requests (non-2xx and socket
errors, summed over the rounds; none may fail). On a shared machine the CPU
per request is the figure to read.

  python3 test/perf/https_bench.py [--bin build/release/coraine] [-d 3] [--rounds 5] [-c 4]
                                   [--csv test/perf/results/https.csv]

A benchmark: it never fails on slow figures. The rows go to --csv (with
.meta.json: the load average at the start and at the end, the wrk commands)
for report.py; a markdown table goes to stdout.
"""
import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf_run  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tune"))
import tuneRun  # noqa: E402

PATH = "/ngsi-ld/v1/entities/urn:ngsi-ld:Vehicle:1"
ENTITY = ('{"id":"urn:ngsi-ld:Vehicle:1","type":"Vehicle","speed":{"type":"Property","value":42},'
          '"brand":{"type":"Property","value":"Mercedes"}}')


def cpu_seconds(pid):
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def make_cert(d):
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", os.path.join(d, "key.pem"), "-out", os.path.join(d, "cert.pem"), "-days", "1",
                    "-subj", "/CN=127.0.0.1"], check=True, capture_output=True)
    return os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")


def one(binary, tls, cert, key, shape, secs, conns):
    port = perf_run.free_port()
    flags = ["--https", "--cert", cert, "--key", key] if tls else []
    b = perf_run.start_broker(port, flags, binary=binary)
    scheme = "https" if tls else "http"
    base = "%s://127.0.0.1:%d" % (scheme, port)
    try:
        curl = ["curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}"]
        for _ in range(300):
            if subprocess.run(curl + [base + "/version"], capture_output=True, text=True).stdout == "200":
                break
            time.sleep(0.05)
        st = subprocess.run(curl + ["-X", "POST", "-H", "Content-Type: application/json", "--data", ENTITY,
                                    base + "/ngsi-ld/v1/entities"], capture_output=True, text=True).stdout
        if st != "201":
            raise RuntimeError("create: %s" % st)
        hdr = ["-H", "Connection: close"] if shape == "close" else []
        wrk = ["wrk", "-t1", "-c%d" % conns, "-d%ds" % secs] + hdr + [base + PATH]
        subprocess.run(["wrk", "-t1", "-c1", "-d1s"] + hdr + [base + PATH], capture_output=True)   # warm-up
        t0 = cpu_seconds(b.pid)
        out = subprocess.run(wrk, capture_output=True, text=True).stdout
        cpu = cpu_seconds(b.pid) - t0
        n = int(re.search(r"(\d+) requests in", out).group(1))
        bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
        sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
        failed = (int(bad.group(1)) if bad else 0) + (sum(int(g) for g in sock.groups()) if sock else 0)
        rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
        return rps, cpu / max(1, n) * 1e6, failed, shlex.join(wrk).replace(":%d/" % port, ":PORT/")
    finally:
        b.terminate()
        b.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=perf_run.BIN)
    ap.add_argument("-d", type=int, default=3, help="seconds of wrk per measurement")
    ap.add_argument("-c", type=int, default=4, help="wrk connections")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--csv", default=os.path.join(perf_run.ROOT, "test/perf/results/https.csv"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        cert, key = make_cert(d)
        res = {}
        cmds = {}
        load0 = open("/proc/loadavg").read().split()[:3]
        for _ in range(a.rounds):
            for shape in ("keepalive", "close"):
                for tls in (False, True):
                    rps, us, failed, cmd = one(a.bin, tls, cert, key, shape, a.d, a.c)
                    res.setdefault((shape, tls), []).append((rps, us, failed))
                    cmds[(shape, tls)] = cmd
        load1 = open("/proc/loadavg").read().split()[:3]
    rows = []
    for shape, label in (("keepalive", "keep-alive"), ("close", "Connection: close")):
        h, s = res[(shape, False)], res[(shape, True)]
        hr, sr = statistics.median(x[0] for x in h), statistics.median(x[0] for x in s)
        hc, sc = statistics.median(x[1] for x in h), statistics.median(x[1] for x in s)
        rows.append({"shape": label,
                     "httpRequestsPerSecond": round(hr), "httpsRequestsPerSecond": round(sr),
                     "httpsOverHttpRequests": "%.2f" % (sr / hr if hr else 0),
                     "httpCpuUsPerRequest": "%.1f" % hc, "httpsCpuUsPerRequest": "%.1f" % sc,
                     "httpsOverHttpCpu": "%.2f" % (sc / hc if hc else 0),
                     "httpRuns": " ".join("%.0f" % x[0] for x in h), "httpsRuns": " ".join("%.0f" % x[0] for x in s),
                     "httpCpuRuns": " ".join("%.1f" % x[1] for x in h),
                     "httpsCpuRuns": " ".join("%.1f" % x[1] for x in s),
                     "failed": sum(x[2] for x in h) + sum(x[2] for x in s)})
    tuneRun.write_csv(a.csv, rows, "test/perf/https_bench.py", runs=a.rounds, durationSeconds=a.d,
                      connections=a.c, loadAverageAtStart=[float(x) for x in load0],
                      wrk=[cmds[k] for k in sorted(cmds)], certificate="P-256 ECDSA, self-signed (openssl)")
    print("load average %s at the start, %s at the end; %d rounds alternated, medians" %
          (" ".join(load0), " ".join(load1), a.rounds))
    print("| shape | http req/s | https req/s | http CPU µs/req | https CPU µs/req | https/http CPU | failed |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print("| %s | %d | %d | %s | %s | %s | %d |" % (r["shape"], r["httpRequestsPerSecond"],
                                                      r["httpsRequestsPerSecond"], r["httpCpuUsPerRequest"],
                                                      r["httpsCpuUsPerRequest"], r["httpsOverHttpCpu"], r["failed"]))
    for k, v in sorted(cmds.items()):
        print("  %s" % v)
    if any(r["failed"] for r in rows):
        print("\nWARNING: some requests failed (non-2xx or socket errors): those figures do not count")


if __name__ == "__main__":
    main()
