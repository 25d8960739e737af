"""The Attribute Projection Language (4.21): pick and omit with nested terms
for linked entities (4.5.23, 5.7.1.5), and their rules with attrs (Tables
6.4.3.2-1, 6.5.3.1-1; 5.7.1.4)."""

from ngsi import assert_json_equal, assert_problem, entity, prop, rel, uid


def world(cli):
    v, pk, co = uid("V"), uid("P"), uid("C")
    cli.create(entity(co, "Company", name=prop("BigCorp"), size=prop(9)))
    cli.create(entity(pk, "Parking", name=prop("Top"), spots=prop(10), operatedBy=rel(co)))
    cli.create(entity(v, "Vehicle", name=prop("car"), speed=prop(80), isParked=rel(pk)))
    return v, pk, co


def test_4_21_pick_nested_term_projects_linked_entity(cli):
    v, pk, _ = world(cli)
    e = cli.entity(v, params={"join": "inline", "pick": "speed,isParked{name}"})
    assert set(e) == {"speed", "isParked"}
    assert e["isParked"]["entity"] == {"name": prop("Top")}


def test_4_21_pick_nested_at_two_levels(cli):
    v, pk, co = world(cli)
    e = cli.entity(v, params={"join": "inline", "joinLevel": "2", "pick": "id,isParked{id|operatedBy{size}}"})
    assert e["id"] == v and set(e) == {"id", "isParked"}
    linked = e["isParked"]["entity"]
    assert set(linked) == {"id", "operatedBy"}
    assert linked["operatedBy"]["entity"] == {"size": prop(9)}


def test_5_7_1_5_pick_without_braces_applies_to_every_entity(cli):
    v, pk, _ = world(cli)
    e = cli.entity(v, params={"join": "inline", "pick": "name,isParked"})
    assert e["name"] == prop("car")
    assert e["isParked"]["entity"] == {"name": prop("Top")}


def test_5_7_1_5_omit_top_level_terms_apply_to_every_entity(cli):
    v, pk, _ = world(cli)
    e = cli.entity(v, params={"join": "inline", "omit": "name"})
    assert "name" not in e
    assert "name" not in e["isParked"]["entity"]
    assert e["isParked"]["entity"]["spots"] == prop(10)


def test_4_21_omit_nested_term_removes_from_linked_entity_only(cli):
    v, pk, _ = world(cli)
    e = cli.entity(v, params={"join": "inline", "omit": "speed,isParked{spots}"})
    assert "speed" not in e and e["name"] == prop("car")
    linked = e["isParked"]["entity"]
    assert "spots" not in linked and "speed" not in linked and linked["name"] == prop("Top")


def test_4_21_flat_projection_applies_to_linked_entities(cli):
    v, pk, _ = world(cli)
    got = cli.get("/entities/" + v, params={"join": "flat", "pick": "id,isParked{id,spots}"}).json()
    assert got == [{"id": v, "isParked": rel(pk)}, {"id": pk, "spots": prop(10)}]


def test_4_21_flat_follows_only_projected_relationships(cli):
    v, pk, _ = world(cli)
    got = cli.get("/entities/" + v, params={"join": "flat", "omit": "isParked"}).json()
    assert [x["id"] for x in got] == [v]


def test_4_21_syntax_errors_are_400(cli):
    v, _, _ = world(cli)
    for bad in ("a{", "a}", "a{}", ",a", "a,,b", "a{b", "{a}", "a{b}}", "a b", "a{b}c"):
        for par in ("pick", "omit"):
            assert_problem(cli.get("/entities/" + v, params={par: bad, "join": "inline", "joinLevel": "3"}),
                           400, "BadRequestData")


def test_4_21_braces_without_join_are_400(cli):
    v, _, _ = world(cli)
    assert_problem(cli.get("/entities/" + v, params={"pick": "isParked{name}"}), 400, "BadRequestData")
    assert_problem(cli.get("/entities/" + v, params={"pick": "isParked{name}", "join": "@none"}),
                   400, "BadRequestData")
    assert_problem(cli.get("/entities", params={"type": "Vehicle", "omit": "isParked{name}"}), 400, "BadRequestData")


def test_4_21_braces_deeper_than_join_level_are_400(cli):
    v, _, _ = world(cli)
    assert_problem(cli.get("/entities/" + v, params={"pick": "isParked{operatedBy{name}}", "join": "inline"}),
                   400, "BadRequestData")
    r = cli.get("/entities/" + v, params={"pick": "isParked{operatedBy{name}}", "join": "inline", "joinLevel": "2"})
    assert r.status_code == 200, r.text


def test_6_5_3_1_pick_or_omit_with_attrs_is_400(cli):
    v, _, _ = world(cli)
    assert_problem(cli.get("/entities/" + v, params={"pick": "name", "attrs": "speed"}), 400, "BadRequestData")
    assert_problem(cli.get("/entities/" + v, params={"omit": "name", "attrs": "speed"}), 400, "BadRequestData")
    assert_problem(cli.get("/entities", params={"type": "Vehicle", "pick": "name", "attrs": "speed"}),
                   400, "BadRequestData")
    r = cli.post("/entityOperations/query", {"type": "Query", "entities": [{"type": "Vehicle"}],
                                             "attrs": ["speed"], "pick": ["name"]})
    assert_problem(r, 400, "BadRequestData")


def test_6_5_3_1_attrs_naming_id_type_or_scope_is_400(cli):
    v, _, _ = world(cli)
    for a in ("id", "type", "scope", "id,type"):
        assert_problem(cli.get("/entities/" + v, params={"attrs": a}), 400, "BadRequestData")
        assert_problem(cli.get("/entities", params={"type": "Vehicle", "attrs": a}), 400, "BadRequestData")


def test_5_7_1_4_retrieve_pick_leaving_nothing_is_404(cli):
    v, _, _ = world(cli)
    assert_problem(cli.get("/entities/" + v, params={"pick": "nothing"}), 404, "ResourceNotFound")
    assert_problem(cli.get("/entities/" + v, params={"pick": "scope"}), 404, "ResourceNotFound")
    assert_problem(cli.get("/entities/" + v, params={"attrs": "nothing"}), 404, "ResourceNotFound")
    assert cli.entity(v, params={"pick": "nothing,speed"}) == {"speed": prop(80)}
    assert cli.entity(v, params={"pick": "id"}) == {"id": v}


def test_5_7_2_4_query_pick_keeps_entities_with_a_picked_attribute(cli):
    a, b = uid("V"), uid("V")
    cli.create(entity(a, "Vehicle", speed=prop(1)))
    cli.create(entity(b, "Vehicle", other=prop(2)))
    got = cli.get("/entities", params={"type": "Vehicle", "pick": "speed"}).json()
    assert got == [{"speed": prop(1)}]
    # id (or type) picked: every entity has it, so every entity is kept (the ETSI
    # suite's 019_17_05 reads 5.7.2.4 so; doc/api.md)
    got = cli.get("/entities", params={"type": "Vehicle", "pick": "id,speed"}).json()
    assert sorted(got, key=lambda x: x["id"]) == sorted([{"id": a, "speed": prop(1)}, {"id": b}], key=lambda x: x["id"])
    got = cli.get("/entities", params={"type": "Vehicle", "pick": "id"}).json()
    assert sorted(x["id"] for x in got) == sorted([a, b])


def test_6_23_post_query_pick_string_with_nested_terms(cli):
    v, pk, _ = world(cli)
    r = cli.post("/entityOperations/query", {"type": "Query", "entities": [{"type": "Vehicle"}],
                                             "join": "inline", "pick": "isParked{name}"})
    assert r.status_code == 200, r.text
    assert r.json() == [{"isParked": {"type": "Relationship", "object": pk, "entity": {"name": prop("Top")}}}]


def test_4_21_top_level_omit_of_type_keeps_linked_entity_type(cli):
    """ETSI 018_21 / 019_23: omit=type,rel{name} removes type from the entity
    the request names; top-level attribute terms reach every entity, but a
    linked entity keeps its id and type (4.21 projects Attributes)."""
    v, pk, co = world(cli)
    e = cli.entity(v, params={"join": "inline", "joinLevel": "2", "omit": "type,name,isParked{spots}"})
    assert "type" not in e and "name" not in e and e["id"] == v
    linked = e["isParked"]["entity"]
    assert linked["type"] == "Parking" and linked["id"] == pk
    assert "spots" not in linked and "name" not in linked
    assert linked["operatedBy"]["entity"]["type"] == "Company"
    assert linked["operatedBy"]["entity"]["size"] == prop(9)
    got = cli.get("/entities/" + v, params={"join": "flat", "joinLevel": "2", "omit": "type,isParked{spots}"}).json()
    assert [x.get("type") for x in got] == [None, "Parking", "Company"]
    assert "spots" not in got[1]
    # a query: the same for every matched entity
    got = cli.get("/entities", params={"type": "Vehicle", "id": v, "join": "flat", "omit": "type"}).json()
    assert "type" not in got[0] and got[1]["type"] == "Parking"


def test_4_21_retrieve_whose_omit_leaves_nothing_is_404(cli):
    """ETSI 018_19_02: omit naming every member of the entity."""
    v, _, _ = world(cli)
    assert_problem(cli.get("/entities/" + v, params={"omit": "id,type,name,speed,isParked"}),
                   404, "ResourceNotFound")
    r = cli.get("/entities/" + v, params={"omit": "type,name,speed,isParked"})
    assert r.status_code == 200 and r.json() == {"id": v}
