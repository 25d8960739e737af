"""Exactness and isolation of notification delivery under concurrent load:
every accepted change that is due is notified exactly once and in commit order
per entity; slow and dead receivers delay only their own subscriptions;
fan-out to 50 subscriptions of one entity delivers everything."""

import threading
import time

import pytest
import requests

from conftest import Client
from ngsi import API, entity, prop, uid
from receiver import Receiver


@pytest.fixture
def lbroker(broker_factory):
    # its own process: the slow receivers' backlog must not reach other tests
    return broker_factory("--notifierTimeout", "1500", "--notifierThreads", "16")


def subscribe(cli, uri, **members):
    s = {"type": "Subscription", "entities": [{"type": "Car"}],
         "notification": {"endpoint": {"uri": uri}, "sysAttrs": True}}
    s.update(members)
    r = cli.post("/subscriptions", s)
    assert r.status_code == 201, r.text
    return r.headers["Location"].rsplit("/", 1)[1]


def patch_many(base, tenant, ids, n, threads):
    """threads writers, each patching n times, round robin over ids; the ids
    each accepted patch touched."""
    accepted = []
    lock = threading.Lock()

    def writer(k):
        s = requests.Session()
        h = {"Content-Type": "application/json", "NGSILD-Tenant": tenant}
        mine = []
        for i in range(n):
            eid = ids[(k + i) % len(ids)]
            r = s.patch(base + API + "/entities/%s/attrs" % eid, json={"speed": {"type": "Property", "value": i}},
                        headers=h, timeout=30)
            if r.status_code == 204:
                mine.append(eid)
        with lock:
            accepted.extend(mine)

    ts = [threading.Thread(target=writer, args=(k,)) for k in range(threads)]
    t0 = time.time()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return accepted, time.time() - t0


def test_exactness_16_writers(lbroker, make_client):
    cli = make_client(lbroker)
    rcv = Receiver()
    try:
        ids = [uid("Car") for _ in range(16)]
        hot = uid("Car")
        for eid in ids + [hot]:
            cli.create(entity(eid, "Car", speed=prop(0)))
        subscribe(cli, rcv.uri)
        # 16 writers on 16 entities, then 16 writers on one hot entity
        acc1, _ = patch_many(lbroker.base, cli.tenant, ids, 40, 16)
        acc2, _ = patch_many(lbroker.base, cli.tenant, [hot], 20, 16)
        accepted = acc1 + acc2
        c = rcv.wait(len(accepted), timeout=60, key="entities")
        c = rcv.settle()
        assert c["entities"] == len(accepted), c
        assert c["duplicates"] == 0 and c["outOfOrder"] == 0, c
        for eid in set(accepted):
            assert c["perEntity"][eid] == accepted.count(eid)
        st = cli.get("/statistics").json()["notifications"]
        assert st["droppedQueueFull"] == 0
    finally:
        rcv.stop()


def test_slow_and_dead_receivers_do_not_slow_the_others(broker_factory, make_client):
    # two sender threads only, and more slow/dead lanes (4 endpoints x 4
    # lanes) than threads: were a thread to wait on a receiver, the fast
    # ones would starve; the HTTP client carries every lane at once
    lbroker = broker_factory("--notifierTimeout", "1500", "--notifierThreads", "2")
    base_cli = make_client(lbroker)
    cli = make_client(lbroker)
    fast = [Receiver() for _ in range(10)]
    slow = Receiver("--delay", "500")
    deads = [Receiver("--never") for _ in range(3)]
    dead = deads[0]
    try:
        ids = [uid("Car") for _ in range(8)]
        for c in (base_cli, cli):
            for eid in ids:
                c.create(entity(eid, "Car", speed=prop(0)))
        # the write rate without subscriptions
        _, t_base = patch_many(lbroker.base, base_cli.tenant, ids, 25, 4)
        subs = [subscribe(cli, r.uri) for r in fast + [slow] + deads]
        accepted, t_subs = patch_many(lbroker.base, cli.tenant, ids, 25, 4)
        t0 = time.time()
        for r in fast:
            c = r.wait(len(accepted), timeout=20, key="entities")
            assert c["entities"] == len(accepted), c
            assert c["outOfOrder"] == 0 and c["duplicates"] == 0
        delivered_in = time.time() - t0
        # the fast ones got everything promptly, although slow and dead ones hold lanes
        assert delivered_in < 10, delivered_in
        assert slow.count()["entities"] < len(accepted)
        assert all(d.count()["entities"] == 0 for d in deads)
        # and the writers were not held back (generous bound: 2 shared cores)
        assert t_subs < max(3 * t_base, t_base + 2.0), (t_base, t_subs)
        for s in subs:
            assert cli.delete("/subscriptions/" + s).status_code == 204
    finally:
        for r in fast + [slow] + deads:
            r.stop()


def test_fan_out_50_subscriptions_on_one_entity(lbroker, make_client):
    cli = make_client(lbroker)
    rcv = Receiver()
    try:
        eid = uid("Car")
        cli.create(entity(eid, "Car", speed=prop(0)))
        subs = [subscribe(cli, rcv.uri, entities=[{"id": eid, "type": "Car"}]) for _ in range(50)]
        accepted, _ = patch_many(lbroker.base, cli.tenant, [eid], 20, 2)
        want = len(accepted) * 50
        c = rcv.wait(want, timeout=60, key="entities")
        c = rcv.settle()
        assert c["entities"] == want, c
        assert c["outOfOrder"] == 0 and c["duplicates"] == 0
        assert all(c["perSubscription"][s] == len(accepted) for s in subs)
        for s in subs:
            n = cli.get("/subscriptions/" + s).json()["notification"]
            assert n["timesSent"] == len(accepted)
    finally:
        rcv.stop()


def test_shutdown_drains_the_queues(broker_factory, make_client):
    """SIGTERM: what is queued is delivered within --notifierDrain ms (one
    lane, one notification at a time to a receiver taking 50 ms each); the
    rest would be counted dropped (shutdown)."""
    b = broker_factory("--notifierDrain", "8000", "--notifierBatch", "1")
    cli = make_client(b)
    r = Receiver("--delay", "50")
    try:
        eid = uid("Car")
        cli.create(entity(eid, "Car", speed=prop(0)))
        subscribe(cli, r.uri, entities=[{"id": eid, "type": "Car"}])
        for i in range(20):
            assert cli.patch("/entities/%s/attrs" % eid, {"speed": prop(i + 1)}).status_code == 204
        b.stop()
        c = r.count()
        assert c["entities"] == 20 and c["outOfOrder"] == 0 and c["duplicates"] == 0, c
    finally:
        r.stop()
