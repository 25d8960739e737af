#!/usr/bin/env python3
"""S6 collision: the same entity id at the hub and at a source. The hub
merges them (the attributes of both; the most recent observedAt for one
both have), its local data wins over an auxiliary source, and a
registration that would overlap exclusive or redirect ones, or the hub's
own data, is refused 409 Conflict.

MODE=check: each of those once.
MODE=load: wrk retrieve of a colliding entity at the hub (merged with the
source) against local=true (the hub alone): the cost of the merge."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scen  # noqa: E402

API = "/ngsi-ld/v1"
CONFLICT = "https://uri.etsi.org/ngsi-ld/errors/Conflict"


def create(c, body):
    st, payload, _ = c.req("POST", API + "/entities", body)
    if st != 201:
        scen.fail("create %s: %d %s" % (body["id"], st, payload[:200]))


def register(hub, **members):
    body = {"type": "ContextSourceRegistration"}
    body.update(members)
    st, payload, _ = scen.Client(hub).req("POST", API + "/csourceRegistrations", body)
    return st, payload


def main():
    ps = scen.Procs()
    try:
        hub = ps.broker("--brokerAlias", "s6-hub")
        src = ps.broker("--brokerAlias", "s6-src")
        aux = ps.broker("--brokerAlias", "s6-aux")
        h, s, x = scen.Client(hub), scen.Client(src), scen.Client(aux)
        problems = []
        for i in range(100):
            create(h, {"id": "urn:ngsi-ld:Car:%d" % i, "type": "Car", "brand": {"type": "Property", "value": "hub"},
                       "speed": {"type": "Property", "value": 1, "observedAt": "2020-01-01T00:00:00Z"}})
            create(s, {"id": "urn:ngsi-ld:Car:%d" % i, "type": "Car", "color": {"type": "Property", "value": "red"},
                       "speed": {"type": "Property", "value": 2, "observedAt": "2021-01-01T00:00:00Z"}})
        st, body = register(hub, information=[{"entities": [{"type": "Car"}]}],
                            endpoint="http://127.0.0.1:%d" % src)
        if st != 201:
            scen.fail("registration: %d %s" % (st, body[:200]))
        st, e = h.json("GET", API + "/entities/urn:ngsi-ld:Car:7")
        if st != 200 or e["brand"]["value"] != "hub" or e["color"]["value"] != "red" or e["speed"]["value"] != 2:
            problems.append("merge: %d %s" % (st, str(e)[:300]))
        st, page = h.json("GET", API + "/entities?type=Car&limit=1000")
        if st != 200 or len(page) != 100 or any("color" not in q or "brand" not in q for q in page):
            problems.append("query merged once: %d, %d entities" % (st, len(page or [])))
        # local over auxiliary
        create(h, {"id": "urn:ngsi-ld:Bus:1", "type": "Bus",
                   "speed": {"type": "Property", "value": 1, "observedAt": "2020-01-01T00:00:00Z"}})
        create(x, {"id": "urn:ngsi-ld:Bus:1", "type": "Bus", "route": {"type": "Property", "value": "42"},
                   "speed": {"type": "Property", "value": 9, "observedAt": "2024-01-01T00:00:00Z"}})
        st, body = register(hub, information=[{"entities": [{"type": "Bus"}]}], mode="auxiliary",
                            operations=["retrieveOps"], endpoint="http://127.0.0.1:%d" % aux)
        if st != 201:
            scen.fail("auxiliary registration: %d %s" % (st, body[:200]))
        st, e = h.json("GET", API + "/entities/urn:ngsi-ld:Bus:1")
        if st != 200 or e["speed"]["value"] != 1 or e["route"]["value"] != "42":
            problems.append("local over auxiliary: %d %s" % (st, str(e)[:300]))
        # 409s
        excl = lambda eid, attrs: dict(  # noqa: E731
            mode="exclusive", endpoint="http://127.0.0.1:%d" % aux,
            information=[{"entities": [{"id": eid, "type": "Truck"}], "propertyNames": attrs}])
        cases = [("exclusive over the hub's data", dict(mode="exclusive", endpoint="http://127.0.0.1:%d" % aux,
                  information=[{"entities": [{"id": "urn:ngsi-ld:Car:3", "type": "Car"}], "propertyNames": ["brand"]}]),
                  409)]
        st, body = register(hub, **excl("urn:ngsi-ld:Truck:1", ["load", "axles"]))
        if st != 201:
            problems.append("first exclusive: %d %s" % (st, body[:200]))
        cases += [("exclusive overlapping an exclusive", excl("urn:ngsi-ld:Truck:1", ["axles"]), 409),
                  ("redirect over an exclusive", dict(mode="redirect", endpoint="http://127.0.0.1:%d" % aux,
                                                     information=[{"entities": [{"type": "Truck"}]}]), 409),
                  ("exclusive on other attributes", excl("urn:ngsi-ld:Truck:1", ["color"]), 201)]
        for name, members, want in cases:
            st, body = register(hub, **members)
            ok = st == want and (want != 409 or CONFLICT.encode() in body)
            if not ok:
                problems.append("%s: %d %s" % (name, st, body[:200]))
        verdict = not problems
        lines = ["Check: the same id at the hub and a source is merged (each side's attributes, the most recent "
                 "observedAt), once in a query; the hub's data wins over an auxiliary source; exclusive over the "
                 "hub's data, exclusive overlapping exclusive and redirect over exclusive are 409 Conflict, "
                 "exclusive on other attributes is accepted%s." % ("" if verdict else "; PROBLEMS: %s" % problems)]
        if scen.MODE == "load":
            rows = ["| retrieve at the hub | requests/s | p50 (µs) | p99 (µs) | non-2xx |", "|---|---:|---:|---:|---:|"]
            for name, pattern in (("local=true (the hub alone)", API + "/entities/urn:ngsi-ld:Car:%d?local=true"),
                                  ("merged with the source", API + "/entities/urn:ngsi-ld:Car:%d")):
                r = scen.wrk(hub, 5, 8, 2, "s5_get.lua", [pattern, 100])
                verdict = verdict and r["bad"] == 0
                rows.append("| %s | %.0f | %.0f | %.0f | %d |" % (name, r["rps"], r["p50"], r["p99"], r["bad"]))
            lines += ["", "Load (wrk, 8 connections, 5 s each, 100 colliding entities; %d cores):" % (
                os.cpu_count() or 0), ""] + rows
        return scen.report("s6_collision", "S6 collision", verdict, "\n".join(lines))
    finally:
        ps.close()


if __name__ == "__main__":
    sys.exit(main())
