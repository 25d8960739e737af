#!/usr/bin/env python3
"""S5 hub and two sources: a hub broker with local data and two coraine
sources registered for the same type. A federated query and a retrieve at
the hub must be complete and merged (every entity of the three, each once,
the count exact, pages that add up), an absent id 404.

MODE=check: 200 + 200 entities at the sources, 20 at the hub.
MODE=load: wrk at the hub: local retrieve, retrieve forwarded to a source,
local-only query page, federated query page (limit 20); requests/s, p50,
p99."""
import os
import sys
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scen  # noqa: E402

API = "/ngsi-ld/v1"


def vehicles(c, start, n, where):
    ents = [{"id": "urn:ngsi-ld:Vehicle:%d" % i, "type": "Vehicle", "speed": {"type": "Property", "value": i},
             "where": {"type": "Property", "value": where}} for i in range(start, start + n)]
    st, body, _ = c.req("POST", API + "/entityOperations/create", ents)
    if st != 201:
        scen.fail("create at %s: %d %s" % (where, st, body[:300]))


def register(hub, src_port, alias):
    st, body, _ = scen.Client(hub).req("POST", API + "/csourceRegistrations", {
        "type": "ContextSourceRegistration", "information": [{"entities": [{"type": "Vehicle"}]}],
        "endpoint": "http://127.0.0.1:%d" % src_port, "contextSourceAlias": alias})
    if st != 201:
        scen.fail("registration: %d %s" % (st, body[:300]))


def main():
    ps = scen.Procs()
    try:
        hub = ps.broker("--brokerAlias", "s5-hub")
        a = ps.broker("--brokerAlias", "s5-a")
        b = ps.broker("--brokerAlias", "s5-b")
        vehicles(scen.Client(a), 0, 200, "a")
        vehicles(scen.Client(b), 200, 200, "b")
        vehicles(scen.Client(hub), 400, 20, "hub")
        register(hub, a, "s5-a")
        register(hub, b, "s5-b")
        c = scen.Client(hub)
        problems = []
        st, body = c.json("GET", API + "/entities?type=Vehicle&limit=1000")
        ids = [e["id"] for e in body] if st == 200 else []
        if st != 200 or len(ids) != 420 or len(set(ids)) != 420:
            problems.append("query: %d, %d ids, %d distinct" % (st, len(ids), len(set(ids))))
        pages = set()
        for off in range(0, 420, 100):
            st, body = c.json("GET", API + "/entities?type=Vehicle&limit=100&offset=%d" % off)
            pages.update(e["id"] for e in body or [])
        if len(pages) != 420:
            problems.append("pages of 100 give %d distinct ids" % len(pages))
        st, body = c.json("GET", API + "/entities?type=Vehicle&limit=1000&q=" + urllib.parse.quote("speed>=390"))
        if st != 200 or sorted(e["speed"]["value"] for e in body) != list(range(390, 420)):
            problems.append("q across hub and sources: %d %s" % (st, str(body)[:200]))
        for i, where in ((5, "a"), (250, "b"), (410, "hub")):
            st, body = c.json("GET", API + "/entities/urn:ngsi-ld:Vehicle:%d" % i)
            if st != 200 or body["where"]["value"] != where or body["speed"]["value"] != i:
                problems.append("retrieve %d: %d %s" % (i, st, str(body)[:200]))
        st, body = c.json("GET", API + "/entities/urn:ngsi-ld:Vehicle:99999")
        if st != 404 or body.get("type") != "https://uri.etsi.org/ngsi-ld/errors/ResourceNotFound":
            problems.append("absent id: %d %s" % (st, body))
        verdict = not problems
        lines = ["Check: a query at the hub gives all 420 entities (200 + 200 at the sources, 20 local) once each, "
                 "pages of 100 add up, q filters across the three, retrieves find each source's and the hub's, "
                 "an absent id is 404 ResourceNotFound%s." % ("" if verdict else "; PROBLEMS: %s" % problems)]
        if scen.MODE == "load":
            rows = ["| request at the hub | requests/s | p50 (µs) | p99 (µs) | non-2xx |", "|---|---:|---:|---:|---:|"]
            for name, pattern, n in (
                    ("retrieve, local entity", API + "/entities/urn:ngsi-ld:Vehicle:4%d", 10),
                    ("retrieve, entity at a source", API + "/entities/urn:ngsi-ld:Vehicle:1%d", 100),
                    ("query page (limit 20), local=true", API + "/entities?type=Vehicle&limit=20&local=true", 1),
                    ("query page (limit 20), federated", API + "/entities?type=Vehicle&limit=20", 1)):
                r = scen.wrk(hub, 5, 8, 2, "s5_get.lua", [pattern, n])
                verdict = verdict and r["bad"] == 0
                rows.append("| %s | %.0f | %.0f | %.0f | %d |" % (name, r["rps"], r["p50"], r["p99"], r["bad"]))
            lines += ["", "Load (wrk, 8 connections, 5 s each; three brokers on %d cores):" % (os.cpu_count() or 0),
                      ""] + rows
        return scen.report("s5_hub_two_sources", "S5 hub and two sources", verdict, "\n".join(lines))
    finally:
        ps.close()


if __name__ == "__main__":
    sys.exit(main())
