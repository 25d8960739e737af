"""--database mongoc against a real MongoDB-wire server (FerretDB, ferret.py):
several coraine processes on one database, the version check of the
read-modify-write operations, a database that goes away and comes back,
and what lives in the database across a restart (doc/mongodb.md)."""

import json
import os
import threading
import time
import uuid

import pytest

from conftest import Broker, Client, fresh_tenant
from ferret import FerretServer, ferret, mongo_flags, new_prefix  # noqa: F401 (fixture)
from ngsi import ERR, uid


@pytest.fixture
def pair(ferret, tmp_path):
    """Two brokers on one database prefix."""
    prefix = new_prefix()
    a = Broker(mongo_flags(ferret, prefix), str(tmp_path))
    b = Broker(mongo_flags(ferret, prefix), str(tmp_path))
    yield a, b
    stop(a, b)


SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer",
                     "WARNING: ThreadSanitizer")


def stop(*brokers):
    """Stops the brokers; a sanitizer build's report in a log fails the test
    (these brokers are not the factory's, whose logs conftest checks)."""
    for b in brokers:
        b.stop()
    for b in brokers:
        log = b.read_log()
        for m in SANITIZER_MARKERS:
            assert m not in log, log[max(0, log.find(m) - 200):log.find(m) + 3000]


def prop(v):
    return {"type": "Property", "value": v}


def test_mongoc_a_write_through_one_process_is_read_through_the_other(pair):
    a, b = pair
    t = fresh_tenant()
    ca, cb = Client(a, t), Client(b, t)
    eid = uid("Room")
    ca.create({"id": eid, "type": "Room", "temperature": prop(20)})
    assert cb.entity(eid)["temperature"]["value"] == 20
    r = cb.patch("/entities/%s/attrs" % eid, {"temperature": prop(21)})
    assert r.status_code == 204, r.text
    assert ca.entity(eid)["temperature"]["value"] == 21
    # queries through either see both processes' entities, in creation order
    eid2 = uid("Room")
    cb.create({"id": eid2, "type": "Room", "temperature": prop(30)})
    for c in (ca, cb):
        r = c.get("/entities", params={"type": "Room", "count": "true"})
        assert r.status_code == 200
        assert [e["id"] for e in r.json()] == [eid, eid2]
        assert r.headers["NGSILD-Results-Count"] == "2"
        r = c.get("/entities", params={"type": "Room", "q": "temperature>25"})
        assert [e["id"] for e in r.json()] == [eid2]
    r = ca.delete("/entities/" + eid2)
    assert r.status_code == 204
    assert cb.get("/entities/" + eid2).status_code == 404


def test_mongoc_concurrent_patches_of_one_entity_through_two_processes_lose_nothing(pair):
    a, b = pair
    t = fresh_tenant()
    ca, cb = Client(a, t), Client(b, t)
    eid = uid("Wide")
    n = 15
    ent = {"id": eid, "type": "Wide"}
    for i in range(n):
        ent["a%d" % i] = prop(0)
        ent["b%d" % i] = prop(0)
    ca.create(ent)
    errors = []

    def run(c, name):
        cc = Client(c.broker, t)
        for i in range(n):
            r = cc.patch("/entities/%s/attrs" % eid, {"%s%d" % (name, i): prop(i + 1)})
            if r.status_code != 204:
                errors.append((name, i, r.status_code, r.text))

    th = [threading.Thread(target=run, args=(ca, "a")), threading.Thread(target=run, args=(cb, "b"))]
    for x in th:
        x.start()
    for x in th:
        x.join()
    assert not errors
    e = ca.entity(eid)
    for i in range(n):
        assert e["a%d" % i]["value"] == i + 1, "lost update of a%d" % i
        assert e["b%d" % i]["value"] == i + 1, "lost update of b%d" % i


def test_mongoc_a_cached_version_is_never_read_or_written_over_after_another_process_wrote(pair):
    """The entity cache's rule (doc/mongodb.md): every read asks the server
    for the current token, and a write that starts from a cached version is
    conditional on its token. B's cache holds each version B read or wrote;
    A's writes in between must all show through B, and B's writes from a
    stale cached version must lose none of A's."""
    a, b = pair
    t = fresh_tenant()
    ca, cb = Client(a, t), Client(b, t)
    eid = uid("Room")
    ca.create({"id": eid, "type": "Room", "temperature": prop(1), "gone": prop(0)})
    assert cb.entity(eid)["temperature"]["value"] == 1          # B caches version 1
    assert ca.patch("/entities/%s/attrs" % eid, {"temperature": prop(2)}).status_code == 204
    assert cb.entity(eid)["temperature"]["value"] == 2          # not B's cached version 1
    assert ca.patch("/entities/%s/attrs" % eid, {"temperature": prop(3)}).status_code == 204
    # B patches from its cached version 2: the conditional replace misses, B reads 3 and applies
    assert cb.patch("/entities/%s/attrs" % eid, {"gone": prop(5)}).status_code == 204
    e = ca.entity(eid)
    assert e["temperature"]["value"] == 3 and e["gone"]["value"] == 5
    # an attribute A appended is patched through B although B's cached version lacks it
    assert ca.post("/entities/%s/attrs" % eid, {"pressure": prop(1000)}).status_code == 204
    assert cb.patch("/entities/%s/attrs" % eid, {"pressure": prop(1001)}).status_code == 204
    # an attribute A deleted is appended through B with noOverwrite although B's cached version
    # has it (the cached version would answer "not updated": decided on the current one)
    assert cb.entity(eid)["gone"]["value"] == 5
    assert ca.delete("/entities/%s/attrs/gone" % eid).status_code == 204
    r = cb.post("/entities/%s/attrs?options=noOverwrite" % eid, {"gone": prop(7)})
    assert r.status_code == 204, r.text
    e = ca.entity(eid)
    assert e["gone"]["value"] == 7 and e["pressure"]["value"] == 1001
    # deleted and created again through A: B reads the new entity, not its cached one
    assert ca.delete("/entities/" + eid).status_code == 204
    assert cb.get("/entities/" + eid).status_code == 404
    ca.create({"id": eid, "type": "Room", "temperature": prop(9)})
    e = cb.entity(eid)
    assert e["temperature"]["value"] == 9 and "pressure" not in e
    r = cb.get("/entities", params={"type": "Room", "q": "temperature>5"})
    assert [x["temperature"]["value"] for x in r.json()] == [9]


def test_mongoc_one_id_created_through_two_processes_at_once_exists_once(pair):
    a, b = pair
    t = fresh_tenant()
    eid = uid("Race")
    codes = []

    def run(br):
        codes.append(Client(br, t).post("/entities", {"id": eid, "type": "Race"}).status_code)

    th = [threading.Thread(target=run, args=(br,)) for br in (a, b)]
    for x in th:
        x.start()
    for x in th:
        x.join()
    assert sorted(codes) == [201, 409]


def test_mongoc_a_tenant_created_through_one_process_exists_for_the_other(pair):
    a, b = pair
    t = "Tenant_" + uuid.uuid4().hex[:8].upper()      # upper case and '_': escaped in the database name
    ca, cb = Client(a, t), Client(b, t)
    assert cb.get("/entities", params={"type": "T"}).status_code == 404
    ca.create({"id": "urn:x:1", "type": "T"})
    assert cb.entity("urn:x:1")["type"] == "T"
    # the default tenant does not see it
    assert Client(b, None).get("/entities/urn:x:1").status_code == 404


def test_mongoc_a_subscription_and_entities_outlive_the_broker(ferret, tmp_path):
    prefix = new_prefix()
    br = Broker(mongo_flags(ferret, prefix), str(tmp_path))
    t = fresh_tenant()
    c = Client(br, t)
    eid = uid("Keep")
    c.create({"id": eid, "type": "Keep", "v": prop(1)})
    r = c.post("/subscriptions", {"type": "Subscription", "entities": [{"type": "Keep"}],
                                  "notification": {"endpoint": {"uri": "http://127.0.0.1:9/n"}}})
    assert r.status_code == 201, r.text
    sid = r.headers["Location"].rsplit("/", 1)[1]
    br.stop()
    br.start()
    c = Client(br, t)
    assert c.entity(eid)["v"]["value"] == 1
    r = c.get("/subscriptions/" + sid)
    assert r.status_code == 200, r.text
    assert r.json()["id"] == sid
    stop(br)


def test_mongoc_database_down_answers_503_then_service_comes_back_by_itself(tmp_path):
    srv = FerretServer()
    try:
        br = Broker(mongo_flags(srv, new_prefix(), "--dbTimeout", "1000"), str(tmp_path))
        c = Client(br, None)
        eid = uid("Down")
        c.create({"id": eid, "type": "Down"})
        srv.kill()
        t0 = time.time()
        r = c.get("/entities/" + eid)
        assert r.status_code == 503, r.text
        assert time.time() - t0 < 8
        body = r.json()
        assert "unavailable" in body["detail"] and body["status"] == 503
        eid2 = uid("Down")
        r = c.post("/entities", {"id": eid2, "type": "Down"})
        assert r.status_code == 503, r.text
        srv.start()
        deadline = time.time() + 20
        while time.time() < deadline:
            r = c.get("/entities/" + eid)
            if r.status_code == 200:
                break
            time.sleep(0.2)
        assert r.status_code == 200, r.text
        # the write answered 503 was not acknowledged, and is not there
        assert c.get("/entities/" + eid2).status_code == 404
        stop(br)
    finally:
        srv.close()


def test_mongoc_batch_results_per_entity_and_upsert(pair):
    a, b = pair
    t = fresh_tenant()
    ca, cb = Client(a, t), Client(b, t)
    e1, e2 = uid("B"), uid("B")
    ca.create({"id": e1, "type": "B"})
    r = cb.post("/entityOperations/create", [{"id": e1, "type": "B"}, {"id": e2, "type": "B"}])
    assert r.status_code == 207, r.text
    body = r.json()
    assert body["success"] == [e2]
    assert [x["entityId"] for x in body["errors"]] == [e1]
    r = ca.post("/entityOperations/upsert", [{"id": e1, "type": "B", "x": prop(5)}])
    assert r.status_code == 204, r.text
    assert cb.entity(e1)["x"]["value"] == 5
    r = cb.post("/entityOperations/delete", [e1, e2])
    assert r.status_code == 204, r.text
    assert ca.get("/entities", params={"type": "B"}).json() == []


def test_mongoc_batch_create_is_one_bulk_insert_with_per_entity_results(pair):
    """6.14: a batch of creates is one unordered bulk insert; each id already
    there (through the other process) or twice in the batch fails alone, with
    409-style errors, and the others are created, in the batch's order."""
    a, b = pair
    t = fresh_tenant()
    ca, cb = Client(a, t), Client(b, t)
    ids = [uid("Bulk") for _ in range(6)]
    ca.create({"id": ids[2], "type": "Bulk"})
    batch = [{"id": i, "type": "Bulk", "n": prop(k)} for k, i in enumerate(ids)] + [{"id": ids[4], "type": "Bulk"}]
    r = cb.post("/entityOperations/create", batch)
    assert r.status_code == 207, r.text
    body = r.json()
    assert body["success"] == [i for i in ids if i != ids[2]]
    assert sorted(x["entityId"] for x in body["errors"]) == sorted([ids[2], ids[4]])
    for x in body["errors"]:
        assert x["error"]["type"].endswith("AlreadyExists"), x
    got = ca.get("/entities", params={"type": "Bulk", "limit": "100"}).json()
    assert [e["id"] for e in got] == [ids[2]] + [i for i in ids if i != ids[2]]
    assert [e.get("n", {}).get("value") for e in got][1:] == [0, 1, 3, 4, 5]
    # all new: 201 with every id
    more = [uid("Bulk") for _ in range(3)]
    r = ca.post("/entityOperations/create", [{"id": i, "type": "Bulk"} for i in more])
    assert r.status_code == 201, r.text
    assert r.json() == more
    assert cb.entity(more[1])["id"] == more[1]


def test_mongoc_geo_query_box_prefilter_then_exact(pair):
    a, _ = pair
    c = Client(a, fresh_tenant())
    near, far = uid("G"), uid("G")
    c.create({"id": near, "type": "G", "location": {"type": "GeoProperty",
              "value": {"type": "Point", "coordinates": [2.35, 48.85]}}})
    c.create({"id": far, "type": "G", "location": {"type": "GeoProperty",
              "value": {"type": "Point", "coordinates": [13.4, 52.5]}}})
    r = c.get("/entities", params={"type": "G", "georel": "near;maxDistance==10000", "geometry": "Point",
                                   "coordinates": "[2.36,48.86]"})
    assert r.status_code == 200, r.text
    assert [e["id"] for e in r.json()] == [near]
    r = c.get("/entities", params={"type": "G", "georel": "within", "geometry": "Polygon",
                                   "coordinates": "[[[0,40],[20,40],[20,60],[0,60],[0,40]]]"})
    assert sorted(e["id"] for e in r.json()) == sorted([near, far])


@pytest.fixture
def synced_pair(ferret, tmp_path):
    """Two brokers on one database prefix that load each other's objects every 200 ms."""
    prefix = new_prefix()
    a = Broker(mongo_flags(ferret, prefix, "--syncInterval", "200"), str(tmp_path))
    b = Broker(mongo_flags(ferret, prefix, "--syncInterval", "200"), str(tmp_path))
    yield a, b
    stop(a, b)


def wait_status(c, path, status, timeout=10.0):
    deadline = time.time() + timeout
    while True:
        r = c.get(path)
        if r.status_code == status or time.time() > deadline:
            return r
        time.sleep(0.05)


def test_mongoc_a_subscription_created_through_one_process_is_notified_once_for_changes_through_either(
        synced_pair):
    from receiver import Receiver
    a, b = synced_pair
    t = fresh_tenant()
    ca, cb = Client(a, t), Client(b, t)
    rcv = Receiver()
    try:
        ca.create({"id": uid("Seed"), "type": "Seed"})
        r = ca.post("/subscriptions", {"type": "Subscription", "entities": [{"type": "Car"}],
                                       "notification": {"endpoint": {"uri": rcv.uri}}})
        assert r.status_code == 201, r.text
        sid = r.headers["Location"].rsplit("/", 1)[1]
        # the other process has it within its --syncInterval
        assert wait_status(cb, "/subscriptions/" + sid, 200).status_code == 200
        eid = uid("Car")
        cb.create({"id": eid, "type": "Car", "speed": prop(1)})          # through B
        for i in range(5):                                              # alternating
            c = ca if i % 2 == 0 else cb
            assert c.patch("/entities/%s/attrs" % eid, {"speed": prop(i + 2)}).status_code == 204
        rcv.wait(6)
        n = rcv.settle()["notifications"]
        assert n == 6, "each of the 6 accepted writes notified once, not %d times" % n
        # deleted through B: gone from A too, and nobody notifies any more
        assert cb.delete("/subscriptions/" + sid).status_code == 204
        assert wait_status(ca, "/subscriptions/" + sid, 404).status_code == 404
        assert ca.patch("/entities/%s/attrs" % eid, {"speed": prop(99)}).status_code == 204
        assert rcv.settle()["notifications"] == 6
    finally:
        rcv.stop()


def test_mongoc_a_registration_created_through_one_process_is_seen_by_the_other(synced_pair):
    a, b = synced_pair
    t = fresh_tenant()
    ca, cb = Client(a, t), Client(b, t)
    ca.create({"id": uid("Seed"), "type": "Seed"})
    r = ca.post("/csourceRegistrations", {"type": "ContextSourceRegistration",
                                          "information": [{"entities": [{"type": "Remote"}]}],
                                          "endpoint": "http://127.0.0.1:9"})
    assert r.status_code == 201, r.text
    rid = r.headers["Location"].rsplit("/", 1)[1]
    assert wait_status(cb, "/csourceRegistrations/" + rid, 200).status_code == 200
    assert ca.delete("/csourceRegistrations/" + rid).status_code == 204
    assert wait_status(cb, "/csourceRegistrations/" + rid, 404).status_code == 404


def test_mongoc_q_prefilter_keeps_every_match(pair):
    """q's numeric terms go to the server as a prefilter (doc/mongodb.md
    "Queries"); what the server cannot compare (several instances, a string,
    an array) still reaches the broker's exact evaluation."""
    a, _ = pair
    c = Client(a, fresh_tenant())
    ents = {
        "n60": {"speed": prop(60)},
        "n10": {"speed": prop(10)},
        "f15": {"speed": prop(15.5)},
        "multi": {"speed": [prop(70), dict(prop(5), datasetId="urn:d:1")]},
        "arr": {"speed": prop([55, 1])},
        "str": {"speed": prop("60")},
        "none": {"other": prop(1)},
        # beyond 256 names an entity carries no q fields: the prefilter lets it through
        "wide": dict({"speed": prop(99)}, **{"w%d" % i: prop(i) for i in range(300)}),
    }
    for k, attrs in ents.items():
        c.create(dict({"id": "urn:Q:" + k, "type": "Q"}, **attrs))

    def ids(q):
        r = c.get("/entities", params={"type": "Q", "q": q, "limit": 100})
        assert r.status_code == 200, r.text
        return sorted(e["id"].split(":")[-1] for e in r.json())

    cordb = Client(Broker((), a.logdir), None)       # the same entities on corDB: the reference
    try:
        t = fresh_tenant()
        cordb.tenant = t
        for k, attrs in ents.items():
            cordb.create(dict({"id": "urn:Q:" + k, "type": "Q"}, **attrs))

        def ref(q):
            r = cordb.get("/entities", params={"type": "Q", "q": q, "limit": 100})
            return sorted(e["id"].split(":")[-1] for e in r.json())

        for q in ("speed>50", "speed>=60", "speed<11", "speed==60", "speed==10..20", "speed==10,60",
                  "speed>50|other==1", "speed>50;other==1", "speed>50;speed<65", "speed!=60", "speed"):
            assert ids(q) == ref(q), q
    finally:
        cordb.broker.stop()


# ---------------------------------------------------------------- bulk batches

def _batch_outcome(r):
    """A batch answer as compared across stores: the status, the successes
    and per failed id its error's type (the detail texts differ by store)."""
    if r.status_code != 207:
        return r.status_code, r.json() if r.text else None
    body = r.json()
    return 207, body.get("success"), [(x["entityId"], x["error"]["type"]) for x in body.get("errors", [])]


BATCH_SCRIPT = [
    ("upsert", [{"id": "urn:E:1", "type": "T", "x": prop(1)}, {"id": "urn:E:4", "type": "T", "x": prop(4)},
                {"id": "urn:E:1", "type": "T", "y": prop(2)}], {}),
    ("upsert", [{"id": "urn:E:2", "type": "T", "y": prop(20)}, {"id": "urn:E:5", "type": "U"},
                {"id": "urn:E:2", "type": "T", "z": prop(21)}], {"options": "update"}),
    ("update", [{"id": "urn:E:1", "type": "T", "x": prop(10)}, {"id": "urn:E:9", "type": "T", "x": prop(1)},
                {"id": "urn:E:3", "type": "T", "w": prop(30)}], {}),
    ("update", [{"id": "urn:E:1", "type": "T", "x": prop(11), "n": prop(1)},
                {"id": "urn:E:2", "type": "T", "x": prop(12)}], {"options": "noOverwrite"}),
    ("merge", [{"id": "urn:E:1", "type": "T", "x": prop(100)}, {"id": "urn:E:8", "type": "T", "x": prop(1)},
               {"id": "urn:E:3", "type": "T", "w": "urn:ngsi-ld:null"}, {"id": "urn:E:1", "type": "T", "m": prop(7)}],
     {}),
    ("create", [{"id": "urn:E:6", "type": "T"}, {"id": "urn:E:1", "type": "T"}], {}),
    ("delete", ["urn:E:4", "urn:E:4", "urn:E:7", "urn:E:5"], {}),
]


def _run_batch_script(c):
    out = []
    c.create({"id": "urn:E:1", "type": "T", "a": prop(0)})
    c.create({"id": "urn:E:2", "type": "T", "a": prop(0)})
    c.create({"id": "urn:E:3", "type": "T", "w": prop(3)})
    for op, body, params in BATCH_SCRIPT:
        out.append((op, _batch_outcome(c.post("/entityOperations/" + op, body, params=params))))
    r = c.get("/entities", params={"type": "T,U", "limit": "100"})
    assert r.status_code == 200, r.text
    out.append(("final", r.json()))
    return out


def test_mongoc_bulk_batches_answer_as_cordb(ferret, tmp_path):
    """6.15 - 6.18: batch upsert, update, merge and delete as bulk writes (one
    read and one bulk write per round) answer every item as corDB does:
    repeated ids within a batch see the item before, missing ones fail
    alone, and the stored entities end the same."""
    cor = Broker(["--database", "corDB"], str(tmp_path))
    mon = Broker(mongo_flags(ferret, new_prefix()), str(tmp_path))
    try:
        want = _run_batch_script(Client(cor, fresh_tenant()))
        got = _run_batch_script(Client(mon, fresh_tenant()))
        for w, g in zip(want, got):
            assert g == w, (w[0], g, w)
    finally:
        stop(cor, mon)


def test_mongoc_concurrent_batch_updates_through_two_processes_lose_nothing(pair):
    """Batches of updates of different attributes of the same entities,
    through two processes at once: the version check sends the items whose
    version changed to the next round, so that no update is lost."""
    a, b = pair
    t = fresh_tenant()
    ca, cb = Client(a, t), Client(b, t)
    ids = [uid("Cb") for _ in range(5)]
    r = ca.post("/entityOperations/create", [{"id": i, "type": "Cb"} for i in ids])
    assert r.status_code == 201, r.text
    n = 8
    errors = []

    def run(c, tag):
        for k in range(n):
            r = c.post("/entityOperations/update", [{"id": i, "type": "Cb", "%s%d" % (tag, k): prop(k)} for i in ids])
            if r.status_code != 204:
                errors.append(r.text)

    th = [threading.Thread(target=run, args=(ca, "a")), threading.Thread(target=run, args=(cb, "b"))]
    for x in th:
        x.start()
    for x in th:
        x.join()
    assert not errors, errors
    for i in ids:
        e = cb.entity(i)
        for tag in "ab":
            for k in range(n):
                assert e["%s%d" % (tag, k)]["value"] == k, (i, tag, k, e)


def _counters(c, sid):
    r = c.get("/subscriptions/" + sid)
    assert r.status_code == 200, r.text
    n = r.json()["notification"]
    return n.get("timesSent", 0), n.get("timesFailed", 0), n.get("lastSuccess")


def wait_counters(c, sid, want, timeout=10.0):
    deadline = time.time() + timeout
    while True:
        got = _counters(c, sid)
        if got[:2] == want or time.time() > deadline:
            return got
        time.sleep(0.1)


def test_mongoc_subscription_counters_are_the_sum_over_processes_and_survive_a_restart(synced_pair):
    """timesSent/timesFailed are aggregated in the database: each process
    adds its deltas, flushed every --syncInterval; reads through either show
    the sum, and a restart of both keeps it."""
    from receiver import Receiver
    a, b = synced_pair
    t = fresh_tenant()
    ca, cb = Client(a, t), Client(b, t)
    rcv = Receiver()
    try:
        r = ca.post("/subscriptions", {"type": "Subscription", "entities": [{"type": "Car"}],
                                       "notification": {"endpoint": {"uri": rcv.uri}}})
        assert r.status_code == 201, r.text
        sid = r.headers["Location"].rsplit("/", 1)[1]
        assert wait_status(cb, "/subscriptions/" + sid, 200).status_code == 200
        eid = uid("Car")
        cb.create({"id": eid, "type": "Car", "speed": prop(1)})          # notified by B
        for i in range(5):                                              # A, B, A, B, A
            c = ca if i % 2 == 0 else cb
            assert c.patch("/entities/%s/attrs" % eid, {"speed": prop(i + 2)}).status_code == 204
        rcv.wait(6)
        assert rcv.settle()["notifications"] == 6
        # 3 sent by each process; each shows the sum once the other's deltas are flushed
        assert wait_counters(ca, sid, (6, 0))[:2] == (6, 0)
        sent, failed, last = wait_counters(cb, sid, (6, 0))
        assert (sent, failed) == (6, 0) and last
    finally:
        rcv.stop()
    # a failure counted too, then both restarted: the database keeps the totals
    assert ca.patch("/subscriptions/" + sid,
                    {"notification": {"endpoint": {"uri": "http://127.0.0.1:9/n"}}}).status_code == 204
    assert wait_counters(cb, sid, (6, 0))[:2] == (6, 0)
    time.sleep(0.5)                                                     # B sees the new endpoint
    assert cb.patch("/entities/%s/attrs" % eid, {"speed": prop(50)}).status_code == 204
    deadline = time.time() + 15
    while _counters(ca, sid)[1] < 1 and time.time() < deadline:
        time.sleep(0.1)
    before = _counters(ca, sid)
    assert before[0] == 6 and before[1] >= 1, before   # each attempt counts (retries too)
    a.stop()
    b.stop()
    a.start()
    b.start()
    ca, cb = Client(a, t), Client(b, t)
    after = _counters(ca, sid)
    assert after[0] == 6 and after[1] >= before[1], (before, after)
    assert _counters(cb, sid)[:2] == after[:2]
    # deleted: its counters go with it
    assert ca.delete("/subscriptions/" + sid).status_code == 204


def _reg_counters(c, rid):
    r = c.get("/csourceRegistrations/" + rid)
    assert r.status_code == 200, r.text
    return r.json().get("timesSent", 0), r.json().get("timesFailed", 0)


def test_mongoc_registration_counters_are_the_sum_over_processes(synced_pair):
    """A registration's timesSent/timesFailed count the forwards of every process."""
    a, b = synced_pair
    t = fresh_tenant()
    ca, cb = Client(a, t), Client(b, t)
    r = ca.post("/csourceRegistrations", {"type": "ContextSourceRegistration",
                                          "information": [{"entities": [{"type": "Remote"}]}],
                                          "endpoint": "http://127.0.0.1:9"})
    assert r.status_code == 201, r.text
    rid = r.headers["Location"].rsplit("/", 1)[1]
    assert wait_status(cb, "/csourceRegistrations/" + rid, 200).status_code == 200
    for c in (ca, cb, cb):                       # each forward to a closed port fails
        c.get("/entities?type=Remote")
    deadline = time.time() + 10
    while time.time() < deadline and (_reg_counters(ca, rid) != (3, 3) or _reg_counters(cb, rid) != (3, 3)):
        time.sleep(0.1)
    assert _reg_counters(ca, rid) == (3, 3)
    assert _reg_counters(cb, rid) == (3, 3)
    assert ca.delete("/csourceRegistrations/" + rid).status_code == 204


def test_mongoc_batch_from_a_stale_cached_version_reads_the_current_one(pair):
    """A batch starts from the entity cache; a version another process wrote
    or deleted since is read from the server, and nothing of it is lost."""
    a, b = pair
    t = fresh_tenant()
    ca, cb = Client(a, t), Client(b, t)
    e1, e2, e3 = uid("Bc"), uid("Bc"), uid("Bc")
    for e in (e1, e2, e3):
        ca.create({"id": e, "type": "Bc", "x": prop(1)})
    r = ca.post("/entityOperations/upsert?options=update",
                [{"id": e, "type": "Bc", "y": prop(2)} for e in (e1, e2, e3)])
    assert r.status_code == 204, r.text                      # A's cache holds these versions
    assert cb.patch("/entities/%s/attrs" % e1, {"z": prop(3)}).status_code == 204
    assert cb.delete("/entities/" + e2).status_code == 204
    assert cb.delete("/entities/%s/attrs/y" % e3).status_code == 204
    r = ca.post("/entityOperations/update?options=noOverwrite",
                [{"id": e, "type": "Bc", "w": prop(4), "y": prop(9)} for e in (e1, e2, e3)])
    assert r.status_code == 207, r.text
    errs = {x["entityId"]: x["error"]["status"] for x in r.json()["errors"]}
    assert errs == {e1: 400, e2: 404}, r.text      # e1: y kept (noOverwrite); e2: deleted by B
    got1, got3 = cb.entity(e1), cb.entity(e3)
    assert {k: got1[k]["value"] for k in ("x", "y", "z", "w")} == {"x": 1, "y": 2, "z": 3, "w": 4}
    assert {k: got3[k]["value"] for k in ("x", "y", "w")} == {"x": 1, "y": 9, "w": 4}   # y was gone: added
    r = ca.post("/entityOperations/merge", [{"id": e1, "type": "Bc", "v": prop(5)}])
    assert r.status_code == 204, r.text
    assert {k: cb.entity(e1)[k]["value"] for k in ("x", "y", "z", "w", "v")} == \
        {"x": 1, "y": 2, "z": 3, "w": 4, "v": 5}
