"""Create EntityMap for Query Temporal Evolution of Entities (5.14.5, 6.35
GET and POST /temporal/entityMaps): the parameters (or Query body) of a
temporal query (Table 6.18.3.2-1, 5.2.23), the limit ignored; answered 201
with the EntityMap (5.2.39) of the matching entities and NGSILD-EntityMap,
then read, changed and deleted at /entityMaps/{id} (6.32). And a temporal
query's own entityMap parameter (Table 6.18.3.2-1, 6.24 with 4.3.6.7 and
4.5.25): entityMap=true makes the map and names it in NGSILD-EntityMap, and
the later pages name it to be read through it. Against corDB history and
TimescaleDB/PostgreSQL (test_temporal.history_flags). Distributed maps:
test_distributed_temporal_entity_maps.py."""

import time

import pytest

from ngsi import assert_problem, uid

from test_temporal import history_flags  # noqa: F401 (fixture: corDB and timescale)


@pytest.fixture
def tcli(broker_factory, make_client, history_flags):
    return make_client(broker_factory(*history_flags))


def obs(v, t):
    return {"type": "Property", "value": v, "observedAt": t}


def make(c, typ, v):
    eid = uid(typ)
    r = c.post("/temporal/entities", {"id": eid, "type": typ, "speed": [obs(v, "2020-08-01T12:03:00Z")]})
    assert r.status_code == 201, r.text
    return eid


TQ = {"timerel": "after", "timeAt": "2020-01-01T00:00:00Z"}


def test_6_35_3_1_get_creates_a_map_of_the_matching_entities(tcli):
    typ = "Bus" + uid("T").rsplit(":", 1)[1].replace("-", "")[:8]
    ids = [make(tcli, typ, i) for i in range(3)]
    r = tcli.get("/temporal/entityMaps", params=dict(TQ, type=typ, limit=1, q="speed>0"))
    assert r.status_code == 201, r.text
    m = r.json()
    assert m["type"] == "EntityMap" and m["id"] == r.headers["NGSILD-EntityMap"]
    assert m["entityMap"] == {i: ["@none"] for i in ids[1:]}     # limit ignored (5.14.5.3); q applied
    got = tcli.get("/entityMaps/" + m["id"])
    assert got.status_code == 200 and got.json()["entityMap"] == m["entityMap"]
    assert tcli.patch("/entityMaps/" + m["id"], {"expiresAt": "2099-01-01T00:00:00Z"}).status_code == 204
    assert tcli.delete("/entityMaps/" + m["id"]).status_code == 204
    assert tcli.get("/entityMaps/" + m["id"]).status_code == 404


def test_6_35_3_2_post_with_a_query_body(tcli):
    typ = "Tram" + uid("T").rsplit(":", 1)[1].replace("-", "")[:8]
    eid = make(tcli, typ, 5)
    r = tcli.post("/temporal/entityMaps", {"type": "Query", "entities": [{"type": typ}], "temporalQ": TQ},
                  params={"entityMapLifetime": "PT30S"})
    assert r.status_code == 201, r.text
    m = r.json()
    assert m["entityMap"] == {eid: ["@none"]}
    left = time.mktime(time.strptime(m["expiresAt"][:19], "%Y-%m-%dT%H:%M:%S")) - time.mktime(time.gmtime())
    assert 0 < left <= 31


def test_5_14_5_4_errors(tcli):
    assert_problem(tcli.get("/temporal/entityMaps", params=dict(TQ, type="Bus", entityMapLifetime="soon")),
                   400, "BadRequestData")
    assert_problem(tcli.get("/temporal/entityMaps", params={"type": "Bus", "timerel": "later"}), 400,
                   "BadRequestData")
    assert_problem(tcli.get("/temporal/entityMaps", params={"type": "Bus"}), 400, "BadRequestData")
    r = tcli.post("/temporal/entityMaps", {"type": "Query", "entities": [{"type": "Bus"}]})
    assert_problem(r, 400, "BadRequestData")                      # a temporal query is needed


def test_6_18_3_2_entity_map_pages_a_temporal_query(tcli):
    """entityMap=true on GET /temporal/entities (Table 6.18.3.2-1): the first
    page and NGSILD-EntityMap; the next pages through the map (4.3.6.7), in its
    order, the filters applied again: an entity whose history is deleted
    leaves the map; count from the map; 6.24's POST form the same."""
    typ = "Van" + uid("T").rsplit(":", 1)[1].replace("-", "")[:8]
    ids = [make(tcli, typ, i + 1) for i in range(5)]
    r = tcli.get("/temporal/entities", params=dict(TQ, type=typ, entityMap="true", limit=2, count="true"))
    assert r.status_code == 200, r.text
    mid = r.headers["NGSILD-EntityMap"]
    assert r.headers["NGSILD-Results-Count"] == "5" and "next" in r.headers.get("Link", "")
    first = [e["id"] for e in r.json()]
    m = tcli.get("/entityMaps/" + mid).json()
    order = list(m["entityMap"])
    assert sorted(order) == sorted(ids) and set(m["entityMap"][i][0] for i in ids) == {"@none"}
    assert first == order[:2]
    # a later entity is not in the map: the pages are the map's
    make(tcli, typ, 9)
    assert tcli.delete("/temporal/entities/" + order[3]).status_code == 204
    h = {"NGSILD-EntityMap": mid}
    r = tcli.get("/temporal/entities", params=dict(TQ, type=typ, limit=2, offset=2, count="true"), headers=h)
    assert r.status_code == 200 and r.headers["NGSILD-EntityMap"] == mid, r.text
    assert [e["id"] for e in r.json()] == [order[2]]             # order[3] matches no more
    assert r.headers["NGSILD-Results-Count"] == "4" and "next" in r.headers.get("Link", "")
    assert order[3] not in tcli.get("/entityMaps/" + mid).json()["entityMap"]
    r = tcli.get("/temporal/entities", params=dict(TQ, type=typ, limit=2, offset=4), headers=h)
    assert [e["id"] for e in r.json()] == [order[4]] and "next" not in r.headers.get("Link", "")
    assert r.json()[0]["speed"][0]["value"] == ids.index(order[4]) + 1
    # 6.24: the POST form pages through the same map
    body = {"type": "Query", "entities": [{"type": typ}], "temporalQ": TQ}
    r = tcli.post("/temporal/entityOperations/query", body, params={"limit": "1", "offset": "0"}, headers=h)
    assert r.status_code == 200 and [e["id"] for e in r.json()] == [order[0]], r.text
    # an unknown map: a new one is made (5.5.14)
    r = tcli.get("/temporal/entities", params=dict(TQ, type=typ, limit=10),
                 headers={"NGSILD-EntityMap": "urn:ngsi-ld:EntityMap:none"})
    assert r.status_code == 200 and r.headers["NGSILD-EntityMap"] != "urn:ngsi-ld:EntityMap:none"
    assert len(r.json()) == 5
    assert_problem(tcli.get("/temporal/entities", params=dict(TQ, type=typ, entityMap="yes")), 400, "BadRequestData")
