"""Distributed subscriptions (5.8.1.4 Create, 5.8.2.4 Update, 5.8.5.4 Delete
Subscription with registrations; 4.3.6, 6.3.18 Via): a subscription at a
hub whose entities are registered at a source (a registration whose
operations include createSubscription) is planted at that source, with the
hub's /dsub/{key} as its endpoint, and every change at the source reaches
the hub's subscriber once, as a notification of the hub's subscription. Two
or three coraine processes on loopback, a real receiver, over HTTP and over
cor://; the lifecycle (PATCH, DELETE, expiry, a registration made after the
subscription, a source that is down first, a hub restarted on --dbDir) and
loops (brokers registered to each other, a chain of three)."""

import time

import pytest
import requests

from conftest import Client, fresh_tenant
from ngsi import entity, free_port, prop, uid
from receiver import Receiver

PORTS = {n: free_port() for n in ("src", "late", "a", "b", "c")}


def broker(broker_factory, alias, cor=None, *flags):
    f = ["--brokerAlias", "dsub-" + alias]
    if cor:
        f += ["--corPort", str(PORTS[cor])]
    c = Client(broker_factory(*(f + list(flags))), fresh_tenant())
    c.ensure_tenant()
    return c


def register(hub, src, eid=None, over="http", cor=None, ops=("federationOps",), etype="Vehicle", **members):
    ent = {"type": etype}
    if eid:
        ent["id"] = eid
    endpoint = "cor://127.0.0.1:%d" % PORTS[cor] if over == "cor" else src.broker.base
    body = {"type": "ContextSourceRegistration", "information": [{"entities": [ent]}],
            "endpoint": endpoint, "tenant": src.tenant, "operations": list(ops)}
    body.update(members)
    r = hub.post("/csourceRegistrations", body)
    assert r.status_code == 201, r.text
    return r.headers["Location"].rsplit("/", 1)[1]


def subscribe(hub, rcv, eid, **members):
    body = {"type": "Subscription", "entities": [{"id": eid, "type": "Vehicle"}],
            "notification": {"endpoint": {"uri": rcv.uri}, "sysAttrs": True}}
    body.update(members)
    r = hub.post("/subscriptions", body)
    assert r.status_code == 201, r.text
    return r.headers["Location"].rsplit("/", 1)[1]


def remote(c, sid):
    r = c.get("/subscriptions/" + sid, params={"options": "sysAttrs"})
    assert r.status_code == 200, r.text
    return r.json().get("coraine:remote", [])


def wait_remote(c, sid, status="planted", n=1, timeout=15.0):
    deadline = time.time() + timeout
    while True:
        parts = remote(c, sid)
        if len([p for p in parts if p["status"] == status]) >= n:
            return parts
        assert time.time() < deadline, "remote subscriptions: %s" % parts
        time.sleep(0.1)


def planted_at(src):
    r = src.get("/subscriptions")
    assert r.status_code == 200, r.text
    return [s for s in r.json() if "/dsub/" in s["notification"]["endpoint"]["uri"]]


def changes(src, eid, n, start=0):
    for i in range(n):
        r = src.patch("/entities/%s/attrs" % eid, {"speed": prop(start + i)})
        assert r.status_code == 204, r.text


def settle(rcv, want, timeout=15.0):
    c = rcv.wait(want, timeout=timeout, key="entities")
    time.sleep(0.5)                  # nothing more comes (no duplicate)
    return rcv.count()


@pytest.fixture
def rcv():
    r = Receiver()
    yield r
    r.stop()


def flow(hub, src, rcv, over, cor=None, n=20):
    eid = uid("Vehicle")
    src.create(entity(eid, "Vehicle", speed=prop(0)))
    register(hub, src, eid, over=over, cor=cor)
    sid = subscribe(hub, rcv, eid)
    parts = wait_remote(hub, sid)
    assert parts[0]["subscriptionId"].startswith("urn:ngsi-ld:Subscription:dsub:")
    mine = planted_at(src)
    assert [s["id"] for s in mine] == [parts[0]["subscriptionId"]]
    assert "attributes" not in mine[0]["notification"]
    changes(src, eid, n, 1)
    c = settle(rcv, n)
    assert c["entities"] == n, c
    assert c["duplicates"] == 0 and c["outOfOrder"] == 0, c
    assert c["perSubscription"] == {sid: c["notifications"]}, c
    last = rcv.notifications()[-1]["body"]
    assert last["subscriptionId"] == sid and last["data"][-1]["speed"]["value"] == n
    return eid, sid


# ---------------------------------------------------------------- planting and relaying (5.8.1.4)

def test_5_8_1_4_changes_at_the_source_reach_the_hub_subscriber_over_http(broker_factory, rcv):
    hub, src = broker(broker_factory, "hub"), broker(broker_factory, "src")
    flow(hub, src, rcv, "http")


def test_5_8_1_4_changes_at_the_source_reach_the_hub_subscriber_over_cor(broker_factory, rcv):
    hub, src = broker(broker_factory, "hub"), broker(broker_factory, "src-cor", "src")
    flow(hub, src, rcv, "cor", cor="src")


def test_5_8_1_4_the_hub_subscription_renders_the_notification(broker_factory, rcv):
    """notification.attributes and format are the hub's: the source is asked for the whole entity."""
    hub, src = broker(broker_factory, "hub"), broker(broker_factory, "src")
    eid = uid("Vehicle")
    src.create(entity(eid, "Vehicle", speed=prop(0), brand=prop("x")))
    register(hub, src, eid)
    sid = subscribe(hub, rcv, eid, notification={"endpoint": {"uri": rcv.uri}, "attributes": ["speed"],
                                                  "format": "keyValues"})
    wait_remote(hub, sid)
    changes(src, eid, 1, 7)
    settle(rcv, 1)
    d = rcv.notifications()[-1]["body"]["data"][0]
    assert d == {"id": eid, "type": "Vehicle", "speed": 7}, d
    s = hub.get("/subscriptions/" + sid).json()
    assert s["notification"]["timesSent"] >= 1


def test_5_8_1_4_registration_without_subscription_operations_is_not_planted(broker_factory, rcv):
    hub, src = broker(broker_factory, "hub"), broker(broker_factory, "src")
    eid = uid("Vehicle")
    src.create(entity(eid, "Vehicle", speed=prop(0)))
    register(hub, src, eid, ops=("retrieveOps",))
    sid = subscribe(hub, rcv, eid)
    time.sleep(1)
    assert remote(hub, sid) == [] and planted_at(src) == []


def test_5_8_1_4_local_only_subscription_is_not_planted(broker_factory, rcv):
    hub, src = broker(broker_factory, "hub"), broker(broker_factory, "src")
    eid = uid("Vehicle")
    src.create(entity(eid, "Vehicle", speed=prop(0)))
    register(hub, src, eid)
    sid = subscribe(hub, rcv, eid, localOnly=True)
    time.sleep(1)
    assert remote(hub, sid) == [] and planted_at(src) == []


def test_dsub_endpoint_with_unknown_key_is_404(broker_factory):
    hub = broker(broker_factory, "hub")
    r = hub.s.post(hub.broker.base + "/dsub/00ff", json={"type": "Notification", "data": []})
    assert r.status_code == 404 and r.json()["type"].endswith("ResourceNotFound")


# ---------------------------------------------------------------- lifecycle (5.8.2.4, 5.8.5.4, expiry)

def test_5_8_2_4_patch_of_the_hub_subscription_patches_the_remote_one(broker_factory, rcv):
    hub, src = broker(broker_factory, "hub"), broker(broker_factory, "src")
    eid, sid = flow(hub, src, rcv, "http", n=3)
    r = hub.patch("/subscriptions/" + sid, {"isActive": False})
    assert r.status_code == 204, r.text
    deadline = time.time() + 10
    while planted_at(src)[0].get("isActive") is not False:
        assert time.time() < deadline, planted_at(src)
        time.sleep(0.1)
    rcv.reset()
    changes(src, eid, 3)
    time.sleep(1)
    assert rcv.count()["entities"] == 0
    assert hub.patch("/subscriptions/" + sid, {"isActive": True}).status_code == 204
    while planted_at(src)[0].get("isActive") is not True:
        assert time.time() < deadline + 10, planted_at(src)
        time.sleep(0.1)
    changes(src, eid, 2, 10)
    assert settle(rcv, 2)["entities"] == 2


def test_5_8_5_4_delete_of_the_hub_subscription_deletes_the_remote_one(broker_factory, rcv):
    hub, src = broker(broker_factory, "hub"), broker(broker_factory, "src")
    eid, sid = flow(hub, src, rcv, "http", n=2)
    assert hub.delete("/subscriptions/" + sid).status_code == 204
    deadline = time.time() + 10
    while planted_at(src):
        assert time.time() < deadline, planted_at(src)
        time.sleep(0.1)


def test_5_8_1_4_expired_hub_subscription_removes_the_remote_one(broker_factory, rcv):
    hub, src = broker(broker_factory, "hub"), broker(broker_factory, "src")
    eid = uid("Vehicle")
    src.create(entity(eid, "Vehicle", speed=prop(0)))
    register(hub, src, eid)
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3))
    sid = subscribe(hub, rcv, eid, expiresAt=at)
    wait_remote(hub, sid)
    assert planted_at(src)[0]["expiresAt"] == at
    deadline = time.time() + 15
    while planted_at(src):
        assert time.time() < deadline, planted_at(src)
        time.sleep(0.2)
    changes(src, eid, 2)
    time.sleep(0.5)
    assert rcv.count()["entities"] == 0


def test_5_8_1_4_registration_after_the_subscription_plants_then(broker_factory, rcv):
    hub, src = broker(broker_factory, "hub"), broker(broker_factory, "src")
    eid = uid("Vehicle")
    src.create(entity(eid, "Vehicle", speed=prop(0)))
    sid = subscribe(hub, rcv, eid)
    assert remote(hub, sid) == []
    rid = register(hub, src, eid)
    wait_remote(hub, sid)
    changes(src, eid, 4)
    assert settle(rcv, 4)["entities"] == 4
    assert hub.delete("/csourceRegistrations/" + rid).status_code == 204
    deadline = time.time() + 10
    while planted_at(src):
        assert time.time() < deadline, planted_at(src)
        time.sleep(0.1)
    assert remote(hub, sid) == []


def test_5_8_1_4_source_down_then_up_is_retried(broker_factory, rcv):
    hub = broker(broker_factory, "hub")
    tenant = fresh_tenant()
    eid = uid("Vehicle")
    body = {"type": "ContextSourceRegistration", "information": [{"entities": [{"id": eid, "type": "Vehicle"}]}],
            "endpoint": "cor://127.0.0.1:%d" % PORTS["late"], "tenant": tenant, "operations": ["federationOps"]}
    r = hub.post("/csourceRegistrations", body)
    assert r.status_code == 201, r.text
    rid = r.headers["Location"].rsplit("/", 1)[1]
    sid = subscribe(hub, rcv, eid)
    parts = wait_remote(hub, sid, status="failed")
    assert parts[0]["reason"]
    reg = hub.get("/csourceRegistrations/" + rid).json()
    assert reg["timesFailed"] >= 1 and reg["status"] == "failed", reg
    src = Client(broker_factory("--brokerAlias", "dsub-late", "--corPort", str(PORTS["late"])), tenant)
    src.create(entity(eid, "Vehicle", speed=prop(0)))
    wait_remote(hub, sid, timeout=30)
    changes(src, eid, 3)
    assert settle(rcv, 3)["entities"] == 3


def test_5_8_1_4_hub_restart_remembers_not_duplicates(broker_factory, rcv, tmp_path):
    hub = broker(broker_factory, "hub-disk", None, "--dbDir", str(tmp_path / "hub"))
    src = broker(broker_factory, "src")
    eid, sid = flow(hub, src, rcv, "http", n=2)
    hub.broker.stop()
    hub.broker.start()
    wait_remote(hub, sid)
    deadline = time.time() + 10
    while True:                      # PATCHed with the restarted hub's endpoint
        mine = planted_at(src)
        assert len(mine) == 1, mine
        if str(hub.broker.port) in mine[0]["notification"]["endpoint"]["uri"]:
            break
        assert time.time() < deadline, mine
        time.sleep(0.1)
    rcv.reset()
    changes(src, eid, 5, 100)
    c = settle(rcv, 5)
    assert c["entities"] == 5 and c["duplicates"] == 0, c


# ---------------------------------------------------------------- loops and chains (4.3.6.4, 6.3.18)

def test_6_3_18_brokers_registered_to_each_other_notify_once(broker_factory, rcv):
    hub, src = broker(broker_factory, "hub"), broker(broker_factory, "src")
    eid = uid("Vehicle")
    src.create(entity(eid, "Vehicle", speed=prop(0)))
    register(hub, src, eid)
    register(src, hub, eid)              # the source registers the hub back
    sid = subscribe(hub, rcv, eid)
    parts = wait_remote(hub, sid)
    back = wait_remote(src, parts[0]["subscriptionId"], status="loop")
    assert back[0]["status"] == "loop"
    assert len(planted_at(src)) == 1 and planted_at(hub) == []
    changes(src, eid, 6, 1)
    c = settle(rcv, 6)
    assert c["entities"] == 6 and c["duplicates"] == 0, c


def test_5_8_1_4_subscription_naming_this_broker_in_its_chain_is_508(broker_factory):
    hub, src = broker(broker_factory, "hub"), broker(broker_factory, "src")
    eid = uid("Vehicle")
    register(hub, src, eid)
    rcv_uri = "http://127.0.0.1:9/notify"
    r = hub.post("/subscriptions", {"type": "Subscription", "entities": [{"id": eid, "type": "Vehicle"}],
                                    "notification": {"endpoint": {"uri": rcv_uri}}},
                 headers={"Via": "1.1 dsub-hub"})
    assert r.status_code == 508, r.text


@pytest.mark.parametrize("over", ["http", "cor"])
def test_three_broker_chain(broker_factory, rcv, over):
    """A -> B -> C: the entity is at C; the subscription at A is planted at B, and by B at C."""
    a = broker(broker_factory, "a")
    b = broker(broker_factory, "b-" + over, "b" if over == "cor" else None)
    c = broker(broker_factory, "c-" + over, "c" if over == "cor" else None)
    eid = uid("Vehicle")
    c.create(entity(eid, "Vehicle", speed=prop(0)))
    register(a, b, eid, over=over, cor="b")
    register(b, c, eid, over=over, cor="c")
    sid = subscribe(a, rcv, eid)
    at_b = wait_remote(a, sid)[0]["subscriptionId"]
    wait_remote(b, at_b)
    assert len(planted_at(c)) == 1
    changes(c, eid, 10, 1)
    n = settle(rcv, 10)
    assert n["entities"] == 10 and n["duplicates"] == 0 and n["outOfOrder"] == 0, n


def test_5_8_1_4_entity_deleted_at_the_source_is_relayed(broker_factory, rcv):
    hub, src = broker(broker_factory, "hub"), broker(broker_factory, "src")
    eid = uid("Vehicle")
    src.create(entity(eid, "Vehicle", speed=prop(0)))
    register(hub, src, eid)
    sid = subscribe(hub, rcv, eid, notificationTrigger=["entityDeleted"])
    wait_remote(hub, sid)
    assert src.delete("/entities/" + eid).status_code == 204
    settle(rcv, 1)
    d = rcv.notifications()[-1]["body"]
    assert d["subscriptionId"] == sid and d["data"][0]["id"] == eid and "deletedAt" in d["data"][0], d


def test_5_8_1_4_registration_moved_to_another_source_moves_the_copy(broker_factory, rcv):
    hub, src, src2 = broker(broker_factory, "hub"), broker(broker_factory, "src"), broker(broker_factory, "src2")
    eid = uid("Vehicle")
    src.create(entity(eid, "Vehicle", speed=prop(0)))
    src2.tenant = src.tenant
    src2.create(entity(eid, "Vehicle", speed=prop(0)))
    rid = register(hub, src, eid)
    sid = subscribe(hub, rcv, eid)
    wait_remote(hub, sid)
    assert len(planted_at(src)) == 1
    r = hub.patch("/csourceRegistrations/" + rid, {"endpoint": src2.broker.base})
    assert r.status_code == 204, r.text
    deadline = time.time() + 15
    while planted_at(src) or len(planted_at(src2)) != 1:
        assert time.time() < deadline, (planted_at(src), planted_at(src2))
        time.sleep(0.1)
    wait_remote(hub, sid)
    changes(src2, eid, 3)
    assert settle(rcv, 3)["entities"] == 3


def test_5_8_1_4_with_auth_the_source_notifies_the_public_dsub_endpoint(tmp_path, rcv):
    """--auth jwt at both: the hub plants with the registration's contextSourceInfo Authorization
    (6.3.19); the source's notifications, which carry no token of the hub's, are taken at /dsub/{key}
    (the key is the credential) in the subscription's tenant."""
    from jwtkit import claims, token
    from test_auth import SECRET, AuthBroker
    API = "/ngsi-ld/v1"
    tok = token(claims({"*": "write"}), secret=SECRET)
    hub = AuthBroker(tmp_path, "--jwtSecret", SECRET, "--brokerAlias", "dsub-auth-hub")
    src = AuthBroker(tmp_path, "--jwtSecret", SECRET, "--brokerAlias", "dsub-auth-src")
    try:
        eid = uid("Vehicle")
        ht, st = fresh_tenant(), fresh_tenant()
        assert src.req("POST", API + "/entities", tok, st, {"id": eid, "type": "Vehicle",
                                                             "speed": prop(0)}).status_code == 201
        reg = {"type": "ContextSourceRegistration", "information": [{"entities": [{"id": eid, "type": "Vehicle"}]}],
               "endpoint": src.base, "tenant": st, "operations": ["federationOps"],
               "contextSourceInfo": [{"key": "Authorization", "value": "Bearer " + tok}]}
        assert hub.req("POST", API + "/csourceRegistrations", tok, ht, reg).status_code == 201
        r = hub.req("POST", API + "/subscriptions", tok, ht, {
            "type": "Subscription", "entities": [{"id": eid, "type": "Vehicle"}],
            "notification": {"endpoint": {"uri": rcv.uri}}})
        assert r.status_code == 201, r.text
        sid = r.headers["Location"].rsplit("/", 1)[1]
        deadline = time.time() + 15
        while True:
            s = hub.req("GET", API + "/subscriptions/" + sid, tok, ht, params={"options": "sysAttrs"}).json()
            if [p["status"] for p in s.get("coraine:remote", [])] == ["planted"]:
                break
            assert time.time() < deadline, s
            time.sleep(0.1)
        for i in range(3):
            assert src.req("PATCH", API + "/entities/%s/attrs" % eid, tok, st,
                           {"speed": prop(i + 1)}).status_code == 204
        c = settle(rcv, 3)
        assert c["entities"] == 3 and c["perSubscription"] == {sid: c["notifications"]}, c
    finally:
        hub.stop()
        src.stop()


def test_5_8_1_4_hub_throttling_applies_to_relayed_changes(broker_factory, rcv):
    """throttling is the hub's (not sent to the source): 5 quick changes within it give 1 notification."""
    hub, src = broker(broker_factory, "hub"), broker(broker_factory, "src")
    eid = uid("Vehicle")
    src.create(entity(eid, "Vehicle", speed=prop(0)))
    register(hub, src, eid)
    sid = subscribe(hub, rcv, eid, throttling=30)
    wait_remote(hub, sid)
    assert "throttling" not in planted_at(src)[0]
    changes(src, eid, 5, 1)
    c = settle(rcv, 1)
    assert c["entities"] == 1, c
    s = hub.get("/subscriptions/" + sid, params={"options": "sysAttrs"}).json()
    assert s["notification"]["coraine:dropped"]["throttled"] == 4, s["notification"]


def test_5_8_2_4_patch_that_no_longer_matches_deletes_the_remote_one(broker_factory, rcv):
    """entities PATCHed to an id the registration does not cover: the copy goes (noLongerMatching)."""
    hub, src = broker(broker_factory, "hub"), broker(broker_factory, "src")
    eid = uid("Vehicle")
    src.create(entity(eid, "Vehicle", speed=prop(0)))
    register(hub, src, eid)
    sid = subscribe(hub, rcv, eid)
    wait_remote(hub, sid)
    r = hub.patch("/subscriptions/" + sid, {"entities": [{"id": uid("Vehicle"), "type": "Vehicle"}]})
    assert r.status_code == 204, r.text
    deadline = time.time() + 10
    while planted_at(src):
        assert time.time() < deadline, planted_at(src)
        time.sleep(0.1)
    assert remote(hub, sid) == []
    changes(src, eid, 2)
    time.sleep(0.5)
    assert rcv.count()["entities"] == 0


# ---------------------------------------------------------------- splitEntities (5.2.12, 5.8.1.4, 5.8.6)

def _split_room(hub, src):
    eid = uid("Room")
    hub.create(entity(eid, "Room", name=prop("kitchen")))       # the hub holds one fragment
    src.create(entity(eid, "Room", temperature=prop(10)))       # the source the other
    register(hub, src, eid, etype="Room")
    return eid


def _split_sub(hub, rcv, eid, **members):
    body = {"type": "Subscription", "entities": [{"id": eid, "type": "Room"}],
            "q": 'temperature>20;name=="kitchen"', "watchedAttributes": ["temperature"],
            "notification": {"endpoint": {"uri": rcv.uri}}}
    body.update(members)
    r = hub.post("/subscriptions", body)
    assert r.status_code == 201, r.text
    return r.headers["Location"].rsplit("/", 1)[1]


def test_5_8_6_split_entities_merges_what_a_source_notifies_before_q(broker_factory, rcv):
    hub, src = broker(broker_factory, "split-hub"), broker(broker_factory, "split-src")
    eid = _split_room(hub, src)
    sid = _split_sub(hub, rcv, eid, splitEntities=True)
    wait_remote(hub, sid)
    mine = planted_at(src)
    assert len(mine) == 1 and "q" not in mine[0], mine        # 5.8.1.4: q left out of the copy
    r = src.patch("/entities/%s/attrs" % eid, {"temperature": prop(15)})
    assert r.status_code == 204, r.text
    r = src.patch("/entities/%s/attrs" % eid, {"temperature": prop(25)})
    assert r.status_code == 204, r.text
    rcv.wait(1, timeout=15.0, key="entities")
    time.sleep(0.5)
    got = [n["body"] for n in rcv.notifications()]
    # 15 never matches the merged entity; the notified 25 merged with the hub's name does, once
    assert len(got) == 1, got
    e = got[0]["data"][0]
    assert got[0]["subscriptionId"] == sid
    assert e["temperature"]["value"] == 25 and e["name"]["value"] == "kitchen", got


def _retrieves(c):
    m = requests.get(c.broker.base + "/metrics", timeout=10).text
    return sum(int(line.rsplit(" ", 1)[1]) for line in m.splitlines()
               if line.startswith("coraine_http_requests_total{") and 'method="GET"' in line and "/entities" in line)


def test_5_8_6_split_entities_does_not_read_the_notifying_source_again(broker_factory, rcv):
    """5.8.6: the entities of a notification are retrieved locally and from every context source that has
    them "except for the one from which the Notification has been received"; a second source is asked."""
    hub, src = broker(broker_factory, "split-hub"), broker(broker_factory, "split-src")
    other = broker(broker_factory, "split-other")
    eid = _split_room(hub, src)
    other.tenant = src.tenant
    other.create(entity(eid, "Room", humidity=prop(40)))
    register(hub, other, eid, etype="Room", ops=("retrieveOps",))
    sid = _split_sub(hub, rcv, eid, splitEntities=True)
    wait_remote(hub, sid)
    before_src, before_other = _retrieves(src), _retrieves(other)
    r = src.patch("/entities/%s/attrs" % eid, {"temperature": prop(30)})
    assert r.status_code == 204, r.text
    rcv.wait(1, timeout=15.0, key="entities")
    time.sleep(0.5)
    got = [n["body"] for n in rcv.notifications()]
    assert len(got) == 1, got
    e = got[0]["data"][0]
    assert e["temperature"]["value"] == 30 and e["name"]["value"] == "kitchen", e
    assert e["humidity"]["value"] == 40, e             # the other source's fragment
    assert _retrieves(src) == before_src               # the notifying source: not asked again
    assert _retrieves(other) > before_other


def test_5_8_1_4_without_split_entities_the_source_applies_q_to_its_part(broker_factory, rcv):
    hub, src = broker(broker_factory, "split-hub"), broker(broker_factory, "split-src")
    eid = _split_room(hub, src)
    sid = _split_sub(hub, rcv, eid, splitEntities=False)
    wait_remote(hub, sid)
    mine = planted_at(src)
    assert len(mine) == 1 and mine[0].get("q"), mine
    r = src.patch("/entities/%s/attrs" % eid, {"temperature": prop(25)})
    assert r.status_code == 204, r.text
    time.sleep(1.5)
    assert rcv.count()["notifications"] == 0                   # the source's part has no name


def test_5_2_12_split_entities_must_be_a_boolean(broker_factory, rcv):
    hub = broker(broker_factory, "split-hub")
    r = hub.post("/subscriptions", {"type": "Subscription", "entities": [{"type": "Room"}],
                                    "splitEntities": "yes", "notification": {"endpoint": {"uri": rcv.uri}}})
    assert r.status_code == 400, r.text
    assert r.json()["type"].endswith("BadRequestData")
