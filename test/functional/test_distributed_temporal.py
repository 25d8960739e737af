"""Distributed temporal writes (5.6.11.4-5.6.16.4 with 4.3.6.2-4.3.6.4,
operation names of 4.20: upsertTemporal, appendAttrsTemporal,
deleteAttrsTemporal, updateAttrInstanceTemporal, deleteAttrInstanceTemporal,
deleteTemporal): a temporal write at the hub goes to the sources whose
registrations match the entity and attributes, split by mode as a core write
(fwd/fwd_temporal.c through fwd_write and fwd_run), with the same 207 and
registrationId rules; over HTTP and over cor://. Both brokers keep history
(--history corDB); the source is a second coraine started by the test."""

import pytest

from conftest import Client, fresh_tenant
from mocksource import MockSource
from ngsi import free_port, uid

TOPS = ["upsertTemporal", "appendAttrsTemporal", "deleteAttrsTemporal", "updateAttrInstanceTemporal",
        "deleteAttrInstanceTemporal", "deleteTemporal"]
T0, T1, T2 = "2020-08-01T12:03:00Z", "2020-08-01T12:05:00Z", "2020-08-01T12:07:00Z"


def obs(v, t):
    return {"type": "Property", "value": v, "observedAt": t}


def client(broker_factory, alias, *flags):
    c = Client(broker_factory("--history", "corDB", "--brokerAlias", alias, "--forwardTimeout", "1500", *flags),
               fresh_tenant())
    c.ensure_tenant()
    return c


@pytest.fixture
def hub(broker_factory):
    c = client(broker_factory, "hub-t")
    yield c
    c.close()


@pytest.fixture
def src(broker_factory):
    c = client(broker_factory, "src-t")
    yield c
    c.close()


def register(hub, eid, endpoint, tenant=None, mode="exclusive", attrs=("speed",), ops=TOPS):
    info = {"entities": [{"id": eid, "type": "Vehicle"}]}
    if attrs:
        info["propertyNames"] = list(attrs)
    body = {"type": "ContextSourceRegistration", "information": [info], "mode": mode, "endpoint": endpoint,
            "operations": list(ops)}
    if tenant:
        body["tenant"] = tenant
    r = hub.post("/csourceRegistrations", body)
    assert r.status_code == 201, r.text
    return r.headers["Location"].rsplit("/", 1)[1]


def tget(c, eid, **params):
    return c.get("/temporal/entities/" + eid, params=params)


def values(c, eid, attr):
    """The values of attr's instances; None: 404 (no such entity, or none of attrs)."""
    r = tget(c, eid, attrs=attr)
    if r.status_code == 404:
        return None
    assert r.status_code == 200, r.text
    return [i["value"] for i in r.json().get(attr, [])]


def cycle(hub, src, eid):
    """Every temporal write of an exclusive registration's attribute goes to
    the source only; the other attributes stay here."""
    r = hub.post("/temporal/entities", {"id": eid, "type": "Vehicle", "speed": [obs(1, T0), obs(2, T1)],
                                        "brand": [{"type": "Property", "value": "hub"}]})
    assert r.status_code == 201, r.text                           # 5.6.11.4
    assert values(src, eid, "speed") == [1, 2]
    assert values(hub, eid, "speed") is None and values(hub, eid, "brand") == ["hub"]
    r = hub.post("/temporal/entities/%s/attrs" % eid, {"speed": [obs(3, T2)]})
    assert r.status_code == 204, r.text                           # 5.6.12.4
    assert values(src, eid, "speed") == [1, 2, 3]
    iid = tget(src, eid, attrs="speed").json()["speed"][0]["instanceId"]
    r = hub.patch("/temporal/entities/%s/attrs/speed/%s" % (eid, iid), {"value": 10})
    assert r.status_code == 204, r.text                           # 5.6.14.4
    assert values(src, eid, "speed") == [10, 2, 3]
    r = hub.delete("/temporal/entities/%s/attrs/speed/%s" % (eid, iid))
    assert r.status_code == 204, r.text                           # 5.6.15.4
    assert values(src, eid, "speed") == [2, 3]
    r = hub.delete("/temporal/entities/%s/attrs/speed" % eid)
    assert r.status_code == 204, r.text                           # 5.6.13.4
    assert values(src, eid, "speed") is None                      # none of attrs: 404
    assert values(hub, eid, "brand") == ["hub"]
    r = hub.delete("/temporal/entities/" + eid)
    assert r.status_code == 204, r.text                           # 5.6.16.4
    assert tget(src, eid).status_code == 404 and tget(hub, eid).status_code == 404


def test_5_6_11_to_16_exclusive_temporal_writes_reach_the_source(hub, src):
    eid = uid("Vehicle")
    register(hub, eid, src.broker.base, src.tenant)
    cycle(hub, src, eid)


def test_5_6_11_4_inclusive_upsert_here_and_there(hub, src):
    eid = uid("Vehicle")
    register(hub, eid, src.broker.base, src.tenant, mode="inclusive", attrs=None)
    r = hub.post("/temporal/entities", {"id": eid, "type": "Vehicle", "speed": [obs(1, T0), obs(2, T1)]})
    assert r.status_code == 201, r.text
    assert values(src, eid, "speed") == [1, 2] and values(hub, eid, "speed") == [1, 2]
    r = hub.post("/temporal/entities", {"id": eid, "type": "Vehicle", "speed": [obs(3, T2)]})
    assert r.status_code == 204, r.text                           # an upsert of instances, both places
    assert values(src, eid, "speed") == [1, 2, 3] and values(hub, eid, "speed") == [1, 2, 3]


def test_6_3_18_local_true_is_not_forwarded(hub, src):
    eid = uid("Vehicle")
    register(hub, eid, src.broker.base, src.tenant, mode="inclusive", attrs=None)
    r = hub.post("/temporal/entities?local=true", {"id": eid, "type": "Vehicle", "speed": [obs(1, T0)]})
    assert r.status_code == 201, r.text
    assert values(hub, eid, "speed") == [1] and values(src, eid, "speed") is None
    r = hub.post("/temporal/entities/%s/attrs?local=true" % eid, {"speed": [obs(2, T1)]})
    assert r.status_code == 204, r.text
    assert values(src, eid, "speed") is None
    assert hub.post("/temporal/entities?local=maybe", {"id": eid, "type": "Vehicle"}).status_code == 400


def test_5_6_12_4_operation_not_supported_by_an_exclusive_registration_is_409(hub, src):
    """An exclusive registration matched by a temporal write it does not
    support: Conflict, and nothing is sent to it."""
    eid = uid("Vehicle")
    register(hub, eid, src.broker.base, src.tenant, ops=["upsertTemporal"])
    assert hub.post("/temporal/entities", {"id": eid, "type": "Vehicle", "speed": [obs(1, T0)]}).status_code == 201
    r = hub.post("/temporal/entities/%s/attrs" % eid, {"speed": [obs(2, T1)]})
    assert r.status_code == 409, r.text
    assert values(src, eid, "speed") == [1]


def test_6_3_17_failing_source_of_a_temporal_write_is_207_with_registration_id(hub):
    m = MockSource(500, b'{"type":"https://uri.etsi.org/ngsi-ld/errors/InternalError","title":"x","status":500}')
    try:
        eid = uid("Vehicle")
        rid = register(hub, eid, m.base, mode="inclusive", attrs=None)
        r = hub.post("/temporal/entities", {"id": eid, "type": "Vehicle", "speed": [obs(1, T0)]})
        assert r.status_code == 207, r.text
        body = r.json()
        assert body["success"] == [eid]
        assert body["errors"][0]["registrationId"] == rid and body["errors"][0]["entityId"] == eid
        assert values(hub, eid, "speed") == [1]                   # the local part is written
        method, path, _, _ = m.requests[-1]
        assert method == "POST" and path.startswith("/ngsi-ld/v1/temporal/entities")
        r = hub.post("/temporal/entities/%s/attrs" % eid, {"speed": [obs(2, T1)]})
        assert r.status_code == 207, r.text                       # an UpdateResult naming the registration
        assert r.json()["notUpdated"][0]["registrationId"] == rid
        assert m.requests[-1][1] == "/ngsi-ld/v1/temporal/entities/%s/attrs" % eid
    finally:
        m.close()


def test_5_6_11_to_16_temporal_writes_over_cor(broker_factory):
    port = free_port()
    hub = client(broker_factory, "hub-tc")
    src = client(broker_factory, "src-tc", "--corPort", str(port))
    try:
        eid = uid("Vehicle")
        register(hub, eid, "cor://127.0.0.1:%d" % port, src.tenant)
        cycle(hub, src, eid)
        st = Client(hub.broker).get("/statistics").json()["distributed"]["cor"]
        assert st["requestsFailed"] == 0 and st["requestsSent"] >= 6
    finally:
        hub.close()
        src.close()


def test_5_6_14_4_bad_path_names_are_not_forwarded(hub):
    """5.6.13.4-5.6.15.4: an Attribute name or instanceId that is not valid is
    BadRequestData here, and nothing goes to the registered source."""
    m = MockSource(204, b"")
    try:
        eid = uid("Vehicle")
        register(hub, eid, m.base, mode="inclusive", attrs=None)
        iid = "urn:ngsi-ld:attribute:instance:0000000000000001"
        for r in (hub.patch("/temporal/entities/%s/attrs/bad(name/%s" % (eid, iid), {"value": 1}),
                  hub.delete("/temporal/entities/%s/attrs/bad(name" % eid),
                  hub.delete("/temporal/entities/%s/attrs/speed/notauri" % eid),
                  hub.delete("/temporal/entities/%s/attrs//%s" % (eid, iid))):
            assert r.status_code == 400 and r.json()["type"].endswith("BadRequestData"), r.text
        assert m.requests == []
    finally:
        m.close()
