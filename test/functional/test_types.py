"""Discovery: 6.25 GET /types, 6.26 GET /types/{type}, 6.27 GET /attributes,
6.28 GET /attributes/{attrId} (behaviour 5.7.5-5.7.10, data types
5.2.24-5.2.28, representations 4.5.10-4.5.15)."""

import pytest

from ngsi import (DEFAULT_VOCAB, assert_problem, entity, media_type, point, prop, rel)

DATA = [
    entity("urn:ngsi-ld:V:1", "Vehicle", speed=prop(1), brand=prop("a"), location=point(1, 2)),
    entity("urn:ngsi-ld:V:2", "Vehicle", speed=prop(2), owner=rel("urn:ngsi-ld:P:1")),
    entity("urn:ngsi-ld:B:1", "Bike", speed=prop(3)),
    entity("urn:ngsi-ld:H:1", ["House", "Building"], rooms=prop(3)),
]


@pytest.fixture
def t(cli):
    cli.batch_create(DATA)
    return cli


def test_6_25_entity_type_list(t):
    r = t.get("/types")
    assert r.status_code == 200, r.text
    assert media_type(r) == "application/json"
    body = r.json()
    assert body["type"] == "EntityTypeList"
    assert isinstance(body["id"], str) and ":" in body["id"]
    assert sorted(body["typeList"]) == ["Bike", "Building", "House", "Vehicle"]


def test_6_25_entity_type_list_with_user_context(cli, vctx):
    cli.create(entity("urn:ngsi-ld:V:9", "Vehicle", speed=prop(1)), link=vctx)
    cli.create(entity("urn:ngsi-ld:X:9", "Thing"))
    assert sorted(cli.get("/types", link=vctx).json()["typeList"]) == ["Thing", "Vehicle"]
    # 5.5.7: no term for it in the request's context -> the Fully Qualified Name
    assert sorted(cli.get("/types").json()["typeList"]) == ["Thing", "https://example.org/Vehicle"]


def test_6_25_details(t):
    r = t.get("/types", params={"details": "true"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert isinstance(body, list)
    by = {e["typeName"]: e for e in body}
    assert sorted(by) == ["Bike", "Building", "House", "Vehicle"]
    v = by["Vehicle"]
    assert v["type"] == "EntityType"
    assert v["id"] == DEFAULT_VOCAB + "Vehicle"
    assert sorted(v["attributeNames"]) == ["brand", "location", "owner", "speed"]
    assert sorted(by["House"]["attributeNames"]) == ["rooms"]


def test_6_26_entity_type_info(t):
    r = t.get("/types/Vehicle")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["type"] == "EntityTypeInfo"
    assert body["id"] == DEFAULT_VOCAB + "Vehicle"
    assert body["typeName"] == "Vehicle"
    assert body["entityCount"] == 2
    details = {a["attributeName"]: a for a in body["attributeDetails"]}
    assert sorted(details) == ["brand", "location", "owner", "speed"]
    assert details["speed"]["type"] == "Attribute"
    assert details["speed"]["id"] == DEFAULT_VOCAB + "speed"
    assert details["speed"]["attributeTypes"] == ["Property"]
    assert details["location"]["attributeTypes"] == ["GeoProperty"]
    assert details["owner"]["attributeTypes"] == ["Relationship"]


def test_6_26_entity_type_info_by_uri(t):
    r = t.get("/types/" + DEFAULT_VOCAB.replace("/", "%2F").replace(":", "%3A") + "Bike")
    assert r.status_code == 200, r.text
    assert r.json()["entityCount"] == 1


def test_6_26_unknown_type_is_404(t):
    assert_problem(t.get("/types/Spaceship"), 404, "ResourceNotFound")


def test_6_27_attribute_list(t):
    r = t.get("/attributes")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["type"] == "AttributeList"
    assert isinstance(body["id"], str) and ":" in body["id"]
    assert sorted(body["attributeList"]) == ["brand", "location", "owner", "rooms", "speed"]


def test_6_27_details(t):
    r = t.get("/attributes", params={"details": "true"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert isinstance(body, list)
    by = {a["attributeName"]: a for a in body}
    assert sorted(by) == ["brand", "location", "owner", "rooms", "speed"]
    assert by["speed"]["type"] == "Attribute"
    assert by["speed"]["id"] == DEFAULT_VOCAB + "speed"
    assert sorted(by["speed"]["typeNames"]) == ["Bike", "Vehicle"]
    assert sorted(by["rooms"]["typeNames"]) == ["Building", "House"]


def test_6_28_attribute_info(t):
    r = t.get("/attributes/speed")
    assert r.status_code == 200, r.text
    a = r.json()
    assert a["type"] == "Attribute"
    assert a["id"] == DEFAULT_VOCAB + "speed"
    assert a["attributeName"] == "speed"
    assert a["attributeCount"] == 3
    assert a["attributeTypes"] == ["Property"]
    assert sorted(a["typeNames"]) == ["Bike", "Vehicle"]


def test_6_28_unknown_attribute_is_404(t):
    assert_problem(t.get("/attributes/nothing"), 404, "ResourceNotFound")


def test_6_25_types_follow_deletions(t):
    assert t.delete("/entities/urn:ngsi-ld:B:1").status_code == 204
    assert "Bike" not in t.get("/types").json()["typeList"]
    assert_problem(t.get("/types/Bike"), 404, "ResourceNotFound")
    assert sorted(t.get("/attributes/speed").json()["typeNames"]) == ["Vehicle"]


def test_6_25_invalid_details_value_is_400(t):
    assert_problem(t.get("/types", params={"details": "maybe"}), 400, "BadRequestData")


def test_6_25_ld_json_has_context(t):
    r = t.get("/types", accept="application/ld+json")
    assert r.status_code == 200
    assert media_type(r) == "application/ld+json"
    assert "@context" in r.json()


def test_6_27_attributes_follow_attribute_deletions(cli):
    """GET /attributes comes from the attribute index: a name leaves the list
    when the last instance of it goes (attribute delete or entity delete)."""
    a, b = "urn:ngsi-ld:AD:1", "urn:ngsi-ld:AD:2"
    cli.create(entity(a, "AD", colour=prop("red"), weight=prop(1)))
    cli.create(entity(b, "AD", colour=prop("blue")))
    assert sorted(cli.get("/attributes").json()["attributeList"]) == ["colour", "weight"]
    assert cli.delete("/entities/%s/attrs/weight" % a).status_code == 204
    assert cli.get("/attributes").json()["attributeList"] == ["colour"]
    assert_problem(cli.get("/attributes/weight"), 404, "ResourceNotFound")
    assert cli.delete("/entities/" + a).status_code == 204
    assert cli.get("/attributes/colour").json()["attributeCount"] == 1
    assert cli.get("/types").json()["typeList"] == ["AD"]
