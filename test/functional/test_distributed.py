"""Distributed retrieve and query (4.3.6, 5.7.1, 5.7.2, 4.5.5, 6.3.17, 6.3.18):
a hub broker forwards to the coraine brokers and mock sources its registrations
name, in parallel, and merges their answers with its own data."""

import json
import time

import pytest

from conftest import Client, fresh_tenant
from mocksource import MockSource
from ngsi import assert_problem, entity, prop, uid


@pytest.fixture
def hub(broker_factory):
    b = broker_factory("--brokerAlias", "hub-test")
    c = Client(b, fresh_tenant())
    yield c
    c.close()


@pytest.fixture
def src(broker_factory):
    b = broker_factory("--brokerAlias", "source-test")
    c = Client(b, fresh_tenant())
    c.ensure_tenant()
    yield c
    c.close()


@pytest.fixture
def src2(broker_factory):
    b = broker_factory("--brokerAlias", "source2-test")
    c = Client(b, fresh_tenant())
    c.ensure_tenant()
    yield c
    c.close()


def register(hub, src, info=None, **members):
    body = {"type": "ContextSourceRegistration",
            "information": info or [{"entities": [{"type": "Vehicle"}]}],
            "endpoint": src.broker.base, "tenant": src.tenant}
    body.update(members)
    r = hub.post("/csourceRegistrations", body)
    assert r.status_code == 201, r.text
    return r.headers["Location"].rsplit("/", 1)[1]


def ids(resp):
    assert resp.status_code == 200, resp.text
    return sorted(e["id"] for e in resp.json())


# ---------------------------------------------------------------- retrieve (5.7.1)

def test_5_7_1_retrieve_from_a_source(hub, src):
    eid = uid("Vehicle")
    src.create(entity(eid, "Vehicle", speed=prop(5)))
    register(hub, src)
    e = hub.entity(eid)
    assert e["speed"]["value"] == 5
    assert_problem(hub.get("/entities/" + uid("Vehicle")), 404, "ResourceNotFound")
    assert_problem(hub.get("/entities/" + eid, params={"local": "true"}), 404, "ResourceNotFound")


def test_4_5_5_same_id_at_hub_and_source_merged(hub, src):
    eid = uid("Vehicle")
    hub.create(entity(eid, "Vehicle", brand=prop("hub")))
    src.create(entity(eid, "Vehicle", speed=prop(7)))
    register(hub, src)
    e = hub.entity(eid)
    assert e["brand"]["value"] == "hub" and e["speed"]["value"] == 7


def test_4_5_5_most_recent_observed_at_wins(hub, src):
    eid = uid("Vehicle")
    hub.create(entity(eid, "Vehicle", speed=prop(1, observedAt="2020-01-01T00:00:00Z")))
    src.create(entity(eid, "Vehicle", speed=prop(2, observedAt="2021-01-01T00:00:00Z")))
    register(hub, src)
    assert hub.entity(eid)["speed"]["value"] == 2


def test_4_3_6_2_local_data_over_an_auxiliary_source(hub, src):
    eid = uid("Vehicle")
    hub.create(entity(eid, "Vehicle", speed=prop(1, observedAt="2020-01-01T00:00:00Z")))
    src.create(entity(eid, "Vehicle", speed=prop(2, observedAt="2021-01-01T00:00:00Z"), brand=prop("aux")))
    register(hub, src, mode="auxiliary", operations=["retrieveOps"])
    e = hub.entity(eid)
    assert e["speed"]["value"] == 1 and e["brand"]["value"] == "aux"


def test_4_3_6_only_the_registered_attributes_are_asked(hub, src):
    eid = uid("Vehicle")
    src.create(entity(eid, "Vehicle", speed=prop(5), brand=prop("secret")))
    register(hub, src, info=[{"entities": [{"type": "Vehicle"}], "propertyNames": ["speed"]}])
    e = hub.entity(eid)
    assert e["speed"]["value"] == 5 and "brand" not in e
    # a registration declaring none of the requested attributes is not asked
    assert_problem(hub.get("/entities/" + eid, params={"attrs": "brand"}), 404, "ResourceNotFound")


def test_5_2_9_counters_kept_current(hub, src):
    eid = uid("Vehicle")
    src.create(entity(eid, "Vehicle", speed=prop(5)))
    rid = register(hub, src)
    hub.entity(eid)
    hub.entity(eid)
    r = hub.get("/csourceRegistrations/" + rid).json()
    assert r["timesSent"] == 2 and r["timesFailed"] == 0 and r["status"] == "ok" and "lastSuccess" in r


# ---------------------------------------------------------------- query (5.7.2)

def test_5_7_2_query_hub_and_two_sources(hub, src, src2):
    a, b, c = uid("Vehicle"), uid("Vehicle"), uid("Vehicle")
    hub.create(entity(a, "Vehicle", speed=prop(1)))
    src.create(entity(b, "Vehicle", speed=prop(2)))
    src2.create(entity(c, "Vehicle", speed=prop(3)))
    src2.create(entity(uid("Boat"), "Boat", speed=prop(3)))
    register(hub, src)
    register(hub, src2)
    assert ids(hub.get("/entities", params={"type": "Vehicle"})) == sorted([a, b, c])
    assert ids(hub.get("/entities", params={"type": "Vehicle", "q": "speed>1"})) == sorted([b, c])
    assert ids(hub.get("/entities", params={"type": "Vehicle", "local": "true"})) == [a]
    r = hub.get("/entities", params={"type": "Vehicle", "limit": 2, "count": "true"})
    assert len(r.json()) == 2 and r.headers["NGSILD-Results-Count"] == "3"
    r2 = hub.get("/entities", params={"type": "Vehicle", "limit": 2, "offset": 2})
    assert len(r2.json()) == 1
    assert sorted([e["id"] for e in r.json()] + [e["id"] for e in r2.json()]) == sorted([a, b, c])


def test_5_7_2_same_id_merged_once(hub, src):
    eid = uid("Vehicle")
    hub.create(entity(eid, "Vehicle", brand=prop("hub")))
    src.create(entity(eid, "Vehicle", speed=prop(7)))
    register(hub, src)
    r = hub.get("/entities", params={"type": "Vehicle"})
    assert [e["id"] for e in r.json()] == [eid]
    assert r.json()[0]["speed"]["value"] == 7 and r.json()[0]["brand"]["value"] == "hub"


def test_6_3_18_brokers_registered_to_each_other_terminate(hub, src):
    a, b = uid("Vehicle"), uid("Vehicle")
    hub.create(entity(a, "Vehicle"))
    src.create(entity(b, "Vehicle"))
    register(hub, src)
    register(src, hub)
    t = time.time()
    assert ids(hub.get("/entities", params={"type": "Vehicle"})) == sorted([a, b])
    assert ids(src.get("/entities", params={"type": "Vehicle"})) == sorted([a, b])
    assert time.time() - t < 5


def test_6_3_17_loop_with_a_redirect_registration_is_508(hub, src):
    register(hub, src, mode="redirect", information=[{"entities": [{"type": "Vehicle"}]}])
    r = hub.get("/entities", params={"type": "Vehicle"}, headers={"Via": "1.1 somebody, 1.1 hub-test"})
    assert r.status_code == 508, r.text
    # without the loop the same query is answered
    assert hub.get("/entities", params={"type": "Vehicle"}).status_code == 200


def test_6_3_18_via_sent_and_alias_excluded(hub, src):
    register(hub, src, contextSourceAlias="source-test")
    eid = uid("Vehicle")
    src.create(entity(eid, "Vehicle"))
    assert ids(hub.get("/entities", params={"type": "Vehicle"})) == [eid]
    # the request already went through source-test: its registration does not match
    r = hub.get("/entities", params={"type": "Vehicle"}, headers={"Via": "1.1 source-test"})
    assert r.status_code == 200 and r.json() == []


# ---------------------------------------------------------------- failing sources (6.3.17)

def register_mock(hub, mock, **members):
    body = {"type": "ContextSourceRegistration", "information": [{"entities": [{"type": "Vehicle"}]}],
            "endpoint": mock.base + "/base/"}
    body.update(members)
    r = hub.post("/csourceRegistrations", body)
    assert r.status_code == 201, r.text
    return r.headers["Location"].rsplit("/", 1)[1]


@pytest.mark.parametrize("status,body,code", [
    (500, b'{"type":"x"}', "299"),
    (200, b"this is not json", "111"),
    (200, b'[{"no":"id"}]', "111"),
])
def test_6_3_17_failing_source_warns_and_local_data_answers(hub, status, body, code):
    m = MockSource(status, body)
    try:
        a = uid("Vehicle")
        hub.create(entity(a, "Vehicle"))
        rid = register_mock(hub, m)
        r = hub.get("/entities", params={"type": "Vehicle"})
        assert ids(r) == [a]
        assert r.headers["NGSILD-Warning"].startswith(code)
        reg = hub.get("/csourceRegistrations/" + rid).json()
        assert reg["status"] == "failed" and reg["timesFailed"] == 1 and "lastFailure" in reg
    finally:
        m.close()


def test_6_3_17_source_that_never_answers_times_out(hub):
    m = MockSource(delay=3)
    try:
        register_mock(hub, m, management={"timeout": 200})
        t = time.time()
        r = hub.get("/entities", params={"type": "Vehicle"})
        assert r.status_code == 200 and r.json() == []
        assert r.headers["NGSILD-Warning"].startswith("199")
        assert time.time() - t < 2
    finally:
        m.close()


def test_6_3_19_forwarded_request_path_headers_and_params(hub):
    m = MockSource()
    try:
        hub.ensure_tenant()
        register_mock(hub, m, tenant="remote", contextSourceInfo=[{"key": "X-Token", "value": "abc"},
                                                                  {"key": "X-User", "value": "urn:ngsi-ld:request"}],
                      information=[{"entities": [{"type": "Vehicle"}], "propertyNames": ["speed", "brand"]}],
                      management={"localOnly": True})
        hub.get("/entities", params={"type": "Vehicle", "attrs": "speed,color"}, headers={"X-User": "me"})
        _, path, h, _ = m.requests[0]
        assert path.startswith("/base/ngsi-ld/v1/entities?")
        assert "type=Vehicle" in path and "attrs=speed&" in path and "local=true" in path and "limit=" in path
        assert h["NGSILD-Tenant"] == "remote" and h["X-Token"] == "abc" and h["X-User"] == "me"
        assert h["Via"] == "1.1 hub-test" and "Link" in h
    finally:
        m.close()


def test_5_7_2_a_thousand_registrations_one_matches(hub, src):
    eid = uid("Vehicle")
    src.create(entity(eid, "Vehicle"))
    for i in range(200):
        r = hub.post("/csourceRegistrations", {"type": "ContextSourceRegistration",
                                               "information": [{"entities": [{"type": "T%d" % i}]}],
                                               "endpoint": "http://127.0.0.1:9"})
        assert r.status_code == 201
    register(hub, src)
    assert ids(hub.get("/entities", params={"type": "Vehicle"})) == [eid]


# ---------------------------------------------------------------- queryBatch (4.20)

def test_4_20_query_batch_only_source_asked_with_post(hub, src):
    eid = uid("Vehicle")
    src.create(entity(eid, "Vehicle", speed=prop(3)))
    register(hub, src, operations=["queryBatch"])
    assert ids(hub.get("/entities", params={"type": "Vehicle", "id": eid})) == [eid]
    # retrieveEntity is not among its operations: the retrieve is asked as a queryBatch (4.20)
    assert hub.get("/entities/" + eid).json()["speed"]["value"] == 3
    assert_problem(hub.get("/entities/" + uid("Vehicle")), 404, "ResourceNotFound")


def test_4_20_retrieve_from_a_query_entity_only_source(hub):
    # 4.20: operations [queryEntity]: a retrieve is asked as GET /entities?id=...&type=<registered types>
    eid = uid("Vehicle")
    m = MockSource(body=json.dumps([{"id": eid, "type": "Vehicle", "speed": {"type": "Property", "value": 4}}]).encode())
    try:
        register_mock(hub, m, operations=["queryEntity"])
        r = hub.get("/entities/" + eid)
        assert r.status_code == 200 and r.json()["speed"]["value"] == 4
        path = m.requests[0][1]
        assert path.startswith("/base/ngsi-ld/v1/entities?") and "type=Vehicle" in path and "id=" + eid in path
    finally:
        m.close()


def test_5_7_2_post_query_distributed(hub, src):
    a, b = uid("Vehicle"), uid("Vehicle")
    hub.create(entity(a, "Vehicle", speed=prop(1)))
    src.create(entity(b, "Vehicle", speed=prop(9)))
    register(hub, src)
    q = {"type": "Query", "entities": [{"type": "Vehicle"}]}
    assert ids(hub.post("/entityOperations/query", q)) == sorted([a, b])
    q["q"] = "speed>5"
    assert ids(hub.post("/entityOperations/query", q)) == [b]
    q["local"] = True
    assert ids(hub.post("/entityOperations/query", q)) == []


def test_4_20_query_batch_body_sent(hub):
    m = MockSource()
    m_posts = []
    orig = m.srv.RequestHandlerClass

    class P(orig):
        def do_POST(self):
            n = int(self.headers.get("Content-Length", 0))
            m_posts.append((self.path, json.loads(self.rfile.read(n)), dict(self.headers)))
            self.do_GET()

    m.srv.RequestHandlerClass = P
    try:
        eid = uid("Vehicle")
        register_mock(hub, m, operations=["queryBatch"])
        hub.get("/entities", params={"type": "Vehicle", "id": eid, "q": "speed>1"})
        path, body, h = m_posts[0]
        assert path.startswith("/base/ngsi-ld/v1/entityOperations/query")
        assert body["type"] == "Query" and body["entities"] == [{"id": eid, "type": "Vehicle"}]
        assert body["q"] == "speed>1" and h["Content-Type"] == "application/json"
    finally:
        m.close()


def test_4_3_6_3_registered_ids_asked_for(hub):
    m = MockSource()
    try:
        eid = uid("Vehicle")
        register_mock(hub, m, mode="exclusive",
                      information=[{"entities": [{"id": eid, "type": "Vehicle"}], "propertyNames": ["speed"]}])
        hub.get("/entities", params={"type": "Vehicle"})
        path = m.requests[0][1]
        assert "id=" + eid.replace(":", ":") in path and "attrs=speed" in path and "type=Vehicle" in path
    finally:
        m.close()


def test_statistics_count_registrations_and_forwards(hub, src):
    before = hub.get("/statistics").json()["distributed"]
    register(hub, src)
    hub.get("/entities", params={"type": "Vehicle"})
    after = hub.get("/statistics").json()["distributed"]
    assert after["registrations"] == before["registrations"] + 1
    assert after["forwarded"] == before["forwarded"] + 1


def test_6_3_18_local_taken_by_every_entity_operation(hub):
    # 6.3.18: every operation of /entities/, /types/, /attributes/, /entityOperations/ and /temporal/ takes local
    eid = uid("Vehicle")
    assert hub.post("/entities?local=true", entity(eid, "Vehicle", speed=prop(1))).status_code == 201
    assert hub.patch(f"/entities/{eid}/attrs?local=true", {"speed": prop(2)}).status_code == 204
    assert hub.post("/entityOperations/upsert?local=false", [entity(eid, "Vehicle", speed=prop(3))]).status_code == 204
    assert hub.get("/types?local=true").status_code == 200
    # (no --history here: 422; what matters is that local is not an unknown parameter)
    assert hub.get(f"/temporal/entities/{eid}?local=true").status_code != 400
    assert hub.post(f"/temporal/entities/{eid}/attrs?local=true",
                    {"speed": prop(5, observedAt="2020-01-01T00:00:00Z")}).status_code != 400
    assert_problem(hub.post("/entities?local=maybe", entity(uid("Vehicle"), "Vehicle")), 400, "BadRequestData")
    # the Registry API is always local: the parameter is not one of its own
    assert_problem(hub.get("/csourceRegistrations?type=Vehicle&local=true"), 400, "InvalidRequest")
    assert hub.delete(f"/entities/{eid}?local=true").status_code == 204
