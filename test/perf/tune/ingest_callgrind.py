#!/usr/bin/env python3
"""ingest_callgrind.py - the broker's instructions per request of a workload's create and PATCH.

make tune's wrk script (tuneGen.py mix_lua) sends, for a workload file, creates
of a new entity of its types (every attribute of the type, observedAt where the
file says so) and PATCH /entities/{id}/attrs of load.patch.attributes. This
starts each --bin under valgrind --tool=callgrind with the workload's store
(corDB in RAM: the file must say so), loads -n entities of its first type
(tuneGen.py entity), then for each shape sends a few requests to warm up, zeroes
the counters, sends -r requests over one keep-alive connection, dumps and prints
the instructions of the whole process (every thread) per request: counts that
the other load of a shared machine does not change. --keep DIR keeps the dumps
for callgrind_annotate --inclusive=yes.

  python3 test/perf/tune/ingest_callgrind.py [--workload test/perf/tune/workload.ingest.json]
                                             [--bin A --bin B] [-n 2000] [-r 300] [--keep DIR] [--csv F]
"""
import argparse
import http.client
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import perf_run  # noqa: E402
import tuneGen  # noqa: E402
import tuneRun  # noqa: E402
from callgrind_requests import per_request, table  # noqa: E402

JSON = {"Content-Type": "application/json"}


def shapes(w):
    """{name: f(i) -> (method, path, body, status)}: the wrk script's create and PATCH of the first type."""
    t = w["entities"]["types"][0]
    pattrs = tuneGen.patch_attrs(w, t)

    def create(i):
        e = tuneGen.entity(t, 0)
        e["id"] = "urn:ngsi-ld:%s:cg-%d-%d" % (t["type"], os.getpid(), i)
        return ("POST", "/ngsi-ld/v1/entities", json.dumps(e, separators=(",", ":")), 201)

    def patch(i):
        body = {a["name"]: tuneGen.attr_value(a, (i % 32) * 37 + 11) for a in pattrs}
        return ("PATCH", "/ngsi-ld/v1/entities/urn:ngsi-ld:%s:%d/attrs" % (t["type"], 1 + i * 7919 % n_loaded[0]),
                json.dumps(body, separators=(",", ":")), 204)
    return {"create": create, "patch": patch}


n_loaded = [1]
_sent = [0]


def send(c, f, times):
    for _ in range(times):
        _sent[0] += 1
        method, path, body, want = f(_sent[0])
        c.request(method, path, body=body, headers=JSON)
        r = c.getresponse()
        r.read()
        if r.status != want:
            raise RuntimeError("%s %s: %d" % (method, path, r.status))


def load(base, w, n):
    t = w["entities"]["types"][0]
    for lo in range(1, n + 1, 500):
        ents = [tuneGen.entity(t, i) for i in range(lo, min(n, lo + 499) + 1)]
        perf_run.post(base + "/ngsi-ld/v1/entityOperations/upsert", ents)


def measure(binary, w, n, r, names, d):
    prefix = os.path.join(d, "cg.%s" % os.path.basename(os.path.dirname(os.path.abspath(binary))))
    port = perf_run.free_port()
    b = perf_run.start_broker(port, [], binary=binary,
                              prefix=["valgrind", "--tool=callgrind", "--callgrind-out-file=" + prefix + ".%p"])
    out = {}
    try:
        base = "http://127.0.0.1:%d" % port
        perf_run.wait_up(base + "/version", timeout=120)
        load(base, w, n)
        n_loaded[0] = n
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        fs = shapes(w)
        for s in names:
            out[s] = per_request(b.pid, prefix, lambda: send(c, fs[s], 20), lambda: send(c, fs[s], r), r)
        c.close()
    finally:
        b.terminate()
        b.wait()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", default=os.path.join(HERE, "workload.ingest.json"))
    ap.add_argument("--bin", action="append")
    ap.add_argument("-n", type=int, default=2000)
    ap.add_argument("-r", type=int, default=300)
    ap.add_argument("--shapes", default="create,patch")
    ap.add_argument("--keep", help="keep the callgrind dumps in this directory (for callgrind_annotate)")
    ap.add_argument("--csv", help="also write build,shape,instructionsPerRequest rows here (report.py: "
                                  "test/perf/results/callgrind_<workload>.csv)")
    a = ap.parse_args()
    w = tuneGen.check(tuneGen.load_file(a.workload))
    st = w["store"]
    if st["database"] != "corDB" or st["persistent"] or st["history"] != "none":
        sys.exit("ingest_callgrind: the workload's store must be corDB in RAM without history")
    names = a.shapes.split(",")
    res = table(a.bin or [perf_run.BIN], names, a.keep, lambda b, d: measure(b, w, a.n, a.r, names, d))
    if a.csv:
        tuneRun.write_csv(a.csv, [{"build": os.path.basename(os.path.dirname(os.path.abspath(b))), "shape": s,
                                   "instructionsPerRequest": round(m[s])} for b, m in res for s in names],
                          "test/perf/tune/ingest_callgrind.py", workload=os.path.basename(a.workload))


if __name__ == "__main__":
    main()
