#!/usr/bin/env python3
"""S3 slow subscriber: ten fast notification endpoints and one that answers
each notification after 500 ms, all subscribed to the same changes. The slow
one must hold nobody back: each endpoint has its own queue and lanes, so
the fast ones get every change about as soon as it is written, while the
slow one catches up on its own (batches of queued changes) and loses
nothing either.

MODE=check: 300 updates over 50 entities; every fast endpoint has all 300
changes within 5 s of the last write, in order and once; the slow one all of
them within 60 s.
MODE=load: 1,000 and 4,000 updates (4 writers): write rate, the time until
every fast endpoint has everything, and the slow one's (it gets batches of
the changes queued in each of its --notifierInflight lanes, one per 500 ms)."""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scen  # noqa: E402

API = "/ngsi-ld/v1"


def round_(port, fast, slow, n, entities=50):
    for r in fast + [slow]:
        scen.Client(r).req("POST", "/reset")
    errors = []

    def writer(k, count):
        c = scen.Client(port)
        for i in range(count):
            st, _, _ = c.req("PATCH", API + "/entities/urn:ngsi-ld:S3:%d/attrs" % ((i * 4 + k) % entities),
                             {"t": {"type": "Property", "value": i}})
            if st != 204:
                errors.append(st)
    t0 = time.time()
    ts = [threading.Thread(target=writer, args=(k, n // 4)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    t_written = time.time()
    want = (n // 4) * 4
    done_fast, done_slow, order_bad = None, None, 0
    deadline = t_written + 120
    while time.time() < deadline and (done_fast is None or done_slow is None):
        if done_fast is None and all(scen.receiver_count(r)["entities"] >= want for r in fast):
            done_fast = time.time() - t_written
        if done_slow is None and scen.receiver_count(slow)["entities"] >= want:
            done_slow = time.time() - t_written
        time.sleep(0.02)
    for r in fast + [slow]:
        c = scen.receiver_count(r)
        order_bad += c["outOfOrder"] + c["duplicates"] + max(0, c["entities"] - want)
    return {"n": want, "write_s": t_written - t0, "fast": done_fast, "slow": done_slow, "errors": len(errors),
            "order_bad": order_bad}


def main():
    ps = scen.Procs()
    try:
        port = ps.broker("--connectionPoolSize", "4")
        fast = [ps.receiver() for _ in range(10)]
        slow = ps.receiver("--delay", "500")
        c = scen.Client(port)
        st, body, _ = c.req("POST", API + "/entityOperations/create",
                            [{"id": "urn:ngsi-ld:S3:%d" % i, "type": "S3", "t": {"type": "Property", "value": -1}}
                             for i in range(50)])
        if st != 201:
            scen.fail("create: %d %s" % (st, body[:200]))
        for r in fast + [slow]:
            st, body, _ = c.req("POST", API + "/subscriptions", {
                "type": "Subscription", "entities": [{"type": "S3"}], "watchedAttributes": ["t"],
                "notification": {"endpoint": {"uri": "http://127.0.0.1:%d/notify" % r}, "sysAttrs": True}})
            if st != 201:
                scen.fail("subscription: %d %s" % (st, body[:200]))
        time.sleep(0.5)
        res = round_(port, fast, slow, 300)
        verdict = (not res["errors"] and not res["order_bad"] and res["fast"] is not None and res["fast"] <= 5
                   and res["slow"] is not None)
        fmt = lambda v: "%.2f s" % v if v is not None else "not within 120 s"  # noqa: E731
        lines = ["Check: %d updates written in %.2f s; every fast endpoint had all of them %s after the last "
                 "write, the slow one (500 ms per notification) %s; %d errors, %d out of order/duplicate/extra." % (
                     res["n"], res["write_s"], fmt(res["fast"]), fmt(res["slow"]), res["errors"], res["order_bad"])]
        if scen.MODE == "load":
            rows = ["| updates | writes/s | fast endpoints complete after | slow endpoint complete after |",
                    "|---:|---:|---:|---:|"]
            for n in (1000, 4000):
                r = round_(port, fast, slow, n)
                if r["errors"] or r["order_bad"] or r["fast"] is None or r["slow"] is None or r["fast"] > 5:
                    verdict = False
                rows.append("| %d | %.0f | %s | %s |" % (r["n"], r["n"] / r["write_s"], fmt(r["fast"]), fmt(r["slow"])))
            lines += ["", "Load (4 Python writers over 50 entities; 11 subscriptions, one per endpoint; times after "
                          "the last write; %d cores):" % (os.cpu_count() or 0), ""] + rows
        return scen.report("s3_slow_subscriber", "S3 slow subscriber", verdict, "\n".join(lines))
    finally:
        ps.close()


if __name__ == "__main__":
    sys.exit(main())
