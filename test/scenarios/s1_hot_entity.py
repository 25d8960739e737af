#!/usr/bin/env python3
"""S1 hot entity: concurrent partial updates of ONE entity, each writer on
its own datasetId instance of the same attribute, against the same load
spread over 1,000 entities. Nothing may be lost (every writer's last value
is its instance's value; the broker counts as many updates as were
answered), and the report gives the p99 cost of the contention.

MODE=check: 8 writers x 40 updates each way, verified instance by instance.
MODE=load: wrk, one datasetId per wrk thread, 1 / 4 / 16 writers, 5 s each:
requests/s and p50/p99 hot and spread; updates counted by the broker
against those wrk saw answered."""
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scen  # noqa: E402

API = "/ngsi-ld/v1"
WRITERS = 64                  # instances made up front (the most writers of the ladder)


def entity(i):
    return {"id": "urn:ngsi-ld:Hot:%d" % i, "type": "Hot",
            "speed": [{"type": "Property", "value": 0, "datasetId": "urn:ngsi-ld:dataset:w%d" % k}
                      for k in range(WRITERS)]}


def check(port):
    c = scen.Client(port)
    lat = {"hot": [], "spread": []}
    lost = []
    for mode in ("hot", "spread"):
        n_writers, n = 8, 40
        errors = []

        def writer(k):
            w = scen.Client(port)
            for i in range(1, n + 1):
                e = 0 if mode == "hot" else (i * n_writers + k) % 1000
                st, body, dt = w.req("PATCH", API + "/entities/urn:ngsi-ld:Hot:%d/attrs" % e,
                                     {"speed": {"type": "Property", "value": i,
                                                "datasetId": "urn:ngsi-ld:dataset:w%d" % k}})
                lat[mode].append(dt)
                if st != 204:
                    errors.append((st, body[:200]))
        ts = [threading.Thread(target=writer, args=(k,)) for k in range(n_writers)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if errors:
            scen.fail("%s: %d updates not answered 204: %s" % (mode, len(errors), errors[:3]))
        # every writer's last value is in its instance
        for k in range(n_writers):
            for i in ([n] if mode == "hot" else range(n - 4, n + 1)):
                e = 0 if mode == "hot" else (i * n_writers + k) % 1000
                st, ent = c.json("GET", API + "/entities/urn:ngsi-ld:Hot:%d" % e)
                inst = [x for x in ent["speed"] if x.get("datasetId") == "urn:ngsi-ld:dataset:w%d" % k]
                if len(inst) != 1 or inst[0]["value"] != i:
                    lost.append((mode, e, k, i, inst))
        if mode == "hot":
            st, ent = c.json("GET", API + "/entities/urn:ngsi-ld:Hot:0")
            if len(ent["speed"]) != WRITERS:
                lost.append(("hot", "instances", len(ent["speed"])))
    return lat, lost


def main():
    ps = scen.Procs()
    try:
        port = ps.broker("--connectionPoolSize", "4")
        c = scen.Client(port)
        for start in range(0, 1000, 50):
            st, body, _ = c.req("POST", API + "/entityOperations/create", [entity(i) for i in range(start, start + 50)])
            if st != 201:
                scen.fail("load: %d %s" % (st, body[:300]))
        lat, lost = check(port)
        ms = lambda v: v * 1000  # noqa: E731
        rows = ["| writers | updates/s hot | p50 hot (µs) | p99 hot (µs) | updates/s spread | p50 spread (µs) | "
                "p99 spread (µs) | p99 hot / spread |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        lines = ["Check (8 writers x 40 updates, Python clients): p99 hot %.2f ms, spread %.2f ms; %s." % (
            ms(scen.pct(lat["hot"], 99)), ms(scen.pct(lat["spread"], 99)),
            "nothing lost (every writer's last value in its instance, 64 instances kept)" if not lost
            else "LOST: %s" % lost[:5])]
        verdict = not lost
        if scen.MODE == "load":
            for w in (1, 4, 16):
                res = {}
                for mode in ("hot", "spread"):
                    before = scen.metrics(port).get('coraine_store_operations_total{op="update"}', 0)
                    r = scen.wrk(port, 5, w, w, "s1_ds.lua", [mode])
                    after = scen.metrics(port).get('coraine_store_operations_total{op="update"}', 0)
                    counted = after - before
                    # the broker may have answered a few that wrk stopped waiting for (at most one per connection)
                    if r["bad"] or counted < r["requests"] or counted > r["requests"] + w:
                        verdict = False
                        lines.append("%s, %d writers: wrk %d answered (%d non-2xx), broker counted %d updates" % (
                            mode, w, r["requests"], r["bad"], counted))
                    res[mode] = r
                rows.append("| %d | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.2f |" % (
                    w, res["hot"]["rps"], res["hot"]["p50"], res["hot"]["p99"], res["spread"]["rps"],
                    res["spread"]["p50"], res["spread"]["p99"],
                    res["hot"]["p99"] / res["spread"]["p99"] if res["spread"]["p99"] else 0))
            lines.append("")
            lines.append("Load (wrk, one datasetId per writer, 5 s per step, `--connectionPoolSize 4`, %d cores): "
                         "updates the broker counted equal those wrk saw answered at every step." % (os.cpu_count() or 0))
            lines.append("")
            lines += rows
        return scen.report("s1_hot_entity", "S1 hot entity", verdict, "\n".join(lines))
    finally:
        ps.close()


if __name__ == "__main__":
    sys.exit(main())
