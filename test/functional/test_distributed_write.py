"""Distributed writes (4.3.6.2-4.3.6.4, 5.6.x distributed, 6.3.17, 6.3.18): a
write at the hub goes to the sources its registrations name, split by
attribute and by mode (inclusive: here and there; exclusive and redirect: only
there; auxiliary: never), answered 207 with the per-source errors when some
part fails, and 508 on a loop through an exclusive or redirect registration."""

import json

import pytest

from conftest import Client, fresh_tenant
from mocksource import MockSource
from ngsi import assert_problem, entity, prop, uid


def _client(broker_factory, alias):
    b = broker_factory("--brokerAlias", alias, "--forwardTimeout", "1500")
    c = Client(b, fresh_tenant())
    c.ensure_tenant()
    return c


@pytest.fixture
def hub(broker_factory):
    c = _client(broker_factory, "hub-w")
    yield c
    c.close()


@pytest.fixture
def src(broker_factory):
    c = _client(broker_factory, "src-w")
    yield c
    c.close()


@pytest.fixture
def src2(broker_factory):
    c = _client(broker_factory, "src2-w")
    yield c
    c.close()


def register(hub, src, eid, mode="inclusive", attrs=None, ops=("redirectionOps",), endpoint=None, **members):
    info = {"entities": [{"id": eid, "type": "Vehicle"}]}
    if attrs:
        info["propertyNames"] = attrs
    body = {"type": "ContextSourceRegistration", "information": [info], "mode": mode,
            "endpoint": endpoint or src.broker.base}
    if src is not None and endpoint is None:
        body["tenant"] = src.tenant
    if ops:
        body["operations"] = list(ops)
    body.update(members)
    r = hub.post("/csourceRegistrations", body)
    assert r.status_code == 201, r.text
    return r.headers["Location"].rsplit("/", 1)[1]


def local(c, eid):
    return c.get("/entities/" + eid, params={"local": "true"})


@pytest.fixture
def mock_factory():
    made = []

    def make(status=204, body=b"", delay=0.0):
        m = MockSource(status, body, delay)
        made.append(m)
        return m
    yield make
    for m in made:
        m.close()


# ---------------------------------------------------------------- create (5.6.1.4)

def test_4_3_6_2_inclusive_create_here_and_there(hub, src):
    eid = uid("Vehicle")
    register(hub, src, eid)
    r = hub.create(entity(eid, "Vehicle", speed=prop(5), brand=prop("b")))
    assert r.status_code == 201, r.text
    assert local(hub, eid).json()["speed"]["value"] == 5
    e = src.entity(eid)
    assert e["speed"]["value"] == 5 and e["brand"]["value"] == "b"


def test_4_3_6_3_exclusive_create_takes_its_attributes(hub, src):
    eid = uid("Vehicle")
    register(hub, src, eid, mode="exclusive", attrs=["speed"])
    r = hub.create(entity(eid, "Vehicle", speed=prop(5), brand=prop("b")))
    assert r.status_code == 201, r.text
    h = local(hub, eid).json()
    assert "speed" not in h and h["brand"]["value"] == "b"
    s = src.entity(eid)
    assert s["speed"]["value"] == 5 and "brand" not in s


def test_4_3_6_3_redirect_create_only_at_the_source(hub, src, src2):
    eid = uid("Vehicle")
    register(hub, src, eid, mode="redirect")
    register(hub, src2, eid, mode="redirect")
    r = hub.create(entity(eid, "Vehicle", speed=prop(5)))
    assert r.status_code == 201, r.text
    assert local(hub, eid).status_code == 404
    assert src.entity(eid)["speed"]["value"] == 5 and src2.entity(eid)["speed"]["value"] == 5


def test_4_3_6_4_auxiliary_never_receives_writes(hub, mock_factory):
    m = mock_factory(201)
    eid = uid("Vehicle")
    register(hub, None, eid, mode="auxiliary", endpoint=m.base, ops=["retrieveOps"])
    assert hub.create(entity(eid, "Vehicle", speed=prop(5))).status_code == 201
    assert hub.patch("/entities/%s/attrs" % eid, {"speed": prop(6)}).status_code == 204
    assert hub.delete("/entities/" + eid).status_code == 204
    assert [x for x in m.requests if x[0] != "GET"] == []


def test_5_6_1_4_exclusive_without_the_operation_is_a_conflict(hub, src):
    eid = uid("Vehicle")
    register(hub, src, eid, mode="exclusive", attrs=["speed"], ops=["retrieveOps"])
    r = hub.post("/entities", entity(eid, "Vehicle", speed=prop(5), brand=prop("b")))
    assert r.status_code == 207, r.text
    err = r.json()["errors"]
    assert len(err) == 1 and err[0]["error"]["status"] == 409 and "registrationId" in err[0]
    assert "speed" not in local(hub, eid).json()


def test_5_6_1_4_inclusive_create_existing_locally_is_207(hub, src):
    eid = uid("Vehicle")
    hub.create(entity(eid, "Vehicle", brand=prop("b")))
    register(hub, src, eid)
    r = hub.post("/entities", entity(eid, "Vehicle", speed=prop(5)))
    assert r.status_code == 207, r.text
    body = r.json()
    assert body["success"] == [eid] and len(body["errors"]) == 1
    assert body["errors"][0]["error"]["status"] == 409 and "registrationId" not in body["errors"][0]
    assert src.entity(eid)["speed"]["value"] == 5


def test_5_6_1_4_malformed_entity_is_not_forwarded(hub, mock_factory):
    m = mock_factory(201)
    eid = uid("Vehicle")
    register(hub, None, eid, endpoint=m.base)
    r = hub.post("/entities", {"id": "not a uri", "type": "Vehicle"})
    assert r.status_code == 400
    assert m.requests == []


# ---------------------------------------------------------------- 207 with failing sources (6.3.17)

@pytest.mark.parametrize("status,body,delay,code", [
    (500, b'{"type":"https://uri.etsi.org/ngsi-ld/errors/InternalError","title":"x","detail":"boom"}', 0, 500),
    (200, b"garbage", 0, None),
    (204, b"", 3.0, 504),
])
def test_6_3_17_inclusive_update_with_a_failing_source_is_207(hub, mock_factory, status, body, delay, code):
    m = mock_factory(status, body, delay)
    eid = uid("Vehicle")
    hub.create(entity(eid, "Vehicle", speed=prop(1)))
    rid = register(hub, None, eid, endpoint=m.base)
    r = hub.patch("/entities/%s/attrs" % eid, {"speed": prop(2)})
    if code is None:                   # a 2xx with a body that is not JSON: the write was accepted
        assert r.status_code == 204, r.text
        return
    assert r.status_code == 207, r.text
    res = r.json()
    assert res["updated"] == ["speed"]
    assert res["notUpdated"][0]["registrationId"] == rid and res["notUpdated"][0]["attributeName"] == "speed"
    assert local(hub, eid).json()["speed"]["value"] == 2
    reg = hub.get("/csourceRegistrations/" + rid).json()
    assert reg["timesFailed"] == 1


def test_6_3_17_single_exclusive_source_error_is_the_answer(hub, mock_factory):
    m = mock_factory(404, b'{"type":"https://uri.etsi.org/ngsi-ld/errors/ResourceNotFound","title":"n","detail":"no"}')
    eid = uid("Vehicle")
    register(hub, None, eid, mode="redirect", endpoint=m.base)
    assert_problem(hub.patch("/entities/%s/attrs" % eid, {"speed": prop(2)}), 404, "ResourceNotFound")
    slow = mock_factory(204, b"", 3.0)
    eid2 = uid("Vehicle")
    register(hub, None, eid2, mode="redirect", endpoint=slow.base)
    assert hub.delete("/entities/" + eid2).status_code == 504


# ---------------------------------------------------------------- the other writes

def test_5_6_2_4_inclusive_update_attrs_and_attr(hub, src):
    eid = uid("Vehicle")
    register(hub, src, eid)
    hub.create(entity(eid, "Vehicle", speed=prop(1), brand=prop("a")))
    assert hub.patch("/entities/%s/attrs" % eid, {"speed": prop(2)}).status_code == 204
    assert hub.patch("/entities/%s/attrs/brand" % eid, {"value": "z"}).status_code == 204
    assert hub.post("/entities/%s/attrs" % eid, {"colour": prop("red")}).status_code == 204
    for c in (src, ):
        e = c.entity(eid)
        assert e["speed"]["value"] == 2 and e["brand"]["value"] == "z" and e["colour"]["value"] == "red"
    h = local(hub, eid).json()
    assert h["speed"]["value"] == 2 and h["brand"]["value"] == "z" and h["colour"]["value"] == "red"


def test_5_6_5_4_exclusive_delete_attr_goes_only_to_the_source(hub, src):
    eid = uid("Vehicle")
    register(hub, src, eid, mode="exclusive", attrs=["speed"])
    hub.create(entity(eid, "Vehicle", speed=prop(1), brand=prop("a")))
    assert hub.delete("/entities/%s/attrs/speed" % eid).status_code == 204
    assert "speed" not in src.entity(eid)
    assert local(hub, eid).json()["brand"]["value"] == "a"


def test_5_6_17_and_5_6_18_merge_and_replace_forwarded(hub, src):
    eid = uid("Vehicle")
    register(hub, src, eid)
    hub.create(entity(eid, "Vehicle", speed=prop(1), brand=prop("a")))
    assert hub.patch("/entities/" + eid, {"speed": prop(3)}).status_code == 204
    assert src.entity(eid)["speed"]["value"] == 3
    assert hub.put("/entities/" + eid, {"type": "Vehicle", "brand": prop("q")}).status_code == 204
    e = src.entity(eid)
    assert e["brand"]["value"] == "q" and "speed" not in e


def test_5_6_6_4_delete_entity_here_and_there(hub, src):
    eid = uid("Vehicle")
    register(hub, src, eid)
    hub.create(entity(eid, "Vehicle", speed=prop(1)))
    assert hub.delete("/entities/" + eid).status_code == 204
    assert local(hub, eid).status_code == 404
    assert src.get("/entities/" + eid).status_code == 404


def test_5_6_6_4_inclusive_delete_missing_at_the_source_is_207(hub, src):
    eid = uid("Vehicle")
    hub.create(entity(eid, "Vehicle", speed=prop(1)))
    register(hub, src, eid)
    r = hub.delete("/entities/" + eid)
    assert r.status_code == 207, r.text
    assert r.json()["errors"][0]["error"]["status"] == 404
    assert local(hub, eid).status_code == 404


def test_6_3_18_local_true_writes_only_here(hub, mock_factory):
    m = mock_factory(201)
    eid = uid("Vehicle")
    register(hub, None, eid, endpoint=m.base)
    assert hub.post("/entities", entity(eid, "Vehicle", speed=prop(1)), params={"local": "true"}).status_code == 201
    assert m.requests == []


def test_6_3_19_forwarded_write_carries_via_and_tenant(hub, mock_factory):
    m = mock_factory(204)
    eid = uid("Vehicle")
    hub.create(entity(eid, "Vehicle", speed=prop(1)))
    register(hub, None, eid, endpoint=m.base + "/base/", tenant="t1")
    assert hub.patch("/entities/%s/attrs" % eid, {"speed": prop(2), "other": prop(1)}).status_code == 204
    (meth, path, hdrs, data) = m.requests[0]
    assert meth == "PATCH" and path == "/base/ngsi-ld/v1/entities/%s/attrs" % eid
    assert hdrs["Via"] == "1.1 hub-w" and hdrs["NGSILD-Tenant"] == "t1"
    assert json.loads(data)["speed"]["value"] == 2


def test_6_3_19_only_the_registered_attributes_are_sent(hub, mock_factory):
    m = mock_factory(204)
    eid = uid("Vehicle")
    hub.create(entity(eid, "Vehicle", speed=prop(1), brand=prop("a")))
    register(hub, None, eid, endpoint=m.base, attrs=["speed"])
    assert hub.patch("/entities/%s/attrs" % eid, {"speed": prop(2), "brand": prop("b")}).status_code == 204
    assert set(json.loads(m.requests[0][3])) == {"speed"}
    assert hub.patch("/entities/%s/attrs" % eid, {"brand": prop("c")}).status_code == 204
    assert len(m.requests) == 1


# ---------------------------------------------------------------- loops (6.3.17, 6.3.18)

def test_6_3_17_write_loop_through_exclusive_is_508(hub, mock_factory):
    m = mock_factory(204)
    eid = uid("Vehicle")
    register(hub, None, eid, mode="redirect", endpoint=m.base)
    r = hub.patch("/entities/%s/attrs" % eid, {"speed": prop(2)}, headers={"Via": "1.1 other, 1.1 hub-w"})
    assert r.status_code == 508
    assert m.requests == []


def test_6_3_18_two_brokers_registered_to_each_other(hub, src):
    """hub redirects the entity to src, src redirects it back: 508, not an endless loop."""
    eid = uid("Vehicle")
    register(hub, src, eid, mode="redirect")
    b = {"type": "ContextSourceRegistration", "information": [{"entities": [{"id": eid, "type": "Vehicle"}]}],
         "mode": "redirect", "endpoint": hub.broker.base, "tenant": hub.tenant, "operations": ["redirectionOps"]}
    assert src.post("/csourceRegistrations", b).status_code == 201
    r = hub.post("/entities", entity(eid, "Vehicle", speed=prop(1)))
    assert r.status_code == 508, r.text


def test_6_3_18_three_broker_chain_without_false_loop(broker_factory):
    """A -> B -> C by redirect registrations, brokers started with the default alias."""
    # distinct flags: distinct processes (the factory shares a broker per flag list)
    cs = [Client(broker_factory("--forwardTimeout", str(3000 + i)), fresh_tenant()) for i in range(3)]
    try:
        for c in cs:
            c.ensure_tenant()
        eid = uid("Vehicle")
        for x, y in ((cs[0], cs[1]), (cs[1], cs[2])):
            register(x, y, eid, mode="redirect")
        r = cs[0].post("/entities", entity(eid, "Vehicle", speed=prop(7)))
        assert r.status_code == 201, r.text
        assert cs[2].get("/entities/" + eid, params={"local": "true"}).json()["speed"]["value"] == 7
        for c in cs[:2]:
            assert local(c, eid).status_code == 404
        assert cs[0].patch("/entities/%s/attrs" % eid, {"speed": prop(8)}).status_code == 204
        assert local(cs[2], eid).json()["speed"]["value"] == 8
    finally:
        for c in cs:
            c.close()


# ---------------------------------------------------------------- batches (5.6.7-5.6.10, 5.6.20)

def test_5_6_7_4_batch_create_split_per_source(hub, src, src2, mock_factory):
    a, b, c = uid("Vehicle"), uid("Vehicle"), uid("Vehicle")
    register(hub, src, a, ops=["redirectionOps", "createBatch"])
    register(hub, src2, b, mode="exclusive", attrs=["speed"], ops=["redirectionOps"])   # no createBatch: one by one
    r = hub.post("/entityOperations/create", [entity(x, "Vehicle", speed=prop(1), brand=prop("x")) for x in (a, b, c)])
    assert r.status_code == 201, r.text
    assert sorted(r.json()) == sorted([a, b, c])
    assert src.entity(a)["speed"]["value"] == 1 and src.get("/entities/" + b).status_code == 404
    e = src2.entity(b)
    assert e["speed"]["value"] == 1 and "brand" not in e
    h = local(hub, b).json()
    assert "speed" not in h and h["brand"]["value"] == "x"
    assert local(hub, a).status_code == 200 and local(hub, c).status_code == 200


def test_5_6_7_4_batch_one_request_per_source(hub, mock_factory):
    m = mock_factory(201, b"[]")
    a, b = uid("Vehicle"), uid("Vehicle")
    body = {"type": "ContextSourceRegistration", "endpoint": m.base, "operations": ["createBatch"],
            "information": [{"entities": [{"idPattern": "urn:ngsi-ld:Vehicle:.*", "type": "Vehicle"}]}]}
    assert hub.post("/csourceRegistrations", body).status_code == 201
    r = hub.post("/entityOperations/create", [entity(x, "Vehicle", speed=prop(1)) for x in (a, b)])
    assert r.status_code == 201, r.text
    assert len(m.requests) == 1
    meth, path, _, data = m.requests[0]
    assert meth == "POST" and path == "/ngsi-ld/v1/entityOperations/create"
    assert sorted(e["id"] for e in json.loads(data)) == sorted([a, b])


def test_5_6_7_4_batch_with_a_failing_source_is_207(hub, mock_factory):
    m = mock_factory(500, b'{"type":"https://uri.etsi.org/ngsi-ld/errors/InternalError","title":"x","detail":"boom"}')
    a, b = uid("Vehicle"), uid("Vehicle")
    rid = register(hub, None, a, endpoint=m.base, ops=["createBatch"])
    r = hub.post("/entityOperations/create", [entity(x, "Vehicle", speed=prop(1)) for x in (a, b)])
    assert r.status_code == 207, r.text
    res = r.json()
    assert sorted(res["success"]) == sorted([a, b])
    assert res["errors"] == [{"entityId": a, "registrationId": rid, "error": res["errors"][0]["error"]}]
    assert res["errors"][0]["error"]["status"] == 500


def test_5_6_10_4_batch_delete_forwarded(hub, src):
    a, b = uid("Vehicle"), uid("Vehicle")
    register(hub, src, a, mode="redirect", ops=["redirectionOps", "deleteBatch", "createBatch"])
    assert hub.post("/entityOperations/create", [entity(x, "Vehicle", speed=prop(1)) for x in (a, b)]).status_code == 201
    assert src.entity(a) and local(hub, a).status_code == 404 and local(hub, b).status_code == 200
    r = hub.post("/entityOperations/delete", [a, b])
    assert r.status_code == 204, r.text
    assert src.get("/entities/" + a).status_code == 404 and local(hub, b).status_code == 404


def test_5_6_8_and_5_6_20_upsert_and_merge_batches_forwarded(hub, src):
    a = uid("Vehicle")
    register(hub, src, a, ops=["redirectionOps", "upsertBatch", "mergeBatch", "updateBatch"])
    assert hub.post("/entityOperations/upsert", [entity(a, "Vehicle", speed=prop(1))]).status_code == 201
    assert src.entity(a)["speed"]["value"] == 1
    assert hub.post("/entityOperations/merge", [entity(a, "Vehicle", speed=prop(2))]).status_code == 204
    assert src.entity(a)["speed"]["value"] == 2 and local(hub, a).json()["speed"]["value"] == 2
    assert hub.post("/entityOperations/update", [entity(a, "Vehicle", speed=prop(3))]).status_code == 204
    assert src.entity(a)["speed"]["value"] == 3


def test_5_6_7_invalid_batch_is_not_forwarded(hub, mock_factory):
    m = mock_factory(201, b"[]")
    a = uid("Vehicle")
    register(hub, None, a, endpoint=m.base, ops=["createBatch"])
    assert hub.post("/entityOperations/create", []).status_code == 400
    assert hub.post("/entityOperations/create", [entity(a, "Vehicle"), None]).status_code == 400
    assert m.requests == []


# ---------------------------------------------------------------- purge (5.6.21.4)

def test_5_6_21_4_purge_forwarded(hub, src, mock_factory):
    a, b = uid("Vehicle"), uid("Vehicle")
    hub.create(entity(a, "Vehicle", speed=prop(1)))
    src.create(entity(b, "Vehicle", speed=prop(1)))
    body = {"type": "ContextSourceRegistration", "endpoint": src.broker.base, "tenant": src.tenant,
            "operations": ["redirectionOps"], "information": [{"entities": [{"type": "Vehicle"}]}]}
    assert hub.post("/csourceRegistrations", body).status_code == 201
    r = hub.delete("/entities", params={"type": "Vehicle"})
    assert r.status_code == 204, r.text
    assert local(hub, a).status_code == 404 and src.get("/entities/" + b).status_code == 404


def test_5_6_21_4_purge_with_a_failing_source_is_207(hub, mock_factory):
    m = mock_factory(500, b"{}")
    body = {"type": "ContextSourceRegistration", "endpoint": m.base, "operations": ["purgeEntity"],
            "information": [{"entities": [{"type": "Vehicle"}]}]}
    r = hub.post("/csourceRegistrations", body)
    rid = r.headers["Location"].rsplit("/", 1)[1]
    hub.create(entity(uid("Vehicle"), "Vehicle"))
    r = hub.delete("/entities", params={"type": "Vehicle"})
    assert r.status_code == 207, r.text
    assert r.json()["errors"][0]["registrationId"] == rid
    assert m.requests[0][0] == "DELETE" and m.requests[0][1] == "/ngsi-ld/v1/entities?type=Vehicle"
    r = hub.delete("/entities", params={"type": "Vehicle", "local": "true"})
    assert r.status_code == 204 and len(m.requests) == 1


# ---------------------------------------------------------------- types and attributes (5.7.5-5.7.11)

def test_5_7_11_types_and_attributes_merged_from_sources(hub, src):
    a, b = uid("Vehicle"), uid("Bus")
    hub.create(entity(a, "Vehicle", speed=prop(1)))
    src.create(entity(b, "Bus", seats=prop(40)))
    body = {"type": "ContextSourceRegistration", "endpoint": src.broker.base, "tenant": src.tenant,
            "operations": ["redirectionOps"], "information": [{"entities": [{"type": "Bus"}]}]}
    assert hub.post("/csourceRegistrations", body).status_code == 201
    tl = hub.get("/types").json()["typeList"]
    assert "Vehicle" in tl and "Bus" in tl
    assert "Bus" not in hub.get("/types", params={"local": "true"}).json()["typeList"]
    det = {t["typeName"]: t for t in hub.get("/types", params={"details": "true"}).json()}
    assert det["Bus"]["attributeNames"] == ["seats"]
    info = hub.get("/types/Bus").json()
    assert info["entityCount"] == 1 and info["attributeDetails"][0]["attributeName"] == "seats"
    al = hub.get("/attributes").json()["attributeList"]
    assert "speed" in al and "seats" in al
    at = hub.get("/attributes/seats").json()
    assert at["attributeCount"] == 1 and at["typeNames"] == ["Bus"] and at["attributeTypes"] == ["Property"]
    assert hub.get("/attributes/seats", params={"local": "true"}).status_code == 404
    assert hub.get("/types/Nothing").status_code == 404


def test_6_4_3_1_every_part_failing_is_207_with_each_error(hub, mock_factory):
    m = mock_factory(409, b'{"type":"https://uri.etsi.org/ngsi-ld/errors/AlreadyExists","title":"x","detail":"there"}')
    eid = uid("Vehicle")
    hub.create(entity(eid, "Vehicle", brand=prop("b")))
    rid = register(hub, None, eid, endpoint=m.base)
    r = hub.post("/entities", entity(eid, "Vehicle", brand=prop("c")))
    assert r.status_code == 207, r.text
    res = r.json()
    assert res["success"] == []
    assert [e["error"]["status"] for e in res["errors"]] == [409, 409]
    assert res["errors"][1]["registrationId"] == rid


def test_6_3_17_a_source_answering_207_makes_the_answer_207(hub, mock_factory):
    m = mock_factory(207, b'{"updated":[],"notUpdated":[{"attributeName":"speed","reason":"kept"}]}')
    eid = uid("Vehicle")
    rid = register(hub, None, eid, mode="redirect", endpoint=m.base)
    r = hub.post("/entities/%s/attrs" % eid, {"speed": prop(1)}, params={"options": "noOverwrite"})
    assert r.status_code == 207, r.text
    assert r.json()["notUpdated"] == [{"attributeName": "speed", "reason": "kept", "registrationId": rid}]
    assert "options=noOverwrite" in m.requests[0][1]


def test_6_3_18_write_loop_through_inclusive_is_508(hub, mock_factory):
    """D018_01: the write came back (Via names this broker) through an inclusive registration."""
    m = mock_factory(201)
    eid = uid("Vehicle")
    register(hub, None, eid, endpoint=m.base)
    assert hub.post("/entities", entity(eid, "Vehicle", speed=prop(1))).status_code == 201
    via = m.requests[0][2]["Via"]
    assert hub.delete("/entities/" + eid, headers={"Via": via}).status_code == 508
    assert local(hub, eid).status_code == 200
    # a read through the same registration is answered from the local data
    assert hub.get("/entities/" + eid, headers={"Via": via}).status_code == 200


def test_5_12_registration_by_type_gets_only_writes_for_that_type(hub, mock_factory):
    m = mock_factory(204)
    body = {"type": "ContextSourceRegistration", "endpoint": m.base, "operations": ["redirectionOps"],
            "information": [{"entities": [{"type": "Bus"}]}]}
    assert hub.post("/csourceRegistrations", body).status_code == 201
    car, bus = uid("Vehicle"), uid("Bus")
    hub.create(entity(car, "Vehicle", speed=prop(1)), params={"local": "true"})
    hub.create(entity(bus, "Bus", speed=prop(1)), params={"local": "true"})
    assert hub.patch("/entities/%s/attrs" % car, {"speed": prop(2)}).status_code == 204
    assert m.requests == []
    assert hub.patch("/entities/%s/attrs" % bus, {"speed": prop(2)}).status_code == 204
    assert len(m.requests) == 1 and bus in m.requests[0][1]


def test_5_5_4_invalid_payload_is_not_forwarded(hub, mock_factory):
    m = mock_factory(204)
    eid = uid("Vehicle")
    hub.create(entity(eid, "Vehicle", speed=prop(1)))
    register(hub, None, eid, endpoint=m.base)
    assert hub.post("/entities", {"id": eid, "type": "Vehicle", "speed": {"type": "Nonsense"}}).status_code == 400
    assert hub.patch("/entities/%s/attrs" % eid, {"speed": {"type": "Property"}}).status_code == 400
    assert hub.put("/entities/" + eid, {"speed": prop(1)}).status_code == 400
    assert m.requests == []


def test_4_3_6_6_write_recompacted_for_the_source_jsonld_context(hub, mock_factory, ctxserver):
    url = ctxserver.unique({"@context": {"velocidad": "https://uri.etsi.org/ngsi-ld/default-context/speed"}})
    assert hub.get("/entities", params={"type": "Vehicle", "local": "true"}, link=url).status_code == 200   # cached
    m = mock_factory(204)
    eid = uid("Vehicle")
    hub.create(entity(eid, "Vehicle", speed=prop(1)))
    register(hub, None, eid, endpoint=m.base, contextSourceInfo=[{"key": "jsonldContext", "value": url}])
    assert hub.patch("/entities/%s/attrs" % eid, {"speed": prop(2)}).status_code == 204
    _, _, hdrs, data = m.requests[0]
    assert json.loads(data) == {"velocidad": {"type": "Property", "value": 2}}
    assert url in hdrs["Link"]


def test_6_3_5_jsonld_create_forwarded_to_a_broker(hub, src, vctx):
    """A create in application/ld+json: the source gets JSON with the @context as Link and
    holds the same expanded names."""
    eid = uid("Vehicle")
    body = {"type": "ContextSourceRegistration", "endpoint": src.broker.base, "tenant": src.tenant,
            "operations": ["redirectionOps"], "mode": "redirect",
            "information": [{"entities": [{"id": eid, "type": "Vehicle"}]}], "@context": vctx}
    assert hub.post("/csourceRegistrations", body, ctype="application/ld+json").status_code == 201
    e = entity(eid, "Vehicle", speed=prop(3))
    e["@context"] = vctx
    r = hub.post("/entities", e, ctype="application/ld+json")
    assert r.status_code == 201, r.text
    got = src.get("/entities/" + eid, params={"options": "keyValues"}).json()
    assert got["type"] == "https://example.org/Vehicle" and got["https://example.org/speed"] == 3
    assert hub.entity(eid, link=vctx)["speed"]["value"] == 3


def test_5_6_8_4_upsert_one_by_one_creates_then_replaces(hub, src):
    a = uid("Vehicle")
    register(hub, src, a, mode="redirect", ops=["createEntity", "replaceEntity", "updateAttrs"])
    r = hub.post("/entityOperations/upsert", [entity(a, "Vehicle", speed=prop(1), brand=prop("x"))])
    assert r.status_code in (201, 204), r.text
    assert src.entity(a)["speed"]["value"] == 1
    r = hub.post("/entityOperations/upsert", [entity(a, "Vehicle", speed=prop(2))])
    assert r.status_code == 204, r.text
    e = src.entity(a)
    assert e["speed"]["value"] == 2 and "brand" not in e          # replaced
    r = hub.post("/entityOperations/upsert", [entity(a, "Vehicle", brand=prop("y"))], params={"options": "update"})
    assert r.status_code == 204, r.text
    e = src.entity(a)
    assert e["speed"]["value"] == 2 and e["brand"]["value"] == "y"  # updated


def test_5_6_8_4_upsert_without_replace_or_update_is_not_supported(hub, src):
    a = uid("Vehicle")
    rid = register(hub, src, a, mode="redirect", ops=["createEntity"])
    src.create(entity(a, "Vehicle", speed=prop(1)))
    r = hub.post("/entityOperations/upsert", [entity(a, "Vehicle", speed=prop(2))])
    assert r.status_code == 207, r.text
    err = r.json()["errors"][0]
    assert err["registrationId"] == rid and err["error"]["type"].endswith("OperationNotSupported")


def test_5_6_9_4_update_batch_one_by_one(hub, mock_factory):
    m = mock_factory(204)
    a = uid("Vehicle")
    register(hub, None, a, mode="redirect", endpoint=m.base, ops=["updateAttrs", "appendAttrs"])
    assert hub.post("/entityOperations/update", [entity(a, "Vehicle", speed=prop(1))]).status_code == 204
    assert hub.post("/entityOperations/update", [entity(a, "Vehicle", speed=prop(1))],
                    params={"options": "noOverwrite"}).status_code == 204
    assert [(x[0], x[1]) for x in m.requests] == [
        ("PATCH", "/ngsi-ld/v1/entities/%s/attrs" % a),
        ("POST", "/ngsi-ld/v1/entities/%s/attrs?options=noOverwrite" % a)]
