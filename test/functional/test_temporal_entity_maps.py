"""Create EntityMap for Query Temporal Evolution of Entities (5.14.5, 6.35
GET and POST /temporal/entityMaps): the parameters (or Query body) of a
temporal query (Table 6.18.3.2-1, 5.2.23), the limit ignored; answered 201
with the EntityMap (5.2.39) of the matching entities and NGSILD-EntityMap,
then read, changed and deleted at /entityMaps/{id} (6.32)."""

import time

import pytest

from ngsi import assert_problem, uid


@pytest.fixture
def tcli(broker_factory, make_client):
    return make_client(broker_factory("--history", "corDB"))


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
