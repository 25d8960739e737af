#!/usr/bin/env python3
"""S7 loop: brokers registered to each other. A query or a retrieve must
terminate, with each broker's entities once (Via carries the brokers a
request went through: a registration whose alias is on it is skipped,
6.3.18), an absent id must be a prompt 404, and a redirect registration
that would send a request back to a broker it came through is 508 Loop
Detected (6.3.17).

MODE=check: two brokers registered to each other, then a ring of three.
MODE=load: wrk queries at one broker of the pair and of the ring:
requests/s, p50, p99, nothing but 200."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scen  # noqa: E402

API = "/ngsi-ld/v1"


def register(frm, to, alias, mode=None):
    body = {"type": "ContextSourceRegistration", "information": [{"entities": [{"type": "Vehicle"}]}],
            "endpoint": "http://127.0.0.1:%d" % to, "contextSourceAlias": alias}
    if mode:
        body["mode"] = mode
    st, payload, _ = scen.Client(frm).req("POST", API + "/csourceRegistrations", body)
    if st != 201:
        scen.fail("registration: %d %s" % (st, payload[:200]))


def ids_at(port):
    st, body = scen.Client(port).json("GET", API + "/entities?type=Vehicle&limit=1000")
    return st, sorted(e["id"] for e in body) if st == 200 else []


def main():
    ps = scen.Procs()
    try:
        names = ["s7-a", "s7-b", "s7-c", "s7-d", "s7-e"]
        ports = [ps.broker("--brokerAlias", n) for n in names]
        for k, p in enumerate(ports):
            st, body, _ = scen.Client(p).req("POST", API + "/entities", {"id": "urn:ngsi-ld:Vehicle:%s" % names[k],
                                                                         "type": "Vehicle"})
            if st != 201:
                scen.fail("create: %d" % st)
        a, b, c, d, e = ports
        problems = []
        register(a, b, "s7-b")
        register(b, a, "s7-a")
        register(c, d, "s7-d")
        register(d, e, "s7-e")
        register(e, c, "s7-c")
        times = []
        for port, want in ((a, names[:2]), (b, names[:2]), (c, names[2:]), (d, names[2:]), (e, names[2:])):
            t = time.time()
            st, got = ids_at(port)
            times.append(time.time() - t)
            if st != 200 or got != sorted("urn:ngsi-ld:Vehicle:%s" % n for n in want):
                problems.append("query at %d: %d %s" % (port, st, got))
            t = time.time()
            st, body = scen.Client(port).json("GET", API + "/entities/urn:ngsi-ld:Vehicle:absent")
            times.append(time.time() - t)
            if st != 404:
                problems.append("absent at %d: %d" % (port, st))
        # a redirect registration back to where the request came from
        f = ps.broker("--brokerAlias", "s7-f")
        register(f, a, "s7-a", mode="redirect")
        st, body, _ = scen.Client(f).req("GET", API + "/entities?type=Vehicle", headers={"Via": "1.1 s7-x, 1.1 s7-f"})
        if st != 508:
            problems.append("redirect loop: %d %s" % (st, body[:200]))
        verdict = not problems and max(times) < 5
        lines = ["Check: two brokers registered to each other and a ring of three each answer a query with the "
                 "entities of the loop once, an absent id with 404 (slowest answer %.0f ms); a redirect back to a "
                 "broker on the Via is 508%s." % (max(times) * 1000, "" if not problems else "; PROBLEMS: %s" % problems)]
        if scen.MODE == "load":
            rows = ["| query at | requests/s | p50 (µs) | p99 (µs) | non-2xx |", "|---|---:|---:|---:|---:|"]
            for name, port in (("a broker of the pair", a), ("a broker of the ring of three", c)):
                r = scen.wrk(port, 5, 8, 2, "s5_get.lua", [API + "/entities?type=Vehicle&limit=20", 1])
                verdict = verdict and r["bad"] == 0
                rows.append("| %s | %.0f | %.0f | %.0f | %d |" % (name, r["rps"], r["p50"], r["p99"], r["bad"]))
            lines += ["", "Load (wrk, 8 connections, 5 s each; six brokers on %d cores):" % (os.cpu_count() or 0),
                      ""] + rows
        return scen.report("s7_loop", "S7 loop", verdict, "\n".join(lines))
    finally:
        ps.close()


if __name__ == "__main__":
    sys.exit(main())
