#!/usr/bin/env python3
"""S4 fan-in: fifty subscriptions on one entity; every update of it is due
fifty times. Every notification must be delivered (the broker's counters and
the receivers' agree: nothing dropped or failed, each change once and in
order per subscription), and the report gives notifications per second.

MODE=check: 40 updates -> 2,000 changes to deliver, within 30 s.
MODE=load: 200, 1,000 and 4,000 updates (one writer, as fast as it is
answered): changes delivered per second from the first write to the last
delivery, and notifications (HTTP requests) per second."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scen  # noqa: E402

API = "/ngsi-ld/v1"
SUBS, RECEIVERS = 50, 5


def round_(port, rcvs, n):
    for r in rcvs:
        scen.Client(r).req("POST", "/reset")
    m0 = scen.metrics(port)
    c = scen.Client(port)
    errors = 0
    t0 = time.time()
    for i in range(n):
        st, _, _ = c.req("PATCH", API + "/entities/urn:ngsi-ld:Fan:0/attrs", {"v": {"type": "Property", "value": i}})
        errors += st != 204
    t_written = time.time()
    want = SUBS * n
    deadline = t_written + 120
    got = 0
    while time.time() < deadline:
        got = sum(scen.receiver_count(r)["entities"] for r in rcvs)
        if got >= want:
            break
        time.sleep(0.02)
    t_done = time.time()
    time.sleep(0.3)
    counts = [scen.receiver_count(r) for r in rcvs]
    m1 = scen.metrics(port)
    d = lambda k: m1.get(k, 0) - m0.get(k, 0)  # noqa: E731
    dropped = sum(m1[k] - m0.get(k, 0) for k in m1 if k.startswith("coraine_notify_dropped_total"))
    return {"n": n, "want": want, "got": sum(x["entities"] for x in counts),
            "notifications": sum(x["notifications"] for x in counts), "errors": errors,
            "bad": sum(x["outOfOrder"] + x["duplicates"] for x in counts), "dropped": dropped,
            "failed": d("coraine_notify_failed_total"), "due": d("coraine_notify_due_total"),
            "delivered": d("coraine_notify_delivered_changes_total"),
            "write_s": t_written - t0, "total_s": t_done - t0}


def ok(r):
    return (r["errors"] == 0 and r["got"] == r["want"] and r["bad"] == 0 and r["dropped"] == 0 and r["failed"] == 0
            and r["delivered"] == r["want"])


def main():
    ps = scen.Procs()
    try:
        port = ps.broker("--connectionPoolSize", "4")
        rcvs = [ps.receiver() for _ in range(RECEIVERS)]
        c = scen.Client(port)
        st, body, _ = c.req("POST", API + "/entities", {"id": "urn:ngsi-ld:Fan:0", "type": "Fan",
                                                       "v": {"type": "Property", "value": -1}})
        if st != 201:
            scen.fail("create: %d %s" % (st, body[:200]))
        for s in range(SUBS):
            st, body, _ = c.req("POST", API + "/subscriptions", {
                "type": "Subscription", "entities": [{"id": "urn:ngsi-ld:Fan:0", "type": "Fan"}],
                "watchedAttributes": ["v"],
                "notification": {"endpoint": {"uri": "http://127.0.0.1:%d/notify/%d" % (rcvs[s % RECEIVERS], s)},
                                 "sysAttrs": True}})
            if st != 201:
                scen.fail("subscription: %d %s" % (st, body[:200]))
        time.sleep(0.3)
        r = round_(port, rcvs, 40)
        verdict = ok(r) and r["total_s"] <= 30
        line = lambda r: ("%d updates: %d of %d changes delivered (broker: due %d, delivered %d, failed %d, dropped %d; "  # noqa: E731
                          "receivers: %d notifications, %d out of order or twice) in %.2f s" % (
                              r["n"], r["got"], r["want"], r["due"], r["delivered"], r["failed"], r["dropped"],
                              r["notifications"], r["bad"], r["total_s"]))
        lines = ["Check: " + line(r) + "."]
        if scen.MODE == "load":
            rows = ["| updates | changes due | writes/s | changes delivered/s | notifications/s | all delivered |",
                    "|---:|---:|---:|---:|---:|---|"]
            for n in (200, 1000, 4000):
                r = round_(port, rcvs, n)
                verdict = verdict and ok(r)
                rows.append("| %d | %d | %.0f | %.0f | %.0f | %s |" % (
                    n, r["want"], n / r["write_s"], r["got"] / r["total_s"], r["notifications"] / r["total_s"],
                    "yes" if ok(r) else "NO: " + line(r)))
            lines += ["", "Load (one Python writer; %d subscriptions over %d receivers; rates from the first write "
                          "to the last delivery; %d cores):" % (SUBS, RECEIVERS, os.cpu_count() or 0), ""] + rows
        return scen.report("s4_fan_in", "S4 fan-in", verdict, "\n".join(lines))
    finally:
        ps.close()


if __name__ == "__main__":
    sys.exit(main())
