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
  wall      the wall time per request (one connection: latency);
  kernel    the share of the broker's CPU spent in the kernel (utime and
            stime of /proc/PID/stat, clock ticks: give the fast shapes a few
            thousand requests for it to mean something).

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

With --pushdown BEFORE (mongoc only) the shapes of the query pushdown
(q_rel: q on a Relationship, q_str: a string no Vehicle has, idpattern: 10
Vehicles by pattern with the count, scopeq: a scope none has, selectors: POST
/entityOperations/query with two selectors) run on the build BEFORE (e.g.
/work/main's) and on this one, alternated: requests/s, the bytes the broker
received from the server per request (strace; both builds), the documents
the server sent per request (/statistics scannedDocuments: this build) and
the CPU of the broker and of FerretDB per request.

With --outbox R, the cost of the notification outbox (doc/mongodb.md
"Delivery across processes") for the --outbox-shapes (default patch: a
notifying PATCH; batch shapes too, and batch_purge: a batch create of 20
BPurge, then DELETE /entities?type=BPurge): a subscription on Vehicle, BNew
and BPurge (created, updated, deleted) to a receiver (tools/receiver), mongoc
with --notifyOutbox and with --notifyOutbox=false side by side, alternated
--repeat times: instructions per request (per item for a batch) under
callgrind (R requests) and database round trips per request (per batch, or
per pair) under strace (R requests).

FerretDB on SQLite is much slower than a MongoDB server, so its column says
where the time goes here, not what MongoDB would cost.

The CPU table goes to --csv (default test/perf/results/mongo_cpu.csv), the
--callgrind one to test/perf/results/mongo_callgrind.csv and the --trips one
to test/perf/results/mongo_trips.csv (each with its .meta.json: commit,
machine, load, command), for report.py's sections of doc/performance.md;
--pushdown and --outbox compare two builds or two settings and only print.
"""
import argparse
import glob
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "functional"))
sys.path.insert(0, os.path.join(HERE, "tune"))
import cpu_per_request as cpr  # noqa: E402
import ferret  # noqa: E402
import perf_run  # noqa: E402
import tuneRun  # noqa: E402

REPO = os.path.abspath(os.path.join(HERE, "..", ".."))

# The shapes of the query pushdown (doc/mongodb.md "Queries"): each selects
# few of the Vehicles (or none), so what the server sends is the figure.
V = "/ngsi-ld/v1/entities?type=Vehicle&"
cpr.SHAPES.update({
    "q_rel": (V + "q=isParked%3D%3Durn:ngsi-ld:Parking:7&limit=20", {}),          # 20 of 1000
    "q_str": (V + "q=brand%3D%3D%22Audi%22&limit=20", {}),                        # none
    "idpattern": (V + "idPattern=%5Eurn:ngsi-ld:Vehicle:9%5B0-9%5D%24&limit=20&count=true", {}),  # 10, exact
    "scopeq": (V + "scopeQ=%2FMadrid%2F%23&limit=20", {}),                         # none
})
cpr.WRITES["selectors"] = lambda i: [(
    "POST", "/ngsi-ld/v1/entityOperations/query?limit=20", {"Content-Type": "application/json"},
    '{"type":"Query","entities":[{"id":"urn:ngsi-ld:Vehicle:%d","type":"Vehicle"},'
    '{"idPattern":"^urn:ngsi-ld:Vehicle:%d$","type":"Vehicle"}]}' % (i % 1000, (i + 1) % 1000), 200)]
PUSHDOWN = ("q_rel", "q_str", "idpattern", "scopeq", "selectors")
SLOW = ("query", "patch", "batch_upsert", "batch_update", "batch_merge", "batch_create", "batch_cd",
        "batch_purge") + PUSHDOWN
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


def _purge(i):
    ids = _new_ids()
    return [_batch("create", "[" + ",".join('{"id":"%s","type":"BPurge"}' % e for e in ids) + "]", 201),
            ("DELETE", "/ngsi-ld/v1/entities?type=BPurge", {}, None, 204)]


cpr.WRITES.update({
    "batch_upsert": lambda i: [_batch("upsert", _attrs(_vehicles(i), i), 204, "?options=update")],
    "batch_update": lambda i: [_batch("update", _attrs(_vehicles(i), i))],
    "batch_merge": lambda i: [_batch("merge", _attrs(_vehicles(i), i))],
    "batch_create": lambda i: [_batch("create", "[" + ",".join('{"id":"%s","type":"BNew"}' % e
                                                              for e in _new_ids()) + "]", 201)],
    "batch_cd": _cd,
    "batch_purge": _purge,
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


def scanned(c):
    """/statistics' documents sent to the scans (mongoc, from the build that counts them), or None."""
    import json
    c.request("GET", "/statistics")
    st = json.loads(c.getresponse().read()).get("store", {})
    return st.get("scannedDocuments")


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
            s0 = scanned(c)
            us0 = cpr.user_sys(b.pid)
            t0, d0, w0 = broker_ns(b.pid), cpr.cpu_seconds(srv.proc.pid), time.perf_counter()
            cpr.send(c, s, k)
            wall = time.perf_counter() - w0
            t1, d1 = broker_ns(b.pid), cpr.cpu_seconds(srv.proc.pid)
            us1 = cpr.user_sys(b.pid)
            du, dsys = us1[0] - us0[0], us1[1] - us0[1]
            s1 = scanned(c)
            reqs = k
            k *= per_item(s)
            raw = (t1 - t0) / k / 1e3
            out[s] = {"broker": raw, "net": max(0.0, raw - idle * wall / k / 1e3),
                      "db": (d1 - d0) / k * 1e6, "wall": wall / k * 1e6, "rps": reqs / wall,
                      "docs": (s1 - s0) / reqs if s0 is not None and s1 is not None else None,
                      "sys": dsys / (du + dsys) if du + dsys else 0.0}
    return out


def subscribe(c, uri):
    """A subscription on every Vehicle (and the batch shapes' BNew and BPurge:
    their creations and deletions notify too) to uri, over the keep-alive connection c."""
    body = json.dumps({"type": "Subscription", "entities": [{"type": "Vehicle"}, {"type": "BNew"}, {"type": "BPurge"}],
                       "notificationTrigger": ["entityCreated", "entityUpdated", "entityDeleted"],
                       "notification": {"endpoint": {"uri": uri}}})
    c.request("POST", "/ngsi-ld/v1/subscriptions", body=body, headers={"Content-Type": "application/json"})
    resp = c.getresponse()
    resp.read()
    if resp.status != 201:
        raise RuntimeError("subscription: %d" % resp.status)


def callgrind(srv, flags, n, r, shapes, out, binary=None, sub_uri=None):
    """Instructions per request of each shape, the broker under callgrind."""
    import subprocess
    res = {}
    with cpr.loaded_broker(binary, tuple(flags) + ("--syncInterval", "600000"), n,
                           prefix=["valgrind", "--tool=callgrind", "--instr-atstart=no",
                                   "--callgrind-out-file=" + out + ".%p"]) as (b, c):
        if sub_uri:
            subscribe(c, sub_uri)
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


def trips(srv, flags, n, r, shapes, binary, sub_uri=None):
    """Database round trips per request of each shape: the broker's writes to
    FerretDB's socket, counted by strace while the shape's r requests run."""
    import subprocess
    import tempfile
    port = srv.uri.rsplit(":", 1)[1].split("/")[0]
    res = {}
    with cpr.loaded_broker(binary, tuple(flags) + ("--syncInterval", "600000"), n) as (b, c):
        if sub_uri:
            subscribe(c, sub_uri)
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


def received(srv, flags, n, r, shapes, binary):
    """KB the broker received from FerretDB per request of each shape: the
    return values of its reads on a socket whose peer is FerretDB (strace)."""
    import re
    import subprocess
    import tempfile
    port = srv.uri.rsplit(":", 1)[1].split("/")[0]
    res = {}
    with cpr.loaded_broker(binary, tuple(flags) + ("--syncInterval", "600000"), n) as (b, c):
        for s in shapes:
            cpr.send(c, s, 2)
            log = tempfile.mktemp(prefix="coraine-recv-")
            st = subprocess.Popen(["strace", "-f", "-yy", "-e", "trace=recvmsg,recvfrom,read,readv",
                                   "-o", log, "-p", str(b.pid)], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
            time.sleep(1.0)
            cpr.send(c, s, r)
            time.sleep(0.3)
            st.terminate()
            st.wait()
            tot = 0
            for line in open(log):
                m = re.search(r"= (\d+)$", line.rstrip())
                if m and ":%s]>" % port in line:
                    tot += int(m.group(1))
            os.unlink(log)
            res[s] = tot / r / 1024.0
    return res


def write_table(a, default, rows, runs):
    """rows to --csv (or test/perf/results/DEFAULT), printed as a markdown table as well."""
    path = a.csv or os.path.join(REPO, "test", "perf", "results", default)
    tuneRun.write_csv(path, rows, "test/perf/mongo_bench.py", runs=runs)
    tuneRun.print_table(rows)
    print("(%s) load average at the end: %s" % (path, " ".join(open("/proc/loadavg").read().split()[:3])))


def main_trips(a, shapes):
    srv = ferret.FerretServer()
    try:
        t = trips(srv, mongo_flags(srv), a.n, a.trips, shapes, a.binary)
    finally:
        srv.close()
    write_table(a, "mongo_trips.csv", [{"shape": s, "roundTripsPerRequest": "%.2f" % t[s],
                                        "perItem": "%.2f" % (t[s] / per_item(s))} for s in shapes], 1)


def main_callgrind(a, shapes):
    import tempfile
    srv = ferret.FerretServer()
    tmp = tempfile.mkdtemp(prefix="coraine-cg-")
    try:
        c = callgrind(srv, (), a.n, a.callgrind, shapes, os.path.join(tmp, "cordb"), a.binary)
        m = callgrind(srv, mongo_flags(srv), a.n, a.callgrind, shapes, os.path.join(tmp, "mongoc"), a.binary)
    finally:
        srv.close()
    print("(callgrind outputs in %s)" % tmp)
    write_table(a, "mongo_callgrind.csv", [
        {"shape": s, "corDBInstructionsPerRequest": "%.0f" % c[s], "mongocInstructionsPerRequest": "%.0f" % m[s],
         "mongocOverCorDB": "%.2fx" % (m[s] / c[s] if c[s] else 0), "target": "2x",
         "met": "yes" if c[s] and m[s] / c[s] <= 2 else "no"} for s in shapes], 1)


def main_pushdown(a, shapes):
    """mongoc only, the tree's build and --before's (e.g. main's), alternated
    --repeat times: per shape the requests/s, the documents the server sent
    per request (/statistics, the tree's build), the KB the broker received
    from the server per request (strace, 3 requests, both builds) and the CPU
    of each."""
    srv = ferret.FerretServer()
    runs = {"before": [], "after": []}
    try:
        kb = {"before": received(srv, mongo_flags(srv), a.n, 3, shapes, a.before),
              "after": received(srv, mongo_flags(srv), a.n, 3, shapes, a.binary)}
        for i in range(a.repeat):
            runs["before"].append(measure(srv, mongo_flags(srv), a.n, a.r, a.r_slow, shapes, a.before))
            runs["after"].append(measure(srv, mongo_flags(srv), a.n, a.r, a.r_slow, shapes, a.binary))
            print("run %d done (load average %s)" % (i + 1, " ".join(open("/proc/loadavg").read().split()[:3])),
                  file=sys.stderr, flush=True)
    finally:
        srv.close()

    def med(w, s, k):
        if k == "kb":
            return kb[w][s]
        xs = [x[s][k] for x in runs[w] if x[s][k] is not None]
        return statistics.median(xs) if xs else float("nan")

    print("| shape | requests/s before | after | KB from the server / request before | after | documents / request after "
          "| broker CPU before | after | FerretDB CPU before | after |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s in shapes:
        print("| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.0f µs | %.0f µs | %.0f µs | %.0f µs |" % (
            s, med("before", s, "rps"), med("after", s, "rps"), med("before", s, "kb"), med("after", s, "kb"),
            med("after", s, "docs"), med("before", s, "broker"), med("after", s, "broker"),
            med("before", s, "db"), med("after", s, "db")))

def main_outbox(a):
    """The --outbox-shapes (a notifying PATCH; batches) with the outbox on and off, alternated."""
    import subprocess
    import tempfile
    srv = ferret.FerretServer()
    rport = perf_run.free_port()
    rcv = subprocess.Popen([os.path.join(REPO, "build", "release", "tools", "receiver"), "--port", str(rport)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    uri = "http://127.0.0.1:%d/notify" % rport
    tmp = tempfile.mkdtemp(prefix="coraine-cg-")
    modes = (("outbox on", ()), ("outbox off", ("--notifyOutbox=false",)))
    shapes = a.outbox_shapes.split(",")
    ins = {(m, s): [] for m, _ in modes for s in shapes}
    trp = {(m, s): [] for m, _ in modes for s in shapes}
    try:
        time.sleep(0.3)
        for i in range(a.repeat):
            for m, extra in modes:
                fl = tuple(mongo_flags(srv)) + extra
                cg = callgrind(srv, fl, a.n, a.outbox, shapes, os.path.join(tmp, "%s-%d" % (m.replace(" ", "_"), i)),
                               a.binary, uri)
                tr = trips(srv, fl, a.n, a.outbox, shapes, a.binary, uri)
                for s in shapes:
                    ins[(m, s)].append(cg[s])
                    trp[(m, s)].append(tr[s])
            print("run %d done (load average %s)" % (i + 1, " ".join(open("/proc/loadavg").read().split()[:3])),
                  file=sys.stderr, flush=True)
    finally:
        rcv.kill()
        rcv.wait()
        srv.close()
    print("(batch shapes: %d items; instructions per item, round trips per request: the batch, or the pair of "
          "batch_cd / batch_purge)" % BATCH)
    print("| shape (mongoc, FerretDB) | outbox | instructions / item (median) | runs | round trips / request (median) "
          "| runs |")
    print("|---|---|---:|---|---:|---|")
    for s in shapes:
        for m, _ in modes:
            k = (m, s)
            print("| %s | %s | %.0f | %s | %.2f | %s |" % (
                s, m.split()[1], statistics.median(ins[k]), " ".join("%.0f" % x for x in ins[k]),
                statistics.median(trp[k]), " ".join("%.2f" % x for x in trp[k])))
    print("load average at the end: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))


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
    ap.add_argument("--outbox", type=int, default=0, metavar="R",
                    help="the --outbox-shapes with the outbox on and off: instructions and round trips, R requests")
    ap.add_argument("--outbox-shapes", default="patch",
                    help="shapes of --outbox (e.g. patch,batch_update,batch_upsert,batch_cd,batch_purge)")
    ap.add_argument("--binary", default=None, help="the broker to run (default: the tree's build)")
    ap.add_argument("--csv", default=None, help="where the table goes (default test/perf/results/mongo_cpu.csv, "
                    "mongo_callgrind.csv with --callgrind, mongo_trips.csv with --trips)")
    ap.add_argument("--pushdown", metavar="BEFORE", dest="before", default=None,
                    help="mongoc only: the pushdown shapes (default --shapes: %s) with the build BEFORE "
                         "and this one, side by side" % ",".join(PUSHDOWN))
    a = ap.parse_args()
    if a.before and a.shapes == "retrieve,query,create,patch":
        a.shapes = ",".join(PUSHDOWN)
    shapes = a.shapes.split(",")
    if a.before:
        main_pushdown(a, shapes)
        return
    if a.outbox:
        main_outbox(a)
        return
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

    rows = []
    for s in shapes:
        row = {"shape": s}
        for k, name in (("broker", "broker"), ("net", "net")):
            rs = [m[s][k] / c[s][k] if c[s][k] else 0.0 for c, m in zip(runs["corDB"], runs["mongoc"])]
            row.update({"corDB %s µs" % name: "%.0f" % med("corDB", s, k),
                        "mongoc %s µs" % name: "%.0f" % med("mongoc", s, k),
                        "%s ratio" % name: "%.2fx" % statistics.median(rs),
                        "%s ratio runs" % name: " ".join("%.2f" % x for x in rs)})
        row.update({"FerretDB µs": "%.0f" % med("mongoc", s, "db"),
                    "mongoc wall µs": "%.0f" % med("mongoc", s, "wall"),
                    "corDB wall µs": "%.0f" % med("corDB", s, "wall"),
                    "corDB in the kernel": "%.0f %%" % (med("corDB", s, "sys") * 100),
                    "mongoc in the kernel": "%.0f %%" % (med("mongoc", s, "sys") * 100)})
        rows.append(row)
    write_table(a, "mongo_cpu.csv", rows, a.repeat)


if __name__ == "__main__":
    main()
