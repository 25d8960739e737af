"""q into linked entities (4.9 EXAMPLES 13 and 14: rel{attr}, a type hint
rel{Type:attr}, nested terms), with the rules of 5.7.2.4: Linked Entity
retrieval (join) must be asked for, and deep enough."""

from ngsi import assert_problem, entity, listrel, prop, rel, uid


def world(cli):
    d1, d2, s1, s2, s3 = uid("Device"), uid("Device"), uid("WS"), uid("WS"), uid("WS")
    site = uid("Site")
    cli.create(entity(site, "Site", name=prop("north")))
    cli.create(entity(d1, "Device", humidity=prop(40), at=rel(site)))
    cli.create(entity(d2, "Sensor", humidity=prop(70)))
    cli.create(entity(s1, "WS", sensor=rel(d1)))
    cli.create(entity(s2, "WS", sensor=rel(d2)))
    cli.create(entity(s3, "WS", sensors=listrel([uid("Nowhere"), d2])))
    return dict(d1=d1, d2=d2, s1=s1, s2=s2, s3=s3, site=site)


def q(cli, text, **kw):
    r = cli.get("/entities", params=dict({"type": "WS", "q": text, "join": "flat"}, **kw))
    assert r.status_code == 200, r.text
    return sorted(e["id"] for e in r.json() if e["type"] == "WS")


def test_4_9_q_term_into_linked_entity(cli):
    w = world(cli)
    assert q(cli, "sensor{humidity}==40") == [w["s1"]]
    assert q(cli, "sensor{humidity}>50") == [w["s2"]]
    assert q(cli, "sensor{humidity}") == sorted([w["s1"], w["s2"]])
    assert q(cli, "sensors{humidity}==70") == [w["s3"]]                  # a ListRelationship
    assert q(cli, "sensor{humidity}==40|sensors{humidity}==70") == sorted([w["s1"], w["s3"]])
    assert q(cli, "sensor{humidity}==99") == []


def test_4_9_type_hint_and_nested_terms(cli):
    w = world(cli)
    assert q(cli, "sensor{Device:humidity}>0") == [w["s1"]]
    assert q(cli, "sensor{Device,Sensor:humidity}>0") == sorted([w["s1"], w["s2"]])
    assert q(cli, "sensor{at{name}}==\"north\"", joinLevel="2") == [w["s1"]]
    assert q(cli, "sensor{at{name}}==\"south\"", joinLevel="2") == []


def test_4_9_post_query_with_linked_term(cli):
    w = world(cli)
    r = cli.post("/entityOperations/query", {"type": "Query", "entities": [{"type": "WS"}],
                                             "q": "sensor{humidity}==40", "join": "inline"})
    assert r.status_code == 200, r.text
    assert [e["id"] for e in r.json()] == [w["s1"]]
    assert r.json()[0]["sensor"]["entity"]["humidity"]["value"] == 40


def test_5_7_2_4_linked_q_needs_join_deep_enough(cli):
    world(cli)
    assert_problem(cli.get("/entities", params={"type": "WS", "q": "sensor{humidity}==40"}), 400, "BadRequestData")
    assert_problem(cli.get("/entities", params={"type": "WS", "q": "sensor{humidity}==40", "join": "@none"}),
                   400, "BadRequestData")
    assert_problem(cli.get("/entities", params={"type": "WS", "q": "sensor{at{name}}", "join": "inline"}),
                   400, "BadRequestData")
    assert_problem(cli.delete("/entities", params={"type": "WS", "q": "sensor{humidity}==40"}), 400, "BadRequestData")
    for bad in ("sensor{humidity", "sensor{}", "sensor.x{a}"):
        assert_problem(cli.get("/entities", params={"type": "WS", "q": bad, "join": "inline"}), 400, "BadRequestData")
