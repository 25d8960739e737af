"""Linked Entity retrieval (4.5.23; 5.7.1.5, 5.7.2.4; join, joinLevel and
containedBy of Tables 6.4.3.2-1 and 6.5.3.1-1; the Query members of 5.2.23)."""

from ngsi import (DEFAULT_VOCAB, assert_json_equal, assert_problem, entity, listrel, prop, rel, uid)


def vehicle_world(cli):
    """A vehicle parked at a parking operated by a company; two passengers;
    a route of two cities and one unknown."""
    v, pk, co, a, b = uid("V"), uid("P"), uid("C"), uid("Person"), uid("Person")
    c1, c2, missing = uid("City"), uid("City"), uid("Nowhere")
    cli.create(entity(co, "Company", name=prop("BigCorp")))
    cli.create(entity(pk, "Parking", name=prop("Top"), operatedBy=rel(co)))
    cli.create(entity(a, "Person", name=prop("Alice")))
    cli.create(entity(b, "Person", name=prop("Bob")))
    cli.create(entity(c1, "City", name=prop("Antwerp")))
    cli.create(entity(c2, "City", name=prop("Rotterdam")))
    cli.create(entity(v, "Vehicle", brand=prop("Mercedes"), isParked=rel(pk, observedAt="2017-07-29T12:00:04Z"),
                      passengers=rel([a, b]), route=listrel([c1, missing, c2])))
    return dict(v=v, pk=pk, co=co, a=a, b=b, c1=c1, c2=c2, missing=missing)


def test_4_5_23_2_inline_puts_entity_under_relationship(cli):
    w = vehicle_world(cli)
    e = cli.entity(w["v"], params={"join": "inline"})
    assert e["isParked"]["object"] == w["pk"]
    assert e["isParked"]["observedAt"] == "2017-07-29T12:00:04Z"
    assert_json_equal(e["isParked"]["entity"], entity(w["pk"], "Parking", name=prop("Top"), operatedBy=rel(w["co"])))
    # joinLevel 1 (the default): the parking's own relationship is not followed
    assert "entity" not in e["isParked"]["entity"]["operatedBy"]
    # a Relationship with several objects: an array of entities
    assert [x["id"] for x in e["passengers"]["entity"]] == [w["a"], w["b"]]
    # ListRelationship: entityList in order, a target not held here left out
    assert [x["id"] for x in e["route"]["entityList"]] == [w["c1"], w["c2"]]
    assert e["brand"] == prop("Mercedes")


def test_4_5_23_2_inline_join_level_2_recurses(cli):
    w = vehicle_world(cli)
    e = cli.entity(w["v"], params={"join": "inline", "joinLevel": "2"})
    op = e["isParked"]["entity"]["operatedBy"]
    assert_json_equal(op["entity"], entity(w["co"], "Company", name=prop("BigCorp")))


def test_4_5_23_2_inline_missing_target_is_200_without_entity(cli):
    eid = uid()
    cli.create(entity(eid, "T", r=rel("urn:ngsi-ld:Nothing:1")))
    r = cli.get("/entities/" + eid, params={"join": "inline"})
    assert r.status_code == 200, r.text
    assert r.json()["r"] == rel("urn:ngsi-ld:Nothing:1")


def test_4_5_23_2_inline_key_values_value_becomes_entity(cli):
    w = vehicle_world(cli)
    e = cli.entity(w["v"], params={"join": "inline", "format": "keyValues"})
    assert e["isParked"] == {"id": w["pk"], "type": "Parking", "name": "Top", "operatedBy": w["co"]}
    assert [x["name"] for x in e["passengers"]] == ["Alice", "Bob"]
    assert e["route"][0]["name"] == "Antwerp"
    assert e["route"][1] == w["missing"]
    assert e["route"][2]["name"] == "Rotterdam"


def test_4_5_23_2_inline_concise_linked_entity_is_concise(cli):
    w = vehicle_world(cli)
    e = cli.entity(w["v"], params={"join": "inline", "format": "concise"})
    assert e["isParked"]["entity"]["name"] == "Top"


def test_4_5_23_2_inline_cycle_terminates(cli):
    a, b = uid("A"), uid("B")
    cli.create(entity(a, "T", n=prop(1), other=rel(b)))
    cli.create(entity(b, "T", n=prop(2), other=rel(a)))
    e = cli.entity(a, params={"join": "inline", "joinLevel": "5"})
    inner = e["other"]["entity"]
    assert inner["id"] == b
    # a is encountered already: its id is not inlined again (5.7.1.5)
    assert inner["other"] == rel(a)


def test_4_5_23_2_self_link_is_not_inlined(cli):
    a = uid("A")
    cli.create(entity(a, "T", me=rel(a)))
    assert cli.entity(a, params={"join": "inline", "joinLevel": "3"})["me"] == rel(a)


def test_6_5_3_1_contained_by_is_not_inlined(cli):
    w = vehicle_world(cli)
    e = cli.entity(w["v"], params={"join": "inline", "joinLevel": "1", "containedBy": w["pk"]})
    assert "entity" not in e["isParked"]
    assert len(e["passengers"]["entity"]) == 2


def test_4_5_23_3_flat_answers_array_each_once(cli):
    w = vehicle_world(cli)
    # b is linked twice (passengers, and from nowhere else): listed once
    r = cli.get("/entities/" + w["v"], params={"join": "flat", "joinLevel": "2"})
    assert r.status_code == 200, r.text
    ids = [x["id"] for x in r.json()]
    assert ids[0] == w["v"]
    assert sorted(ids[1:]) == sorted([w["pk"], w["a"], w["b"], w["c1"], w["c2"], w["co"]])
    assert len(ids) == len(set(ids))
    # linked entities are plain entities: no "entity" members
    assert "entity" not in r.json()[0]["isParked"]


def test_4_5_23_3_flat_level_1_stops(cli):
    w = vehicle_world(cli)
    ids = [x["id"] for x in cli.get("/entities/" + w["v"], params={"join": "flat"}).json()]
    assert w["co"] not in ids and w["pk"] in ids


def test_4_5_23_3_flat_cycle_lists_each_once(cli):
    a, b = uid("A"), uid("B")
    cli.create(entity(a, "T", other=rel(b)))
    cli.create(entity(b, "T", other=rel(a)))
    ids = [x["id"] for x in cli.get("/entities/" + a, params={"join": "flat", "joinLevel": "4"}).json()]
    assert ids == [a, b]


def test_4_5_23_3_flat_ld_json_each_entity_has_context(cli):
    w = vehicle_world(cli)
    r = cli.get("/entities/" + w["v"], params={"join": "flat"}, headers={"Accept": "application/ld+json"})
    assert r.status_code == 200
    assert all("@context" in x for x in r.json())


def test_5_7_1_5_flat_geojson_is_feature_collection(cli):
    w = vehicle_world(cli)
    r = cli.get("/entities/" + w["v"], params={"join": "flat"}, headers={"Accept": "application/geo+json"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["type"] == "FeatureCollection"
    assert body["features"][0]["id"] == w["v"]
    assert len(body["features"]) == 6


def test_5_7_2_4_query_inline_each_entity(cli):
    t = "Src"
    targets = []
    for i in range(3):
        tid, eid = uid("Tgt"), uid("Src")
        targets.append(tid)
        cli.create(entity(tid, "Tgt", n=prop(i)))
        cli.create(entity(eid, t, to=rel(tid)))
    r = cli.get("/entities", params={"type": t, "join": "inline"})
    assert r.status_code == 200, r.text
    assert [x["to"]["entity"]["id"] for x in r.json()] == targets


def test_5_7_2_4_query_flat_matched_first_then_linked_once(cli):
    t = "Src"
    shared = uid("Tgt")
    cli.create(entity(shared, "Tgt", n=prop(0)))
    srcs = []
    for i in range(3):
        eid = uid("Src")
        srcs.append(eid)
        cli.create(entity(eid, t, to=rel(shared)))
    ids = [x["id"] for x in cli.get("/entities", params={"type": t, "join": "flat"}).json()]
    assert ids == srcs + [shared]


def test_5_7_2_4_query_linked_matched_entity_is_inlined_and_not_repeated_in_flat(cli):
    t = "Src"
    a, b = uid("A"), uid("B")
    cli.create(entity(a, t, other=rel(b)))
    cli.create(entity(b, t, n=prop(1)))
    got = cli.get("/entities", params={"type": t, "join": "inline"}).json()
    assert got[0]["other"]["entity"]["id"] == b
    ids = [x["id"] for x in cli.get("/entities", params={"type": t, "join": "flat"}).json()]
    assert ids == [a, b]


def test_6_23_post_query_join_members(cli):
    w = vehicle_world(cli)
    r = cli.post("/entityOperations/query", {"type": "Query", "entities": [{"type": "Vehicle", "id": w["v"]}],
                                             "join": "inline", "joinLevel": 2})
    assert r.status_code == 200, r.text
    assert r.json()[0]["isParked"]["entity"]["operatedBy"]["entity"]["id"] == w["co"]
    r = cli.post("/entityOperations/query", {"type": "Query", "entities": [{"type": "Vehicle", "id": w["v"]}],
                                             "join": "flat"})
    assert r.status_code == 200, r.text
    assert len(r.json()) == 6


def test_6_5_3_1_join_none_is_plain(cli):
    w = vehicle_world(cli)
    assert "entity" not in cli.entity(w["v"], params={"join": "@none"})["isParked"]


def test_6_5_3_1_bad_join_values_are_400(cli):
    w = vehicle_world(cli)
    base = "/entities/" + w["v"]
    assert_problem(cli.get(base, params={"join": "deep"}), 400, "BadRequestData")
    for lvl in ("0", "-1", "x", "1.5", "99"):
        assert_problem(cli.get(base, params={"join": "inline", "joinLevel": lvl}), 400, "BadRequestData")
    assert_problem(cli.get(base, params={"join": "inline", "containedBy": "not a uri"}), 400, "BadRequestData")
    r = cli.post("/entityOperations/query", {"type": "Query", "entities": [{"type": "Vehicle"}], "join": 3})
    assert_problem(r, 400, "BadRequestData")


def test_4_5_23_sub_attribute_relationships_are_not_followed(cli):
    a, b = uid("A"), uid("B")
    cli.create(entity(b, "T", n=prop(1)))
    cli.create(entity(a, "T", p=prop(1, by=rel(b))))
    assert cli.entity(a, params={"join": "inline"})["p"] == prop(1, by=rel(b))


def test_4_5_23_2_inline_spliced_into_cached_text_equals_full_rendering(cli):
    """The plain answer of a join splices "entity" members into the cached
    rendering of the linking entity; with a projection naming every member the
    entity is rendered in full: both must be the same document."""
    w = vehicle_world(cli)
    a2 = uid("Person")
    cli.create(entity(a2, "Person", name=prop("Carol")))
    cli.post("/entities/%s/attrs" % w["v"], {"passengers": rel(a2, datasetId="urn:ngsi-ld:ds:1")})
    everything = "id,type,brand,isParked,passengers,route,name,operatedBy"  # linked ones: name, operatedBy
    for fmt in ("normalized", "concise"):
        for _ in range(2):      # the first read fills the render cache, the second splices into it
            spliced = cli.entity(w["v"], params={"join": "inline", "format": fmt})
            full = cli.entity(w["v"], params={"join": "inline", "format": fmt, "pick": everything})
            assert_json_equal(spliced, full)
    inst = cli.entity(w["v"], params={"join": "inline"})["passengers"]
    assert_json_equal([x.get("entity") for x in inst],
                      [[{"id": w["a"], "type": "Person", "name": prop("Alice")},
                        {"id": w["b"], "type": "Person", "name": prop("Bob")}],
                       {"id": a2, "type": "Person", "name": prop("Carol")}], unordered=True)


def test_4_5_23_2_inline_answer_is_bounded(cli):
    """Paths through shared entities multiply: 5 layers of 10 entities, each
    linking all 10 of the next, inline 111,110 entities at joinLevel 5. The
    answer is refused (403 TooManyResults) rather than built; flat lists each
    entity once."""
    layers = [[uid("L%d" % k) for _ in range(10)] for k in range(5)]
    ents = []
    for k, layer in enumerate(layers):
        for eid in layer:
            attrs = {"next": rel(layers[k + 1])} if k + 1 < len(layers) else {}
            ents.append(entity(eid, "Layer", **attrs))
    root = uid("Root")
    ents.append(entity(root, "Root", next=rel(layers[0])))
    cli.batch_create(ents)
    assert_problem(cli.get("/entities/" + root, params={"join": "inline", "joinLevel": "5"}), 403, "TooManyResults")
    r = cli.get("/entities/" + root, params={"join": "inline", "joinLevel": "3"})
    assert r.status_code == 200
    assert len(r.json()["next"]["entity"][0]["next"]["entity"]) == 10
    flat = cli.get("/entities/" + root, params={"join": "flat", "joinLevel": "5"}).json()
    assert len(flat) == 51


def test_4_5_23_3_flat_follows_only_relationships_shown(cli):
    """attrs and datasetId leave relationships out of the answer: their
    targets are not appended either."""
    a, b, c = uid("A"), uid("B"), uid("C")
    cli.create(entity(b, "T", n=prop(1)))
    cli.create(entity(c, "T", n=prop(2)))
    cli.create(entity(a, "T", n=prop(0), x=rel(b), y=rel(c, datasetId="urn:ngsi-ld:ds:1")))
    ids = [e["id"] for e in cli.get("/entities/" + a, params={"join": "flat", "attrs": "x"}).json()]
    assert ids == [a, b]
    ids = [e["id"] for e in cli.get("/entities/" + a, params={"join": "flat", "datasetId": "urn:ngsi-ld:ds:1"}).json()]
    assert ids == [a, c]
    ids = [e["id"] for e in cli.get("/entities/" + a, params={"join": "flat"}).json()]
    assert ids == [a, b, c]


def test_5_7_1_5_inline_geojson_feature_holds_linked_entity(cli):
    w = vehicle_world(cli)
    r = cli.get("/entities/" + w["v"], params={"join": "inline"}, headers={"Accept": "application/geo+json"})
    assert r.status_code == 200, r.text
    f = r.json()
    assert f["type"] == "Feature"
    assert f["properties"]["isParked"]["entity"]["id"] == w["pk"]


def test_6_4_3_2_inline_pagination_links_keep_join(cli):
    for i in range(3):
        tid, eid = uid("Tgt"), uid("Src")
        cli.create(entity(tid, "Tgt", n=prop(i)))
        cli.create(entity(eid, "Src", to=rel(tid)))
    r = cli.get("/entities", params={"type": "Src", "join": "inline", "limit": "2", "count": "true"})
    assert r.status_code == 200, r.text
    assert r.headers["NGSILD-Results-Count"] == "3"
    assert all("entity" in x["to"] for x in r.json())
    assert "join=inline" in r.headers["Link"]


def test_4_5_23_2_inline_with_many_relationships(cli):
    """More Relationships than the render cache notes link points for: the
    linking entity is rendered in full, every target inlined."""
    tgt = uid("Tgt")
    cli.create(entity(tgt, "Tgt", n=prop(1)))
    eid = uid("Many")
    cli.create(entity(eid, "Many", **{"r%d" % i: rel(tgt) for i in range(40)}))
    for _ in range(2):      # the first read fills the cache
        e = cli.entity(eid, params={"join": "inline"})
        assert all(e["r%d" % i]["entity"]["id"] == tgt for i in range(40))
