"""Distributed temporal reads (5.7.3.4, 5.7.4.4 with 4.3.6, operation names
retrieveTemporal and queryTemporal of 4.20): GET /temporal/entities/{id},
GET /temporal/entities and POST /temporal/entityOperations/query at the hub
ask the sources whose registrations match (fwd/fwd_tread.c through fwd.c's
forwarding), and their instances are merged with the local ones per
attribute and datasetId, ordered by the timeproperty, lastN applied to the
merged series; every format is rendered (and aggregated) by the hub from the
merged instances. The sources are other coraine processes (--history corDB)
started by the test, over HTTP and cor://."""

import time

import pytest

from conftest import Client
from mocksource import MockSource
from ngsi import free_port, uid

from test_distributed_temporal import client, hub, obs, src  # noqa: F401 (fixtures: two coraine with history)

ROPS = ["retrieveTemporal", "queryTemporal"]
T = ["2020-08-01T12:0%d:00Z" % i for i in range(10)]


@pytest.fixture
def src2(broker_factory):
    c = client(broker_factory, "src2-tr")
    yield c
    c.close()


def register(hub, endpoint, tenant=None, eid=None, mode="inclusive", attrs=None, ops=ROPS, **extra):
    """A registration of endpoint for Vehicles (eid: that one), attrs: its propertyNames; its id."""
    info = {"entities": [dict({"type": "Vehicle"}, **({"id": eid} if eid else {}))]}
    info.update({"propertyNames": list(attrs)} if attrs else {})
    body = dict({"type": "ContextSourceRegistration", "information": [info], "mode": mode, "endpoint": endpoint,
                 "operations": list(ops)}, **({"tenant": tenant} if tenant else {}), **extra)
    r = hub.post("/csourceRegistrations", body)
    assert r.status_code == 201, r.text
    return r.headers["Location"].rsplit("/", 1)[1]


def put(c, eid, **attrs):
    """Temporal instances written to c only (local=true)."""
    body = {"id": eid, "type": "Vehicle"}
    body.update(attrs)
    r = c.post("/temporal/entities?local=true", body)
    assert r.status_code in (201, 204), r.text


def tget(c, eid, **params):
    return c.get("/temporal/entities/" + eid, params=params)


def vals(ent, attr):
    inst = ent.get(attr, [])
    return [i["value"] for i in (inst if isinstance(inst, list) else [inst])]


# ------------------------------------------------------------------ 5.7.3 retrieve

def test_5_7_3_4_inclusive_instances_merged_by_time(hub, src):
    eid = uid("Vehicle")
    put(hub, eid, speed=[obs(1, T[0]), obs(3, T[2])])
    put(src, eid, speed=[obs(2, T[1]), obs(4, T[3])], brand=[obs("src", T[1])])
    register(hub, src.broker.base, src.tenant)
    r = tget(hub, eid)
    assert r.status_code == 200, r.text
    e = r.json()
    assert vals(e, "speed") == [1, 2, 3, 4] and vals(e, "brand") == ["src"]
    ids = [i["instanceId"] for i in e["speed"]]
    assert len(set(ids)) == 4
    # lastN over the merged series: the last 2 of both sources together (5.7.3.4)
    assert vals(tget(hub, eid, lastN="2").json(), "speed") == [3, 4]
    assert vals(tget(hub, eid, lastN="3", attrs="speed").json(), "speed") == [2, 3, 4]
    # the temporal query goes to the source too
    e = tget(hub, eid, timerel="between", timeAt=T[1], endTimeAt=T[3]).json()
    assert vals(e, "speed") == [2, 3]
    # local=true: the local history only
    assert vals(tget(hub, eid, local="true").json(), "speed") == [1, 3]


def test_5_7_3_4_every_format_from_the_merged_instances(hub, src):
    eid = uid("Vehicle")
    put(hub, eid, speed=[obs(1, T[0]), obs(3, T[2])])
    put(src, eid, speed=[obs(2, T[1]), obs(4, T[3])])
    register(hub, src.broker.base, src.tenant)
    e = tget(hub, eid, format="temporalValues").json()
    assert e["speed"]["values"] == [[1, T[0]], [2, T[1]], [3, T[2]], [4, T[3]]]
    e = tget(hub, eid, options="temporalValues", lastN="1").json()
    assert e["speed"]["values"] == [[4, T[3]]]
    e = tget(hub, eid, format="aggregatedValues", aggrMethods="sum,max,totalCount").json()
    assert e["speed"]["sum"][0][0] == 10 and e["speed"]["max"][0][0] == 4 and e["speed"]["totalCount"][0][0] == 4
    e = tget(hub, eid, format="concise").json()
    assert [i["value"] if isinstance(i, dict) else i for i in e["speed"]] == [1, 2, 3, 4]


def test_5_7_3_4_exclusive_attribute_from_its_source_only(hub, src):
    eid = uid("Vehicle")
    put(hub, eid, brand=[obs("hub", T[0])])
    put(src, eid, speed=[obs(5, T[1]), obs(6, T[2])])
    register(hub, src.broker.base, src.tenant, eid=eid, mode="exclusive", attrs=["speed"])
    e = tget(hub, eid).json()
    assert vals(e, "speed") == [5, 6] and vals(e, "brand") == ["hub"]
    # not found here, found there
    other = uid("Vehicle")
    put(src, other, speed=[obs(7, T[3])])
    register(hub, src.broker.base, src.tenant, eid=other, mode="exclusive", attrs=["speed"])
    r = tget(hub, other)
    assert r.status_code == 200 and vals(r.json(), "speed") == [7], r.text
    # found nowhere: 404
    gone = uid("Vehicle")
    register(hub, src.broker.base, src.tenant, eid=gone, mode="exclusive", attrs=["speed"])
    assert tget(hub, gone).status_code == 404


def test_5_7_3_4_source_asked_for_its_attributes_with_the_temporal_query(hub):
    eid = uid("Vehicle")
    m = MockSource(200, b'{"id":"%s","type":"Vehicle","speed":[{"type":"Property","value":9,"observedAt":"%s",'
                        b'"instanceId":"urn:ngsi-ld:attribute:instance:00000000000000aa"}]}' % (eid.encode(), T[4].encode()))
    try:
        put(hub, eid, brand=[obs("hub", T[0])])
        register(hub, m.base, eid=eid, mode="exclusive", attrs=["speed"])
        r = tget(hub, eid, timerel="after", timeAt=T[0], lastN="5", attrs="speed,brand")
        assert r.status_code == 200, r.text
        assert vals(r.json(), "speed") == [9] and vals(r.json(), "brand") == ["hub"]
        assert r.json()["speed"][0]["instanceId"] == "urn:ngsi-ld:attribute:instance:00000000000000aa"
        method, path, headers, _ = m.requests[-1]
        assert method == "GET" and path.startswith("/ngsi-ld/v1/temporal/entities/" + eid.replace(":", ":") + "?")
        for want in ("timerel=after", "timeAt=2020-08-01T12:00:00", "lastN=5", "attrs=speed", "options=sysAttrs"):
            assert want in path, path
        assert "brand" not in path and "Via" in headers
        # a registration that declares none of the attributes asked for is not asked
        n = len(m.requests)
        assert vals(tget(hub, eid, attrs="brand").json(), "brand") == ["hub"]
        assert len(m.requests) == n
        # 4.20: a source without retrieveTemporal is asked a query for the id
        other = uid("Vehicle")
        register(hub, m.base, eid=other, mode="exclusive", attrs=["speed"], ops=["queryTemporal"])
        tget(hub, other)
        path = m.requests[-1][1]
        assert path.startswith("/ngsi-ld/v1/temporal/entities?") and "id=" + other in path, path
    finally:
        m.close()


def test_5_9_2_4_no_auxiliary_temporal_source(hub, src):
    """5.9.2.4: an auxiliary registration supports retrieveOps, retrieveEntity or queryEntity only, so
    5.7.3.4's auxiliary rule for temporal instances has no source to apply to."""
    r = hub.post("/csourceRegistrations", {"type": "ContextSourceRegistration", "mode": "auxiliary",
                                           "information": [{"entities": [{"type": "Vehicle"}]}],
                                           "endpoint": src.broker.base, "operations": ROPS})
    assert r.status_code == 400, r.text


def test_5_10_2_4_registration_with_an_observation_interval_the_query_meets(hub, src, src2):
    eid = uid("Vehicle")
    put(src, eid, speed=[obs(2, T[1])])
    put(src2, eid, speed=[obs(3, T[2])])
    register(hub, src.broker.base, src.tenant, observationInterval={"startAt": T[0], "endAt": T[5]})
    register(hub, src2.broker.base, src2.tenant, observationInterval={"startAt": "2030-01-01T00:00:00Z"})
    assert vals(tget(hub, eid, timerel="before", timeAt=T[5]).json(), "speed") == [2]     # src2's does not meet it
    assert vals(tget(hub, eid).json(), "speed") == [2, 3]           # no temporal restriction: both
    r = tget(hub, eid, timerel="after", timeAt="2031-01-01T00:00:00Z")
    # only src2 asked (src's interval ended): the entity, with nothing that late (as a local retrieve answers)
    assert r.status_code == 200 and "speed" not in r.json(), r.text


# ------------------------------------------------------------------ 5.7.4 query

def test_5_7_4_4_query_merges_entities_of_every_source(hub, src, src2):
    a, b, c = uid("Vehicle"), uid("Vehicle"), uid("Vehicle")
    put(hub, a, speed=[obs(1, T[0])])
    put(src, a, speed=[obs(2, T[1])])
    put(src, b, speed=[obs(3, T[2])])
    put(src2, c, speed=[obs(4, T[3])])
    put(src2, a, speed=[obs(5, T[4])])
    register(hub, src.broker.base, src.tenant)
    register(hub, src2.broker.base, src2.tenant)
    r = hub.get("/temporal/entities", params={"type": "Vehicle", "count": "true"})
    assert r.status_code == 200, r.text
    got = {e["id"]: vals(e, "speed") for e in r.json()}
    assert got == {a: [1, 2, 5], b: [3], c: [4]}
    assert r.headers["NGSILD-Results-Count"] == "3"
    assert [e["id"] for e in r.json()][0] == a                       # the local ones first
    # lastN per merged series
    r = hub.get("/temporal/entities", params={"type": "Vehicle", "lastN": "1"})
    assert {e["id"]: vals(e, "speed") for e in r.json()} == {a: [5], b: [3], c: [4]}
    # pages over the merged set
    seen = []
    for off in range(3):
        r = hub.get("/temporal/entities", params={"type": "Vehicle", "limit": "1", "offset": str(off)})
        assert r.status_code == 200 and len(r.json()) == 1, r.text
        seen.append(r.json()[0]["id"])
        assert ("next" in r.headers.get("Link", "")) == (off < 2)
    assert sorted(seen) == sorted([a, b, c])
    # the POST form, with its temporalQ
    r = hub.post("/temporal/entityOperations/query",
                 {"type": "Query", "entities": [{"type": "Vehicle"}],
                  "temporalQ": {"timerel": "after", "timeAt": T[2]}})
    assert r.status_code == 200, r.text
    assert {e["id"]: vals(e, "speed") for e in r.json()} == {a: [5], b: [3], c: [4]}


def test_6_3_17_failing_source_warns_and_the_others_answer(hub, src):
    a = uid("Vehicle")
    put(src, a, speed=[obs(2, T[1])])
    put(hub, a, speed=[obs(1, T[0])])
    register(hub, src.broker.base, src.tenant)
    m = MockSource(500, b'{"type":"https://uri.etsi.org/ngsi-ld/errors/InternalError","title":"x"}')
    try:
        rid = register(hub, m.base)
        r = hub.get("/temporal/entities", params={"type": "Vehicle"})
        assert r.status_code == 200, r.text
        assert {e["id"]: vals(e, "speed") for e in r.json()} == {a: [1, 2]}
        assert rid in r.headers["NGSILD-Warning"] and "299" in r.headers["NGSILD-Warning"]
        r = tget(hub, a)
        assert r.status_code == 200 and vals(r.json(), "speed") == [1, 2]
        assert rid in r.headers["NGSILD-Warning"]
    finally:
        m.close()
    # a source that does not answer at all: 199
    r = hub.get("/temporal/entities", params={"type": "Vehicle"})
    assert r.status_code == 200 and "199" in r.headers["NGSILD-Warning"], r.headers


def test_5_7_4_4_over_cor(broker_factory):
    port = free_port()
    hub = client(broker_factory, "hub-trc")
    src = client(broker_factory, "src-trc", "--corPort", str(port))
    try:
        eid = uid("Vehicle")
        put(hub, eid, speed=[obs(1, T[0])])
        put(src, eid, speed=[obs(2, T[1])])
        register(hub, "cor://127.0.0.1:%d" % port, src.tenant)
        assert vals(tget(hub, eid).json(), "speed") == [1, 2]
        r = hub.get("/temporal/entities", params={"type": "Vehicle", "lastN": "1"})
        assert {e["id"]: vals(e, "speed") for e in r.json()} == {eid: [2]}
        st = Client(hub.broker).get("/statistics").json()["distributed"]["cor"]
        assert st["requestsFailed"] == 0 and st["requestsSent"] >= 2
    finally:
        hub.close()
        src.close()


def test_6_3_18_temporal_brokers_registered_to_each_other_terminate(hub, src):
    a, b = uid("Vehicle"), uid("Vehicle")
    put(hub, a, speed=[obs(1, T[0])])
    put(src, b, speed=[obs(2, T[1])])
    register(hub, src.broker.base, src.tenant)
    register(src, hub.broker.base, hub.tenant)
    t = time.time()
    for c in (hub, src):
        r = c.get("/temporal/entities", params={"type": "Vehicle"})
        assert r.status_code == 200, r.text
        assert {e["id"]: vals(e, "speed") for e in r.json()} == {a: [1], b: [2]}
    assert time.time() - t < 5


def test_6_3_17_temporal_loop_through_a_redirect_registration_is_508(hub, src):
    register(hub, src.broker.base, src.tenant, mode="redirect")
    r = hub.get("/temporal/entities", params={"type": "Vehicle"}, headers={"Via": "1.1 somebody, 1.1 hub-t"})
    assert r.status_code == 508, r.text
    assert hub.get("/temporal/entities", params={"type": "Vehicle"}).status_code == 200


# entityMap on a distributed temporal query: test_distributed_temporal_entity_maps.py
