#!/usr/bin/env python3
"""cpu_per_request.py - the broker's CPU time per request, shape by shape.

wrk's requests/s on a 2-core machine shared with other work drift by 2x and
more between runs; the CPU time the broker process spends per request (user +
system, from /proc/PID/stat) drifts much less. This starts each --bin, loads
N Vehicles (perf_run.py's shape: 50 Parkings, N Vehicles linking them), then
sends R requests of each shape over one keep-alive connection and prints the
broker's CPU microseconds per request and the ratio to a retrieve.

Shapes (the names of perf_run.py):
  retrieve      GET /entities/urn:ngsi-ld:Vehicle:1
  query         GET /entities?type=Vehicle&q=speed>50&limit=20
  query_ldjson  the same, Accept: application/ld+json
  join_inline   the same with join=inline
  orderby       GET /entities?type=Vehicle&orderBy=speed;desc&limit=20
  orderby_count the same with count=true
  create, patch POST /entities (a new entity), PATCH /entities/{id} (a new speed): not in the
                default list (--shapes create,patch)
  orderby_patched  a PATCH of a Vehicle, then the orderby query (per pair): the ordered
                query right after a write

  python3 test/perf/cpu_per_request.py [--bin A --bin B] [--flags '--renderCache 0'] [-n 10000] [-r 10000]
                                       [--repeat 3]
The ratios are retrieve's CPU time over the shape's: the throughput ratio a
CPU-bound broker would show.
"""
import argparse
import contextlib
import http.client
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf_run  # noqa: E402

PAGE = "/ngsi-ld/v1/entities?type=Vehicle&q=speed%3E50&limit=20"
SHAPES = {
    "retrieve": ("/ngsi-ld/v1/entities/urn:ngsi-ld:Vehicle:1", {}),
    "query": (PAGE, {}),
    "query_ldjson": (PAGE, {"Accept": "application/ld+json"}),
    "join_inline": (PAGE + "&join=inline", {}),
    "orderby": ("/ngsi-ld/v1/entities?type=Vehicle&orderBy=speed%3Bdesc&limit=20", {}),
    "orderby_count": ("/ngsi-ld/v1/entities?type=Vehicle&orderBy=speed%3Bdesc&limit=20&count=true", {}),
}
JSON = {"Content-Type": "application/json"}
_seq = [0]


def _patch(i):
    return ("PATCH", "/ngsi-ld/v1/entities/urn:ngsi-ld:Vehicle:%d" % (i * 7919 % 1000), JSON,
            '{"speed":{"type":"Property","value":%d}}' % (i % 120), 204)


def _create(i):
    _seq[0] += 1
    return ("POST", "/ngsi-ld/v1/entities", JSON,
            '{"id":"urn:ngsi-ld:New:%d:%d","type":"New","speed":{"type":"Property","value":%d}}'
            % (os.getpid(), _seq[0], i % 120), 201)


# Writes, and the ordered query right after a write (one unit = both requests).
WRITES = {
    "create": lambda i: [_create(i)],
    "patch": lambda i: [_patch(i)],
    "orderby_patched": lambda i: [_patch(i), ("GET", SHAPES["orderby"][0], {}, None, 200)],
}


def user_sys(pid):
    """The process's user and system CPU (clock ticks, /proc/PID/stat's utime and stime)."""
    with open("/proc/%d/stat" % pid) as fh:
        f = fh.read().rsplit(")", 1)[1].split()
    return int(f[11]), int(f[12])


def cpu_seconds(pid):
    return sum(user_sys(pid)) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def loaded_broker(binary, flags, n, prefix=()):
    """A broker (under prefix, e.g. valgrind) with n Vehicles, and a keep-alive connection to it."""
    port = perf_run.free_port()
    b = perf_run.start_broker(port, flags, binary=binary, prefix=prefix)
    try:
        base = "http://127.0.0.1:%d" % port
        perf_run.wait_up(base + "/version", timeout=60)
        perf_run.load(base, n)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        yield b, c
        c.close()
    finally:
        b.terminate()
        b.wait()


def send(c, shape, times):
    for i in range(times):
        reqs = WRITES[shape](i) if shape in WRITES else [("GET",) + SHAPES[shape] + (None, 200)]
        for method, path, hdr, body, want in reqs:
            c.request(method, path, body=body, headers=hdr)
            resp = c.getresponse()
            resp.read()
            if resp.status != want:
                raise RuntimeError("%s: %d" % (shape, resp.status))


def measure(binary, flags, n, r, shapes):
    out = {}
    with loaded_broker(binary, flags, n) as (b, c):
        for s in shapes:
            reps = max(100, r // 20) if s.startswith("orderby") else r
            send(c, s, 20)
            t0 = cpu_seconds(b.pid)
            send(c, s, reps)
            out[s] = (cpu_seconds(b.pid) - t0) / reps * 1e6
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", action="append", help="broker binary (repeatable; default build/release/coraine)")
    ap.add_argument("--flags", default="", help="extra broker flags")
    ap.add_argument("-n", type=int, default=10000, help="Vehicles loaded")
    ap.add_argument("-r", type=int, default=10000, help="requests per shape (orderby: r/20)")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--repeat", type=int, default=3, help="runs per binary, alternated; medians reported")
    a = ap.parse_args()
    shapes = a.shapes.split(",")
    bins = a.bin or [perf_run.BIN]
    print("| binary | " + " | ".join("%s (µs)" % s for s in shapes) + " | " +
          " | ".join("%s / retrieve" % s for s in shapes if s != "retrieve") + " |")
    print("|---|" + "---:|" * (2 * len(shapes) - ("retrieve" in shapes)))
    runs = {b: [] for b in bins}
    for _ in range(a.repeat):
        for b in bins:
            runs[b].append(measure(b, a.flags.split(), a.n, a.r, shapes))
    for b in bins:
        m = {s: statistics.median(r[s] for r in runs[b]) for s in shapes}
        ratios = [("%.2f" % (m["retrieve"] / m[s]) if m[s] else "-")     # 0: below the clock tick (use more -r)
                  for s in shapes if s != "retrieve" and "retrieve" in m]
        print("| %s | " % b + " | ".join("%.1f" % m[s] for s in shapes) + " | " + " | ".join(ratios) + " |",
              flush=True)


if __name__ == "__main__":
    main()
