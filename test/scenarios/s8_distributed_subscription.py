#!/usr/bin/env python3
"""S8 distributed subscription: a subscription at a hub for an entity that a
source holds (a registration with federationOps, which include the
subscription operations, 5.8.1.4). The hub plants a subscription at the
source; every change accepted at the source must reach the hub's subscriber
exactly once and in order (counted against the source's 204s: nothing lost,
nothing twice), as a notification of the hub's subscription, over HTTP and
over cor://.

MODE=check: 200 updates at the source, over each transport, within 30 s.
MODE=load: 250, 1,000 and 4,000 updates (one writer at the source, as fast
as it is answered) over each transport: changes delivered to the hub's
subscriber per second from the first write to the last delivery."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scen  # noqa: E402

API = "/ngsi-ld/v1"


def setup(ps, over):
    cor = scen.free_port()
    src = ps.broker("--brokerAlias", "s8-src-" + over, "--corPort", str(cor))
    hub = ps.broker("--brokerAlias", "s8-hub-" + over)
    hub_pid = ps.procs[-1].pid
    rcv = ps.receiver()
    eid = "urn:ngsi-ld:Vehicle:s8-" + over
    st, body, _ = scen.Client(src).req("POST", API + "/entities", {"id": eid, "type": "Vehicle",
                                                                   "speed": {"type": "Property", "value": 0}})
    if st != 201:
        scen.fail("create: %d %s" % (st, body[:200]))
    endpoint = "cor://127.0.0.1:%d" % cor if over == "cor" else "http://127.0.0.1:%d" % src
    st, body, _ = scen.Client(hub).req("POST", API + "/csourceRegistrations", {
        "type": "ContextSourceRegistration", "information": [{"entities": [{"id": eid, "type": "Vehicle"}]}],
        "endpoint": endpoint, "operations": ["federationOps"]})
    if st != 201:
        scen.fail("registration: %d %s" % (st, body[:200]))
    st, body, _ = scen.Client(hub).req("POST", API + "/subscriptions", {
        "type": "Subscription", "entities": [{"id": eid, "type": "Vehicle"}],
        "notification": {"endpoint": {"uri": "http://127.0.0.1:%d/notify" % rcv}, "sysAttrs": True}})
    if st != 201:
        scen.fail("subscription: %d %s" % (st, body[:200]))
    # planted once the source holds it
    deadline = time.time() + 15
    while time.time() < deadline:
        st, subs = scen.Client(src).json("GET", API + "/subscriptions")
        if st == 200 and len(subs) == 1:
            break
        time.sleep(0.05)
    else:
        scen.fail("the subscription was not planted at the source")
    return {"src": src, "hub": hub, "hub_pid": hub_pid, "rcv": rcv, "eid": eid}


def cpu_s(pid):
    """utime + stime of a process, in seconds (/proc/<pid>/stat)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def round_(s, n, seq):
    scen.Client(s["rcv"]).req("POST", "/reset")
    m0 = scen.metrics(s["hub"])
    cpu0 = cpu_s(s["hub_pid"])
    c = scen.Client(s["src"])
    accepted = 0
    t0 = time.time()
    for i in range(n):
        st, _, _ = c.req("PATCH", API + "/entities/%s/attrs" % s["eid"],
                         {"speed": {"type": "Property", "value": seq + i}})
        accepted += st == 204
    t_written = time.time()
    deadline = t_written + 120
    while time.time() < deadline:
        if scen.receiver_count(s["rcv"])["entities"] >= accepted:
            break
        time.sleep(0.02)
    t_done = time.time()
    time.sleep(0.5)
    cnt = scen.receiver_count(s["rcv"])
    cpu1 = cpu_s(s["hub_pid"])
    m1 = scen.metrics(s["hub"])
    dropped = sum(m1[k] - m0.get(k, 0) for k in m1 if k.startswith("coraine_notify_dropped_total"))
    return {"n": n, "accepted": accepted, "got": cnt["entities"], "notifications": cnt["notifications"],
            "bad": cnt["outOfOrder"] + cnt["duplicates"], "dropped": dropped,
            "delivered": m1.get("coraine_notify_delivered_changes_total", 0) -
            m0.get("coraine_notify_delivered_changes_total", 0),
            "write_s": t_written - t0, "total_s": t_done - t0,
            "hub_cpu_us": (cpu1 - cpu0) * 1e6 / max(1, cnt["entities"])}


def ok(r):
    return (r["accepted"] == r["n"] and r["got"] == r["accepted"] and r["bad"] == 0 and r["dropped"] == 0
            and r["delivered"] == r["accepted"])


def main():
    ps = scen.Procs()
    try:
        setups = {over: setup(ps, over) for over in ("http", "cor")}
        checks = {over: round_(s, 200, 1) for over, s in setups.items()}
        verdict = all(ok(r) and r["total_s"] <= 30 for r in checks.values())
        lines = ["Check: 200 updates accepted at the source reached the hub's subscriber "
                 + "; ".join("over %s %d times (%d notifications, %d out of order or twice, %d dropped) in %.1f s"
                             % (o, r["got"], r["notifications"], r["bad"], r["dropped"], r["total_s"])
                             for o, r in checks.items()) + "."]
        if scen.MODE == "load":
            rows = ["| transport | updates | accepted | delivered once | updates/s at the source | "
                    "changes/s at the subscriber | notifications | hub CPU µs per change |",
                    "|---|---:|---:|---:|---:|---:|---:|---:|"]
            seq = 1000
            for n in (250, 1000, 4000):
                for over, s in setups.items():
                    r = round_(s, n, seq)
                    seq += n
                    verdict = verdict and ok(r)
                    rows.append("| %s | %d | %d | %d | %.0f | %.0f | %d | %.0f |" % (
                        over, n, r["accepted"], r["got"] if r["bad"] == 0 else -1, n / r["write_s"],
                        r["got"] / r["total_s"], r["notifications"], r["hub_cpu_us"]))
            lines += ["", "Load (one writer at the source; a hub, a source and a receiver per transport on %d "
                      "cores; the transport is the one the hub plants and manages the subscription over, the "
                      "source's notifications come back over HTTP with both; "
                      "load average %.1f; the hub's CPU is its utime+stime from /proc over the round, "
                      "receiving, relaying and sending, divided by the changes delivered):"
                      % (os.cpu_count() or 0, os.getloadavg()[0]), ""] + rows
        return scen.report("s8_distributed_subscription", "S8 distributed subscription", verdict, "\n".join(lines))
    finally:
        ps.close()


if __name__ == "__main__":
    sys.exit(main())
