"""The notification outbox of --database mongoc (doc/mongodb.md "Delivery
across processes"): a change that may notify is written with an outbox entry
first; a process killed with its notifications pending leaves the entries,
and another process on the same database takes them over once their lease
expired and delivers every due notification; nothing is delivered twice when
nothing is killed. Against FerretDB (ferret.py) and the receiver of
tools/receiver.c, which counts entities per notification and flags the
duplicates of one entity version (sysAttrs: modifiedAt). The writes are one-entity
writes, or batches (create, upsert, update, merge, delete, with items they
refuse) and a purge: one entry per change of the batch, written before it."""

import time

import pytest

from conftest import Broker, Client, fresh_tenant
from ferret import ferret, mongo_flags, new_prefix  # noqa: F401 (fixture)
from ngsi import free_port, uid
from receiver import Receiver
from test_mongo import stop, wait_status


# The killed process's notifications stay pending while the receiver is down:
# it retries for long, on ONE lane (--notifierInflight 1). With the default 4
# lanes, the entities of a lane whose first attempt comes after the endpoint
# failed 3 times in a row are dropped at once ("endpointFailing", the
# notifier's rule, which ends their outbox entries as any drop does): one car
# in ten landed on a fourth lane, and its four changes were never delivered.
PENDING = ("--notifierRetries", "1000", "--notifierRetryDelay", "100", "--notifierInflight", "1")


def prop(v):
    return {"type": "Property", "value": v}


def subscribe(c, uri, **extra):
    sub = {"type": "Subscription", "entities": [{"type": "Car"}],
           "notification": {"endpoint": {"uri": uri}, "sysAttrs": True}}
    sub.update(extra.pop("top", {}))
    sub["notification"].update(extra)
    r = c.post("/subscriptions", sub)
    assert r.status_code == 201, r.text
    return r.headers["Location"].rsplit("/", 1)[1]


def writes(c, cars, rounds):
    """Creates the cars, then PATCHes each `rounds` times: the number of accepted writes."""
    n = 0
    for eid in cars:
        assert c.post("/entities", {"id": eid, "type": "Car", "speed": prop(0)}).status_code == 201
        n += 1
    for i in range(rounds):
        for eid in cars:
            assert c.patch("/entities/%s/attrs" % eid, {"speed": prop(i + 1)}).status_code == 204
            n += 1
    return n


def pair(ferret, tmp_path, a_flags=()):
    """Two processes on one database; B logs each entry it takes over or drops
    (the lines to read when a count is short)."""
    prefix = new_prefix()
    a = Broker(mongo_flags(ferret, prefix, "--syncInterval", "200", *a_flags), str(tmp_path))
    b = Broker(mongo_flags(ferret, prefix, "--syncInterval", "200", "--logLevel", "info"), str(tmp_path))
    return a, b


def subscribe_both(ca, cb, uri, **extra):
    """The subscription, through A, once B has it too."""
    sid = subscribe(ca, uri, **extra)
    assert wait_status(cb, "/subscriptions/" + sid, 200).status_code == 200
    return sid


def kill_then_receive(a, port, n):
    """A killed with SIGKILL (nothing flushed, nothing delivered) once its
    writes were acknowledged, then the receiver started on port: returned
    once n entities came (or 30 s) and 1 s more (nothing more comes)."""
    time.sleep(0.3)
    a.proc.kill()
    a.proc.wait(5)
    rcv = Receiver(port=port)
    wait_entities(rcv, n)
    time.sleep(1.0)
    return rcv


def wait_entities(rcv, n, timeout=30.0):
    deadline = time.time() + timeout
    while True:
        c = rcv.count()
        if c["entities"] >= n or time.time() > deadline:
            return c
        time.sleep(0.05)


def car(eid, speed):
    return {"id": eid, "type": "Car", "speed": prop(speed)}


def failed_ids(r):
    assert r.status_code == 207, r.text
    return sorted(e["entityId"] for e in r.json()["errors"])


def batch_writes(c):
    """Every batch operation, each with items it refuses, and a purge, through
    c: the notifications due per entity (created, updated, deleted)."""
    x, ghost = uid("Car"), uid("Car")
    cars = [uid("Car") for _ in range(5)]
    c0, c1, c2, c3, c4 = cars
    assert c.post("/entities", car(x, 0)).status_code == 201
    # create: x is taken (409 for it; its outbox entry was written, then removed)
    assert failed_ids(c.post("/entityOperations/create", [car(c0, 1), car(c1, 1), car(x, 1), car(c2, 1),
                                                          car(c3, 1)])) == [x]
    # upsert: c0 updated, c4 created
    r = c.post("/entityOperations/upsert", [car(c0, 2), car(c4, 2)])
    assert r.status_code in (200, 201, 204), r.text
    # update: ghost does not exist
    assert failed_ids(c.post("/entityOperations/update", [car(c1, 3), car(ghost, 3), car(c2, 3)])) == [ghost]
    # merge: c3 and c4 to speed 9 (the purge's); ghost again refused
    assert failed_ids(c.post("/entityOperations/merge", [car(c3, 9), car(ghost, 9), car(c4, 9)])) == [ghost]
    # delete: c2, and ghost refused
    r = c.post("/entityOperations/delete", [c2, ghost])
    assert failed_ids(r) == [ghost]
    # purge (5.6.21: deletions, notified as entityDeleted): c3 and c4
    r = c.delete("/entities", params={"type": "Car", "q": "speed==9"})
    assert r.status_code == 204, r.text
    assert c.get("/entities/" + c3).status_code == 404 and c.get("/entities/" + c0).status_code == 200
    return {x: 1, c0: 2, c1: 2, c2: 3, c3: 3, c4: 3}


BATCH_SUB = {"top": {"notificationTrigger": ["entityCreated", "entityUpdated", "entityDeleted"]},
             # a deletion's notification carries the last modifiedAt: no order check by the receiver,
             # the exact count per entity is the check (a duplicate shows as one more)
             "sysAttrs": False}


@pytest.mark.parametrize("shape", ["single", "batch"])
def test_mongoc_outbox_a_killed_process_s_due_notifications_are_delivered_by_the_other(ferret, tmp_path, shape):
    """single: 16 one-entity writes; batch: every batch operation (items
    refused among them) and a purge (batch_writes)."""
    a, b = pair(ferret, tmp_path, PENDING)
    port = free_port()
    rcv = None
    try:
        t = fresh_tenant()
        ca, cb = Client(a, t), Client(b, t)
        if shape == "single":
            sid = subscribe_both(ca, cb, "http://127.0.0.1:%d/notify" % port)
            cars = [uid("Car") for _ in range(4)]
            due = {eid: 4 for eid in cars}
            assert writes(ca, cars, 3) == 16        # 16 accepted writes, each due
        else:
            sid = subscribe_both(ca, cb, "http://127.0.0.1:%d/notify" % port, **BATCH_SUB)
            due = batch_writes(ca)
        n = sum(due.values())
        rcv = kill_then_receive(a, port, n)         # every write acknowledged, none delivered
        got = rcv.count()
        assert got["entities"] == n, "each of the %d due notifications delivered once: %s" % (n, got)
        assert got["perEntity"] == due, "none for an item a batch refused: %s" % got
        if shape == "single":
            assert got["duplicates"] == 0 and got["outOfOrder"] == 0, got
        # B delivered them: its own counters of the subscription say so
        sent = cb.get("/subscriptions/" + sid).json()["notification"].get("timesSent", 0)
        assert sent >= 1, cb.get("/subscriptions/" + sid).text
    finally:
        if rcv:
            rcv.stop()
        stop(b)
        a.stop()


def test_mongoc_outbox_a_restarted_process_delivers_what_it_left(ferret, tmp_path):
    prefix = new_prefix()
    flags = mongo_flags(ferret, prefix, "--syncInterval", "200", *PENDING)
    a = Broker(flags, str(tmp_path))
    port = free_port()
    rcv = None
    a2 = None
    try:
        t = fresh_tenant()
        ca = Client(a, t)
        subscribe(ca, "http://127.0.0.1:%d/notify" % port)
        cars = [uid("Car") for _ in range(2)]
        n = writes(ca, cars, 2)
        a.proc.kill()
        a.proc.wait(5)
        rcv = Receiver(port=port)
        a2 = Broker(flags, str(tmp_path))           # the same process again, alone
        got = wait_entities(rcv, n)
        time.sleep(1.0)
        got = rcv.count()
        assert got["entities"] == n and got["duplicates"] == 0, got
    finally:
        if rcv:
            rcv.stop()
        if a2:
            stop(a2)
        a.stop()


@pytest.mark.parametrize("shape", ["single", "batch"])
def test_mongoc_outbox_no_duplicates_when_nothing_is_killed(ferret, tmp_path, shape):
    a, b = pair(ferret, tmp_path)
    rcv = Receiver()
    try:
        t = fresh_tenant()
        ca, cb = Client(a, t), Client(b, t)
        if shape == "single":
            subscribe_both(ca, cb, rcv.uri)
            n = writes(ca, [uid("Car") for _ in range(3)], 2) + writes(cb, [uid("Car") for _ in range(3)], 2)
        else:
            subscribe_both(ca, cb, rcv.uri, **BATCH_SUB)
            due = batch_writes(ca)
            n = sum(due.values())
        wait_entities(rcv, n)
        time.sleep(3.5)                             # past the lease (4 x --syncInterval, at least 3 s)
        got = rcv.count()
        assert got["entities"] == n, "each of the %d due notifications delivered once: %s" % (n, got)
        if shape == "single":
            assert got["duplicates"] == 0, got
        else:
            assert got["perEntity"] == due, got
    finally:
        rcv.stop()
        stop(a, b)


def test_mongoc_outbox_off_writes_no_entries(ferret, tmp_path):
    a = Broker(mongo_flags(ferret, new_prefix(), "--notifyOutbox=false"), str(tmp_path))
    rcv = Receiver()
    try:
        ca = Client(a, fresh_tenant())
        subscribe(ca, rcv.uri)
        n = writes(ca, [uid("Car")], 2)
        got = wait_entities(rcv, n)
        assert got["entities"] == n, got
    finally:
        rcv.stop()
        stop(a)
