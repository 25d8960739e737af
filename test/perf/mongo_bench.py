#!/usr/bin/env python3
"""mongo_bench.py - --database mongoc beside corDB: the broker's CPU per
request, the database's CPU per request and the wall time per request.

Starts FerretDB (test/functional/ferret.py builds it from test/ferretdb), then
--repeat times, alternated, a broker on corDB and one on mongoc (a database of
its own each time); loads each with N Vehicles (perf_run.py's shape), then
sends requests of each shape over one keep-alive connection
(cpu_per_request.py's shapes: retrieve, query = type=Vehicle&q=speed>50&limit=20,
create, patch), R of the fast shapes (retrieve, create) and R_SLOW of the
shapes FerretDB itself is slow at (query, patch: FerretDB on SQLite scans and
decodes the collection in Go for each). Per store and shape it measures:

  broker    the broker's CPU per request: the sum over its threads of
            /proc/PID/task/*/schedstat (ns, not 10 ms ticks);
  net       the same less the broker's idle CPU over the same wall time
            (its timers and --syncInterval poll, measured for IDLE seconds
            before the shapes): where the database takes 100 ms per request,
            the idle rate is what a raw figure would mostly hold;
  db        FerretDB's CPU per request (utime + stime from /proc);
  wall      the wall time per request (one connection: latency).

and prints the medians of the runs, and the ratio mongoc / corDB of the
broker's CPU (the median of the runs' ratios, each run's in brackets): the
issue's target is at most 2x. A benchmark: it never fails.

  python3 test/perf/mongo_bench.py [-n 1000] [-r 2000] [--r-slow 100] [--repeat 3]
                                   [--shapes retrieve,query,create,patch] [--binary PATH]

Batch shapes (BATCH items each, over the loaded Vehicles; their figures are
per batch ITEM): batch_upsert (options=update), batch_update, batch_merge,
batch_create (new entities) and batch_cd (a batch create of new entities,
then their batch delete: per item of the pair).

With --trips R the broker on mongoc runs under strace for R requests of each
shape, and the table is the database round trips per request (and per batch
item): the commands written to FerretDB's port (sendmsg/sendto/write/writev on
a socket whose peer is it). --binary runs another build (e.g. main's, for a
before/after) in place of the tree's.

With --callgrind R the brokers run under valgrind --tool=callgrind with the
instrumentation switched on only while the R requests of a shape are sent
(callgrind_control), and the table is the broker's instructions per request
(all threads; --syncInterval 600000 on both so that the time-driven poll of
the objects' version is not counted against requests that FerretDB makes
slow): on a busy machine the figure that does not drift.

FerretDB on SQLite is much slower than a MongoDB server, so its column says
where the time goes here, not what MongoDB would cost.
"""
import argparse
import glob
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "functional"))
import cpu_per_request as cpr  # noqa: E402
import ferret  # noqa: E402

SLOW = ("query", "patch", "batch_upsert", "batch_update", "batch_merge", "batch_create", "batch_cd")
BATCH = 20
_bseq = [0]


def _vehicles(i):
    return ["urn:ngsi-ld:Vehicle:%d" % ((i * BATCH + k) * 7919 % 1000) for k in range(BATCH)]


def _batch(op, body, want=204, params=""):
    return ("POST", "/ngsi-ld/v1/entityOperations/%s%s" % (op, params), cpr.JSON, body, want)


def _new_ids():
    _bseq[0] += 1
    return ["urn:ngsi-ld:BNew:%d:%d:%d" % (os.getpid(), _bseq[0], k) for k in range(BATCH)]


def _attrs(ids, i):
    return "[" + ",".join('{"id":"%s","type":"Vehicle","speed":{"type":"Property","value":%d}}' % (e, i % 120)
                          for e in ids) + "]"


def _cd(i):
    ids = _new_ids()
    return [_batch("create", "[" + ",".join('{"id":"%s","type":"BNew"}' % e for e in ids) + "]", 201),
            _batch("delete", "[" + ",".join('"%s"' % e for e in ids) + "]")]


cpr.WRITES.update({
    "batch_upsert": lambda i: [_batch("upsert", _attrs(_vehicles(i), i), 204, "?options=update")],
    "batch_update": lambda i: [_batch("update", _attrs(_vehicles(i), i))],
    "batch_merge": lambda i: [_batch("merge", _attrs(_vehicles(i), i))],
    "batch_create": lambda i: [_batch("create", "[" + ",".join('{"id":"%s","type":"BNew"}' % e
                                                              for e in _new_ids()) + "]", 201)],
    "batch_cd": _cd,
})


def per_item(s):
    """Requests per unit of a shape's figure: a batch counts its items."""
    return BATCH if s.startswith("batch_") else 1
IDLE = 3.0


def mongo_flags(srv):
    """A database of its own; a long --dbTimeout: a FerretDB query on a busy machine may take seconds."""
    return ferret.mongo_flags(srv, None, "--dbTimeout", "60000")


def broker_ns(pid):
    """The CPU time of the process's live threads, ns (schedstat's first field)."""
    t = 0
    for f in glob.glob("/proc/%d/task/*/schedstat" % pid):
        try:
            t += int(open(f).read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return t


def measure(srv, flags, n, r, r_slow, shapes, binary=None):
    out = {}
    with cpr.loaded_broker(binary, flags, n) as (b, c):
        time.sleep(0.5)
        i0, w0 = broker_ns(b.pid), time.perf_counter()
        time.sleep(IDLE)
        idle = (broker_ns(b.pid) - i0) / (time.perf_counter() - w0)   # ns per second
        for s in shapes:
            k = r_slow if s in SLOW else r
            cpr.send(c, s, 10)
            t0, d0, w0 = broker_ns(b.pid), cpr.cpu_seconds(srv.proc.pid), time.perf_counter()
            cpr.send(c, s, k)
            wall = time.perf_counter() - w0
            k *= per_item(s)
            raw = (broker_ns(b.pid) - t0) / k / 1e3
            out[s] = {"broker": raw, "net": max(0.0, raw - idle * wall / k / 1e3),
                      "db": (cpr.cpu_seconds(srv.proc.pid) - d0) / k * 1e6, "wall": wall / k * 1e6}
    return out


def callgrind(srv, flags, n, r, shapes, out, binary=None):
    """Instructions per request of each shape, the broker under callgrind."""
    import subprocess
    res = {}
    with cpr.loaded_broker(binary, tuple(flags) + ("--syncInterval", "600000"), n,
                           prefix=["valgrind", "--tool=callgrind", "--instr-atstart=no",
                                   "--callgrind-out-file=" + out + ".%p"]) as (b, c):
        for s in shapes:
            cpr.send(c, s, 10)
            subprocess.run(["callgrind_control", "-z", str(b.pid)], capture_output=True)
            subprocess.run(["callgrind_control", "-i", "on", str(b.pid)], capture_output=True)
            cpr.send(c, s, r)
            subprocess.run(["callgrind_control", "-i", "off", str(b.pid)], capture_output=True)
            d = subprocess.run(["callgrind_control", "-d", s, str(b.pid)], capture_output=True, text=True)
            files = sorted(glob.glob("%s.%d.*" % (out, b.pid)), key=os.path.getmtime)
            tot = 0
            for line in open(files[-1]):
                if line.startswith("summary:") or line.startswith("totals:"):
                    tot = int(line.split()[1])
            res[s] = tot / r / per_item(s)
            del d
    return res


def trips(srv, flags, n, r, shapes, binary):
    """Database round trips per request of each shape: the broker's writes to
    FerretDB's socket, counted by strace while the shape's r requests run."""
    import subprocess
    import tempfile
    port = srv.uri.rsplit(":", 1)[1].split("/")[0]
    res = {}
    with cpr.loaded_broker(binary, tuple(flags) + ("--syncInterval", "600000"), n) as (b, c):
        for s in shapes:
            cpr.send(c, s, 5)
            log = tempfile.mktemp(prefix="coraine-trips-")
            st = subprocess.Popen(["strace", "-f", "-yy", "-e", "trace=sendmsg,sendto,write,writev",
                                   "-o", log, "-p", str(b.pid)], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
            time.sleep(1.0)
            cpr.send(c, s, r)
            time.sleep(0.3)
            st.terminate()
            st.wait()
            cnt = sum(1 for line in open(log) if ":%s]>" % port in line)
            os.unlink(log)
            res[s] = cnt / r
    return res


def main_trips(a, shapes):
    srv = ferret.FerretServer()
    try:
        t = trips(srv, mongo_flags(srv), a.n, a.trips, shapes, a.binary)
    finally:
        srv.close()
    print("| shape | round trips / request | per item |")
    print("|---|---:|---:|")
    for s in shapes:
        print("| %s | %.2f | %.2f |" % (s, t[s], t[s] / per_item(s)))
    print("load average at the end: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))


def main_callgrind(a, shapes):
    import tempfile
    srv = ferret.FerretServer()
    tmp = tempfile.mkdtemp(prefix="coraine-cg-")
    try:
        c = callgrind(srv, (), a.n, a.callgrind, shapes, os.path.join(tmp, "cordb"), a.binary)
        m = callgrind(srv, mongo_flags(srv), a.n, a.callgrind, shapes, os.path.join(tmp, "mongoc"), a.binary)
    finally:
        srv.close()
    print("| shape | corDB instructions / request | mongoc instructions / request | mongoc / corDB |")
    print("|---|---:|---:|---:|")
    for s in shapes:
        print("| %s | %.0f | %.0f | %.2fx |" % (s, c[s], m[s], m[s] / c[s] if c[s] else 0))
    print("(callgrind outputs in %s)" % tmp)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=1000, help="Vehicles loaded (the PATCH shape needs 1000)")
    ap.add_argument("-r", type=int, default=2000, help="requests of retrieve and create")
    ap.add_argument("--r-slow", type=int, default=100, help="requests of query and patch")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each store, alternated")
    ap.add_argument("--shapes", default="retrieve,query,create,patch")
    ap.add_argument("--callgrind", type=int, default=0, metavar="R",
                    help="instructions per request under callgrind, R requests per shape")
    ap.add_argument("--trips", type=int, default=0, metavar="R",
                    help="database round trips per request under strace, R requests per shape")
    ap.add_argument("--binary", default=None, help="the broker to run (default: the tree's build)")
    a = ap.parse_args()
    shapes = a.shapes.split(",")
    if a.trips:
        main_trips(a, shapes)
        return
    if a.callgrind:
        main_callgrind(a, shapes)
        return
    srv = ferret.FerretServer()
    runs = {"corDB": [], "mongoc": []}
    try:
        for i in range(a.repeat):
            runs["corDB"].append(measure(srv, (), a.n, a.r, a.r_slow, shapes, a.binary))
            runs["mongoc"].append(measure(srv, mongo_flags(srv), a.n, a.r, a.r_slow, shapes, a.binary))
            print("run %d done (load average %s)" % (i + 1, " ".join(open("/proc/loadavg").read().split()[:3])),
                  file=sys.stderr, flush=True)
    finally:
        srv.close()

    def med(store, s, k):
        return statistics.median(x[s][k] for x in runs[store])

    print("| shape | corDB broker | mongoc broker | ratio (runs) | corDB net | mongoc net | net ratio (runs) "
          "| FerretDB | mongoc wall | corDB wall |")
    print("|---|---:|---:|---|---:|---:|---|---:|---:|---:|")
    for s in shapes:
        cols = []
        for k in ("broker", "net"):
            rs = [m[s][k] / c[s][k] if c[s][k] else 0.0 for c, m in zip(runs["corDB"], runs["mongoc"])]
            cols.append("%.0f µs | %.0f µs | %.2fx (%s)" % (med("corDB", s, k), med("mongoc", s, k),
                                                           statistics.median(rs),
                                                           ", ".join("%.2f" % x for x in rs)))
        print("| %s | %s | %s | %.0f µs | %.0f µs | %.0f µs |" % (s, cols[0], cols[1], med("mongoc", s, "db"),
                                                            med("mongoc", s, "wall"), med("corDB", s, "wall")))
    print("load average at the end: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))


if __name__ == "__main__":
    main()
