"""Distributed subscriptions (5.8.1.4, 5.8.5.4): what the hub plants at a
source never outlives the hub's interest in it, and a source is planted at
once however many registrations reach it.

- Orphans: the copy carries a lease (expiresAt, --dsubLease) the hub
  renews; a delete that does not reach the source (hub subscription deleted,
  registration deleted or changed away, subscription expired) is retried
  until it does; a restarted hub finds the copies of its own that it holds
  no more (ids ending in its alias's hash) and deletes them.
- Duplicates: several registrations of one source (other aliases, other
  endpoints to the same broker) plant one copy, and every change reaches
  the subscriber once.

Two or three coraine processes on loopback; the sources that go down keep
their subscriptions on --dbDir and are reached over cor:// (their --corPort
survives the restart)."""

import time

import pytest

from conftest import Client, fresh_tenant
from ngsi import entity, free_port, prop, uid
from receiver import Receiver
from test_distributed_subscription import changes, planted_at, remote, settle, subscribe, wait_remote

PORTS = {n: free_port() for n in ("s1", "s2", "s3", "s4", "s5", "s6", "s7", "dup")}


def broker(broker_factory, alias, cor=None, *flags):
    f = ["--brokerAlias", "orph-" + alias]
    if cor:
        f += ["--corPort", str(PORTS[cor])]
    c = Client(broker_factory(*(f + list(flags))), fresh_tenant())
    c.ensure_tenant()
    return c


def register(hub, src, eid, cor=None, **members):
    endpoint = "cor://127.0.0.1:%d" % PORTS[cor] if cor else src.broker.base
    body = {"type": "ContextSourceRegistration", "information": [{"entities": [{"id": eid, "type": "Vehicle"}]}],
            "endpoint": endpoint, "tenant": src.tenant, "operations": ["federationOps"]}
    body.update(members)
    r = hub.post("/csourceRegistrations", body)
    assert r.status_code == 201, r.text
    return r.headers["Location"].rsplit("/", 1)[1]


def wait_gone(src, timeout=60.0):           # retries back off to 16 s and more on a loaded machine
    deadline = time.time() + timeout
    while planted_at(src):
        assert time.time() < deadline, planted_at(src)
        time.sleep(0.2)


@pytest.fixture
def rcv():
    r = Receiver()
    yield r
    r.stop()


def planted_source(broker_factory, tmp_path, name):
    """A source on --dbDir reached over cor:// at a fixed port, with an entity."""
    src = broker(broker_factory, name, name, "--dbDir", str(tmp_path / name))
    eid = uid("Vehicle")
    src.create(entity(eid, "Vehicle", speed=prop(0)))
    return src, eid


def plant(hub, src, eid, rcv, cor, **members):
    rid = register(hub, src, eid, cor=cor)
    sid = subscribe(hub, rcv, eid, **members)
    wait_remote(hub, sid)
    assert len(planted_at(src)) == 1
    return rid, sid


def iso(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


# ---------------------------------------------------------------- the lease

def test_5_8_1_4_planted_copy_carries_a_lease_the_hub_renews(broker_factory, rcv):
    hub, src = broker(broker_factory, "lease-hub", None, "--dsubLease", "3"), broker(broker_factory, "lease-src")
    eid = uid("Vehicle")
    src.create(entity(eid, "Vehicle", speed=prop(0)))
    register(hub, src, eid)
    sid = subscribe(hub, rcv, eid)
    wait_remote(hub, sid)
    first = planted_at(src)[0]["expiresAt"]
    assert iso(time.time()) < first <= iso(time.time() + 4), first
    time.sleep(4.5)                      # past the first lease: renewed
    mine = planted_at(src)
    assert len(mine) == 1 and mine[0]["expiresAt"] > first, (first, mine)
    changes(src, eid, 3, 1)
    c = settle(rcv, 3)
    assert c["entities"] == 3 and c["duplicates"] == 0, c


def test_5_8_1_4_lease_ends_at_the_hub_subscription_expiry(broker_factory, rcv):
    hub, src = broker(broker_factory, "lease-hub", None, "--dsubLease", "3"), broker(broker_factory, "lease-src")
    eid = uid("Vehicle")
    src.create(entity(eid, "Vehicle", speed=prop(0)))
    register(hub, src, eid)
    at = iso(time.time() + 2)
    sid = subscribe(hub, rcv, eid, expiresAt=at)
    wait_remote(hub, sid)
    assert planted_at(src)[0]["expiresAt"] == at


def test_5_8_1_4_a_stopped_hub_copy_dies_with_its_lease(broker_factory, rcv, tmp_path):
    src = broker(broker_factory, "lease-src2")
    hub = broker(broker_factory, "lease-stop", None, "--dsubLease", "2")
    eid = uid("Vehicle")
    src.create(entity(eid, "Vehicle", speed=prop(0)))
    register(hub, src, eid)
    sid = subscribe(hub, rcv, eid)
    wait_remote(hub, sid)
    hub.broker.stop()                    # no store, never back: nothing renews or deletes
    try:
        deadline = time.time() + 10      # expired at the source: it notifies nothing more
        while any(s.get("status") != "expired" for s in planted_at(src)):
            assert time.time() < deadline, planted_at(src)
            time.sleep(0.2)
    finally:
        hub.broker.start()


# ---------------------------------------------------------------- deletes retried

def test_5_8_5_4_delete_while_the_source_is_down_is_retried(broker_factory, rcv, tmp_path):
    src, eid = planted_source(broker_factory, tmp_path, "s1")
    hub = broker(broker_factory, "hub")
    rid, sid = plant(hub, src, eid, rcv, "s1")
    src.broker.stop()
    assert hub.delete("/subscriptions/" + sid).status_code == 204
    time.sleep(1.5)                      # the first delete fails
    src.broker.start()
    assert planted_at(src), "the source kept the copy on --dbDir"
    wait_gone(src)


def test_5_8_1_4_registration_deleted_while_the_source_is_down_is_retried(broker_factory, rcv, tmp_path):
    src, eid = planted_source(broker_factory, tmp_path, "s2")
    hub = broker(broker_factory, "hub")
    rid, sid = plant(hub, src, eid, rcv, "s2")
    src.broker.stop()
    assert hub.delete("/csourceRegistrations/" + rid).status_code == 204
    time.sleep(1.5)
    src.broker.start()
    wait_gone(src)
    assert remote(hub, sid) == []


def test_5_8_1_4_registration_changed_away_while_the_source_is_down_is_retried(broker_factory, rcv, tmp_path):
    src, eid = planted_source(broker_factory, tmp_path, "s3")
    hub = broker(broker_factory, "hub")
    rid, sid = plant(hub, src, eid, rcv, "s3")
    src.broker.stop()
    other = {"entities": [{"id": uid("Vehicle"), "type": "Vehicle"}]}
    r = hub.patch("/csourceRegistrations/" + rid, {"information": [other]})
    assert r.status_code == 204, r.text
    time.sleep(1.5)
    src.broker.start()
    wait_gone(src)


def test_5_8_1_4_subscription_expired_while_the_source_is_down_leaves_nothing(broker_factory, rcv, tmp_path):
    src, eid = planted_source(broker_factory, tmp_path, "s4")
    hub = broker(broker_factory, "hub")
    rid, sid = plant(hub, src, eid, rcv, "s4", expiresAt=iso(time.time() + 3))
    src.broker.stop()
    time.sleep(3.5)                      # expired at the hub while the source is down
    src.broker.start()
    wait_gone(src)
    changes(src, eid, 2)
    time.sleep(0.5)
    assert rcv.count()["entities"] == 0


# ---------------------------------------------------------------- a restarted hub sweeps its orphans

def test_5_8_1_4_hub_restarted_without_store_deletes_its_orphans(broker_factory, rcv, tmp_path):
    src, eid = planted_source(broker_factory, tmp_path, "s5")
    hub = broker(broker_factory, "hub-mem")
    plant(hub, src, eid, rcv, "s5")
    old = planted_at(src)[0]["id"]
    hub.broker.stop()
    hub.broker.mongo_prefix = None       # on mongoc (CORAINE_TEST_DATABASE), new databases: a store forgotten
    hub.broker.start()                   # everything forgotten: the copy is an orphan
    hub.ensure_tenant()
    sid = subscribe(hub, rcv, eid)       # provisioned again: a new subscription,
    register(hub, src, eid, cor="s5")    # the source known again: swept, and a new copy planted
    wait_remote(hub, sid)
    deadline = time.time() + 20
    while [s["id"] for s in planted_at(src)] != [remote(hub, sid)[0]["subscriptionId"]]:
        assert time.time() < deadline, (old, planted_at(src))
        time.sleep(0.2)
    assert old != remote(hub, sid)[0]["subscriptionId"]
    changes(src, eid, 3, 1)
    c = settle(rcv, 3)
    assert c["entities"] == 3 and c["duplicates"] == 0, c


def test_5_8_5_4_hub_restarted_after_a_delete_that_never_arrived(broker_factory, rcv, tmp_path):
    src, eid = planted_source(broker_factory, tmp_path, "s6")
    hub = broker(broker_factory, "hub-disk", None, "--dbDir", str(tmp_path / "hub"))
    keep_eid = uid("Vehicle")
    src.create(entity(keep_eid, "Vehicle", speed=prop(0)))
    register(hub, src, keep_eid, cor="s6")
    kept = subscribe(hub, rcv, keep_eid)     # still wanted after the restart: not an orphan
    wait_remote(hub, kept)
    register(hub, src, eid, cor="s6")
    sid = subscribe(hub, rcv, eid)
    wait_remote(hub, sid)
    assert len(planted_at(src)) == 2
    src.broker.stop()
    assert hub.delete("/subscriptions/" + sid).status_code == 204
    time.sleep(0.5)
    hub.broker.stop()                    # the hub forgets the pending delete
    src.broker.start()
    hub.broker.start()
    deadline = time.time() + 20
    while len(planted_at(src)) != 1:
        assert time.time() < deadline, planted_at(src)
        time.sleep(0.2)
    wait_remote(hub, kept)
    assert planted_at(src)[0]["id"] == remote(hub, kept)[0]["subscriptionId"]


def test_5_8_5_4_hub_restarted_while_its_source_is_down_sweeps_when_it_is_back(broker_factory, rcv, tmp_path):
    # the first sweep finds the source down: it is asked again (1 s, 2 s, 4 s ...), not at the next
    # --dsubLease (600 s here), and the orphan goes as soon as the source is back
    src, eid = planted_source(broker_factory, tmp_path, "s7")
    hub = broker(broker_factory, "hub-down", None, "--dbDir", str(tmp_path / "hub"))
    _, sid = plant(hub, src, eid, rcv, "s7")
    src.broker.stop()
    assert hub.delete("/subscriptions/" + sid).status_code == 204
    time.sleep(0.5)
    hub.broker.stop()                    # the hub forgets the pending delete
    hub.broker.start()                   # its first sweep finds the source down
    hub.ensure_tenant()
    subscribe(hub, rcv, uid("Vehicle"))  # a subscription here: the tenant's sources are swept
    time.sleep(3)
    src.broker.start()
    wait_gone(src, timeout=30)


# ---------------------------------------------------------------- one copy per source

def test_5_8_1_4_registrations_with_other_aliases_of_one_source_plant_once(broker_factory, rcv):
    hub, src = broker(broker_factory, "hub"), broker(broker_factory, "dsrc")
    eid = uid("Vehicle")
    src.create(entity(eid, "Vehicle", speed=prop(0)))
    register(hub, src, eid, contextSourceAlias="alias-one")
    register(hub, src, eid, contextSourceAlias="alias-two")
    body = {"type": "ContextSourceRegistration", "information": [{"entities": [{"type": "Vehicle"}]}],
            "endpoint": src.broker.base, "tenant": src.tenant, "operations": ["federationOps"]}
    assert hub.post("/csourceRegistrations", body).status_code == 201   # by type: the same source again
    sid = subscribe(hub, rcv, eid)
    parts = wait_remote(hub, sid)
    assert len(parts) == 1, parts
    assert len(planted_at(src)) == 1
    changes(src, eid, 5, 1)
    c = settle(rcv, 5)
    assert c["entities"] == 5 and c["duplicates"] == 0, c


def test_5_8_1_4_http_and_cor_endpoints_of_one_broker_plant_once(broker_factory, rcv):
    hub, src = broker(broker_factory, "hub"), broker(broker_factory, "dup", "dup")
    eid = uid("Vehicle")
    src.create(entity(eid, "Vehicle", speed=prop(0)))
    r_http = register(hub, src, eid)
    r_cor = register(hub, src, eid, cor="dup")
    sid = subscribe(hub, rcv, eid)
    parts = wait_remote(hub, sid)
    deadline = time.time() + 10
    while sorted(p["status"] for p in remote(hub, sid)) != ["duplicate", "planted"]:
        assert time.time() < deadline, remote(hub, sid)
        time.sleep(0.1)
    assert len(planted_at(src)) == 1
    changes(src, eid, 4, 1)
    c = settle(rcv, 4)
    assert c["entities"] == 4 and c["duplicates"] == 0, c
    planted = [p for p in remote(hub, sid) if p["status"] == "planted"][0]["registrationId"]
    assert hub.delete("/csourceRegistrations/" + planted).status_code == 204
    deadline = time.time() + 15          # the other way to the broker takes over
    while [p["status"] for p in remote(hub, sid)] != ["planted"] or len(planted_at(src)) != 1:
        assert time.time() < deadline, (remote(hub, sid), planted_at(src))
        time.sleep(0.1)
    assert remote(hub, sid)[0]["registrationId"] == (r_cor if planted == r_http else r_http)
    rcv.reset()
    changes(src, eid, 3, 10)
    c = settle(rcv, 3)
    assert c["entities"] == 3 and c["duplicates"] == 0, c
