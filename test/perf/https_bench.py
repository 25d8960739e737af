#!/usr/bin/env python3
"""https_bench.py - a retrieve over HTTPS (--https) against plain HTTP, on loopback.

Starts the broker twice per round (plain, then --https with a P-256 certificate
made here by openssl in a temporary directory, never kept), creates one entity,
and drives GET /ngsi-ld/v1/entities/{id} with wrk (-t1 -c4 by default) for D
seconds in two shapes: keep-alive (the TLS handshake amortized) and
"Connection: close" (a new TCP connection, and handshake, per request). It
prints, per mode and shape, the median over the rounds (modes alternated) of
wrk's requests/s and of the broker's CPU microseconds per request (user+system
from /proc/PID/stat), and the https/http ratios, with the load average.
On a shared machine the CPU per request is the figure to read.

  python3 test/perf/https_bench.py [--bin build/release/coraine] [-d 3] [--rounds 3] [-c 4]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf_run  # noqa: E402

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
        if re.search(r"Non-2xx", out) or re.search(r"Socket errors: connect [1-9]", out):
            raise RuntimeError("wrk errors: %s" % out)
        rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
        return rps, cpu / n * 1e6, " ".join(wrk)
    finally:
        b.terminate()
        b.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=perf_run.BIN)
    ap.add_argument("-d", type=int, default=3, help="seconds of wrk per measurement")
    ap.add_argument("-c", type=int, default=4, help="wrk connections")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        cert, key = make_cert(d)
        res = {}
        cmds = {}
        load0 = open("/proc/loadavg").read().split()[:3]
        for _ in range(a.rounds):
            for shape in ("keepalive", "close"):
                for tls in (False, True):
                    rps, us, cmd = one(a.bin, tls, cert, key, shape, a.d, a.c)
                    res.setdefault((shape, tls), []).append((rps, us))
                    cmds[(shape, tls)] = cmd
        load1 = open("/proc/loadavg").read().split()[:3]
    print("load average %s at the start, %s at the end; %d rounds alternated, medians" %
          (" ".join(load0), " ".join(load1), a.rounds))
    print("| shape | http req/s | https req/s | http CPU µs/req | https CPU µs/req | https/http CPU |")
    print("|---|---:|---:|---:|---:|---:|")
    for shape in ("keepalive", "close"):
        h = res[(shape, False)]
        s = res[(shape, True)]
        hr, sr = statistics.median(x[0] for x in h), statistics.median(x[0] for x in s)
        hc, sc = statistics.median(x[1] for x in h), statistics.median(x[1] for x in s)
        print("| %s | %.0f | %.0f | %.1f | %.1f | %.2f |" % (shape, hr, sr, hc, sc, sc / hc))
    for k, v in sorted(cmds.items()):
        print("  %s" % v)


if __name__ == "__main__":
    main()
