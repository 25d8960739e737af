"""splitEntities (5.2.23 Query, Table 6.4.3.2-1 GET /entities, 6.18.3.2,
4.5.5 merging): with splitEntities true one entity may be split over the hub
and its sources, so q, geoQ, scopeQ and attrs are evaluated on the merged
entity, each place being asked for the selection alone; with false each
source applies them to its own part. The default is --splitEntities
(CORAINE_SPLITENTITIES). It does not apply with local=true. A hub and two
sources, coraine processes on loopback."""

import pytest

from conftest import Client, fresh_tenant
from ngsi import assert_problem, entity, prop, uid


def _client(broker_factory, *flags):
    c = Client(broker_factory(*flags), fresh_tenant())
    c.ensure_tenant()
    return c


@pytest.fixture
def trio(broker_factory):
    cs = [_client(broker_factory, "--brokerAlias", "split-" + n) for n in ("hub", "a", "b")]
    yield cs
    for c in cs:
        c.close()


@pytest.fixture
def split_hub(broker_factory):
    """A hub whose default is splitEntities true."""
    c = _client(broker_factory, "--brokerAlias", "split-hub-default", "--splitEntities", "true")
    yield c
    c.close()


def register(hub, src, props):
    r = hub.post("/csourceRegistrations", {
        "type": "ContextSourceRegistration",
        "information": [{"entities": [{"type": "Room"}], "propertyNames": props}],
        "endpoint": src.broker.base, "tenant": src.tenant})
    assert r.status_code == 201, r.text


def split_room(hub, a, b):
    """One Room: temperature at source A, name at source B, nothing at the hub."""
    eid = uid("Room")
    a.create(entity(eid, "Room", temperature=prop(30)))
    b.create(entity(eid, "Room", name=prop("kitchen")))
    register(hub, a, ["temperature"])
    register(hub, b, ["name"])
    return eid


Q = 'temperature>20;name=="kitchen"'


def ids(r):
    assert r.status_code == 200, r.text
    return sorted(e["id"] for e in r.json())


def test_5_2_23_split_entities_true_matches_the_merged_entity(trio):
    hub, a, b = trio
    eid = split_room(hub, a, b)
    r = hub.get("/entities", params={"type": "Room", "q": Q, "splitEntities": "true"})
    assert ids(r) == [eid]
    e = r.json()[0]
    assert e["temperature"]["value"] == 30 and e["name"]["value"] == "kitchen"


def test_5_2_23_split_entities_false_each_source_filters_its_part(trio):
    hub, a, b = trio
    split_room(hub, a, b)
    assert ids(hub.get("/entities", params={"type": "Room", "q": Q, "splitEntities": "false"})) == []
    assert ids(hub.get("/entities", params={"type": "Room", "q": Q})) == []   # the default: false


def test_5_2_23_split_filters_still_exclude_what_does_not_match(trio):
    hub, a, b = trio
    split_room(hub, a, b)
    r = hub.get("/entities", params={"type": "Room", "q": 'temperature>20;name=="garage"',
                                     "splitEntities": "true"})
    assert ids(r) == []


def test_5_2_23_split_attrs_projection_after_the_filter(trio):
    hub, a, b = trio
    eid = split_room(hub, a, b)
    r = hub.get("/entities", params={"type": "Room", "q": Q, "attrs": "name", "splitEntities": "true"})
    assert ids(r) == [eid]
    e = r.json()[0]
    assert "name" in e and "temperature" not in e


def test_5_2_23_split_entities_in_a_query_body(trio):
    hub, a, b = trio
    eid = split_room(hub, a, b)
    body = {"type": "Query", "entities": [{"type": "Room"}], "q": Q}
    assert ids(hub.post("/entityOperations/query", dict(body, splitEntities=True))) == [eid]
    assert ids(hub.post("/entityOperations/query", dict(body, splitEntities=False))) == []
    assert_problem(hub.post("/entityOperations/query", dict(body, splitEntities="yes")), 400, "BadRequestData")


def test_5_2_23_split_with_hub_data_merged(trio):
    hub, a, b = trio
    eid = uid("Room")
    hub.create(entity(eid, "Room", floor=prop(2)))
    a.create(entity(eid, "Room", temperature=prop(30)))
    register(hub, a, ["temperature"])
    r = hub.get("/entities", params={"type": "Room", "q": "temperature>20;floor==2", "splitEntities": "true"})
    assert ids(r) == [eid]
    assert ids(hub.get("/entities", params={"type": "Room", "q": "temperature>20;floor==2"})) == []


def test_5_2_23_split_does_not_apply_with_local_true(trio):
    hub, a, b = trio
    split_room(hub, a, b)
    r = hub.get("/entities", params={"type": "Room", "q": Q, "splitEntities": "true", "local": "true"})
    assert ids(r) == []


def test_6_4_3_2_split_entities_must_be_a_boolean(trio):
    hub, _, _ = trio
    assert_problem(hub.get("/entities", params={"type": "Room", "splitEntities": "maybe"}), 400, "BadRequestData")
    # accepted on a hub without registrations (no effect there)
    assert hub.get("/entities", params={"type": "Room", "splitEntities": "true", "local": "true"}).status_code == 200


def test_5_2_23_split_default_from_the_flag(broker_factory, split_hub):
    a = _client(broker_factory, "--brokerAlias", "split-a")
    b = _client(broker_factory, "--brokerAlias", "split-b")
    try:
        eid = split_room(split_hub, a, b)
        assert ids(split_hub.get("/entities", params={"type": "Room", "q": Q})) == [eid]
        assert ids(split_hub.get("/entities", params={"type": "Room", "q": Q, "splitEntities": "false"})) == []
    finally:
        a.close()
        b.close()


def test_5_5_14_split_with_an_entity_map(trio):
    hub, a, b = trio
    eid = split_room(hub, a, b)
    r = hub.get("/entities", params={"type": "Room", "q": Q, "splitEntities": "true", "entityMap": "true"})
    assert r.status_code == 201, r.text
    assert [e["id"] for e in r.json()] == [eid]
    mid = r.headers["NGSILD-EntityMap"]
    m = hub.get("/entityMaps/" + mid).json()
    assert list(m["entityMap"]) == [eid] and len(m["entityMap"][eid]) == 2
    r = hub.get("/entities", params={"type": "Room", "q": Q, "splitEntities": "true"},
                headers={"NGSILD-EntityMap": mid})
    assert ids(r) == [eid]
