"""Entity operations: 6.4.3.1 create, 6.5.3.1 retrieve, 6.5.3.2 delete,
6.5.3.3 replace (PUT), 6.5.3.4 merge (PATCH); the data model of 5.2 (every
attribute kind, sub-attributes, observedAt/unitCode/datasetId, scope) and the
representations of 4.5 (normalized, concise, simplified, GeoJSON)."""

import time

import pytest

from ngsi import (DATETIME_RE, NGSI_NULL, assert_json_equal, canon, assert_no_body, assert_problem,
                  entity, geo, jsonprop, langprop, listprop, listrel, media_type, point, prop,
                  rel, strip_sys, uid, vocabprop)


def full_entity(eid):
    """One attribute of every kind, with sub-attributes and metadata."""
    return entity(
        eid, "Vehicle",
        speed=prop(80, unitCode="KMH", observedAt="2024-01-01T10:00:00Z",
                   accuracy=prop(0.5), source=rel("urn:ngsi-ld:Sensor:1")),
        brand=prop("Mercedes"),
        location=point(13.3986, 52.5547),
        isParked=rel("urn:ngsi-ld:Park:1", observedAt="2024-01-01T10:00:00Z"),
        owners=rel(["urn:ngsi-ld:Person:1", "urn:ngsi-ld:Person:2"]),
        name=langprop({"en": "Car", "de": "Auto", "fr": ["Voiture", "Bagnole"]}),
        category=vocabprop("sedan"),
        periods=listprop(["First", "Second", 3]),
        route=listrel(["urn:ngsi-ld:Stop:1", "urn:ngsi-ld:Stop:2"]),
        raw=jsonprop({"id": "85a6", "value": "Overstay", "nested": [1, {"a": None}]}),
        address=prop({"city": "Berlin", "street": "Ulrich Strasse"}),
    )


# ---- 6.4.3.1 create -----------------------------------------------------------------

def test_6_4_3_1_create_returns_201_and_location(cli):
    eid = uid()
    r = cli.post("/entities", entity(eid, "T", a=prop(1)))
    assert r.status_code == 201, r.text
    assert_no_body(r)
    assert r.headers.get("Location") == "/ngsi-ld/v1/entities/" + eid


def test_6_4_3_1_create_existing_is_409_already_exists(cli):
    eid = uid()
    cli.create(entity(eid, "T"))
    assert_problem(cli.post("/entities", entity(eid, "T", b=prop(2))), 409, "AlreadyExists")
    assert "b" not in cli.entity(eid)


def test_6_4_3_1_create_then_retrieve_every_attribute_kind(cli):
    eid = uid()
    e = full_entity(eid)
    cli.create(e)
    assert_json_equal(cli.entity(eid), e)


@pytest.mark.parametrize("gtype,coords", [
    ("Point", [1.5, 2.5]),
    ("MultiPoint", [[1, 2], [3, 4]]),
    ("LineString", [[1, 2], [3, 4], [5, 6]]),
    ("MultiLineString", [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]),
    ("Polygon", [[[0, 0], [1, 0], [1, 1], [0, 1], [0, 0]]]),
    ("Polygon", [[[0, 0], [10, 0], [10, 10], [0, 10], [0, 0]], [[2, 2], [3, 2], [3, 3], [2, 3], [2, 2]]]),
    ("MultiPolygon", [[[[0, 0], [1, 0], [1, 1], [0, 0]]], [[[5, 5], [6, 5], [6, 6], [5, 5]]]]),
])
def test_4_7_1_geoproperty_every_geometry(cli, gtype, coords):
    eid = uid()
    e = entity(eid, "T", location=geo(gtype, coords), area=geo(gtype, coords))
    cli.create(e)
    assert_json_equal(cli.entity(eid), e)


@pytest.mark.parametrize("value", [
    {"type": "GeometryCollection", "geometries": [{"type": "Point", "coordinates": [1, 2]}]},
    {"type": "Point", "coordinates": [1]},
    {"type": "Point", "coordinates": ["a", "b"]},
    {"type": "Point"},
    {"type": "Circle", "coordinates": [1, 2]},
    {"type": "LineString", "coordinates": [[1, 2]]},
    {"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [1, 1], [0, 1]]]},   # not closed
    {"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [0, 0]]]},           # fewer than 4 positions
    "not a geometry",
])
def test_4_7_1_invalid_geometry_is_400(cli, value):
    r = cli.post("/entities", entity(uid(), "T", location={"type": "GeoProperty", "value": value}))
    assert_problem(r, 400, "BadRequestData")


def test_5_2_5_property_values_of_every_json_type(cli):
    eid = uid()
    e = entity(eid, "T", i=prop(7), f=prop(2.5), neg=prop(-3), s=prop(""), t=prop(True), fa=prop(False),
               arr=prop([1, "a", True, [2]]), obj=prop({"a": {"b": [1, 2]}}), big=prop(12345678901234))
    cli.create(e)
    assert_json_equal(cli.entity(eid), e)


def test_5_2_4_multiple_types_and_scope(cli):
    eid = uid()
    e = entity(eid, ["Vehicle", "Car"], scope=["/Madrid/Gardens", "/CompanyA"], a=prop(1))
    cli.create(e)
    assert_json_equal(cli.entity(eid), e, unordered=True)


def test_4_18_single_scope_is_a_string(cli):
    eid = uid()
    e = entity(eid, "T", scope="/Madrid")
    cli.create(e)
    assert cli.entity(eid)["scope"] == "/Madrid"


@pytest.mark.parametrize("scope", ["Madrid/", "/Ma drid", "/Madrid//Gardens", "/1abc", 5, ""])
def test_4_18_invalid_scope_is_400(cli, scope):
    assert_problem(cli.post("/entities", entity(uid(), "T", scope=scope)), 400, "BadRequestData")


def test_4_5_5_multiple_instances_by_dataset_id(cli):
    eid = uid()
    instances = [prop(1), prop(2, datasetId="urn:ngsi-ld:ds:a"), prop(3, datasetId="urn:ngsi-ld:ds:b")]
    e = entity(eid, "T", temp=instances)
    cli.create(e)
    assert_json_equal(cli.entity(eid)["temp"], instances, unordered=True)


def test_4_5_5_duplicate_dataset_id_is_400(cli):
    e = entity(uid(), "T", temp=[prop(1, datasetId="urn:ngsi-ld:ds:a"), prop(2, datasetId="urn:ngsi-ld:ds:a")])
    assert_problem(cli.post("/entities", e), 400, "BadRequestData")


def test_5_2_2_system_attributes_given_by_producer_are_ignored(cli):
    eid = uid()
    e = entity(eid, "T", createdAt="2000-01-01T00:00:00Z", a=prop(1, modifiedAt="2000-01-01T00:00:00Z"))
    r = cli.post("/entities", e)
    assert r.status_code == 201, r.text
    got = cli.entity(eid, params={"options": "sysAttrs"})
    assert got["createdAt"] != "2000-01-01T00:00:00Z"
    assert got["a"]["modifiedAt"] != "2000-01-01T00:00:00Z"
    assert_json_equal(cli.entity(eid), entity(eid, "T", a=prop(1)))


def test_4_5_2_3_concise_input_is_understood(cli):
    eid = uid()
    concise = {
        "id": eid, "type": "T",
        "n": 5,
        "s": "text",
        "obj": {"x": 1},
        "sub": {"value": 7, "unitCode": "CEL", "inner": {"value": 1}},
        "loc": {"type": "Point", "coordinates": [1, 2]},
        "r": {"object": "urn:ngsi-ld:X:1"},
        "lp": {"languageMap": {"en": "hi"}},
        "vp": {"vocab": "v"},
        "lst": {"valueList": [1, 2]},
        "lr": {"objectList": ["urn:ngsi-ld:X:1", "urn:ngsi-ld:X:2"]},
        "j": {"json": {"value": 1}},
    }
    cli.create(concise)
    expected = entity(
        eid, "T", n=prop(5), s=prop("text"), obj=prop({"x": 1}),
        sub=prop(7, unitCode="CEL", inner=prop(1)),
        loc=point(1, 2), r=rel("urn:ngsi-ld:X:1"), lp=langprop({"en": "hi"}), vp=vocabprop("v"),
        lst=listprop([1, 2]), lr=listrel(["urn:ngsi-ld:X:1", "urn:ngsi-ld:X:2"]), j=jsonprop({"value": 1}))
    assert_json_equal(cli.entity(eid), expected)


@pytest.mark.parametrize("body", [
    {"type": "T"},                                   # no id
    {"id": "not a uri", "type": "T"},
    {"id": "urn:ngsi-ld:T:1 x", "type": "T"},
    {"id": 5, "type": "T"},
    {"id": "", "type": "T"},
    {"id": "urn:ngsi-ld:T:1"},                       # no type
    {"id": "urn:ngsi-ld:T:1", "type": 5},
    {"id": "urn:ngsi-ld:T:1", "type": ""},
    {"id": "urn:ngsi-ld:T:1", "type": []},
    {"id": "urn:ngsi-ld:T:1", "type": "Bad Type"},
    {"id": "urn:ngsi-ld:T:1", "type": "Bad<Type"},
    [{"id": "urn:ngsi-ld:T:1", "type": "T"}],         # not an object
    "urn:ngsi-ld:T:1",
])
def test_6_4_3_1_invalid_entity_is_400(cli, body):
    if isinstance(body, dict) and isinstance(body.get("id"), str) and body["id"].startswith("urn:ngsi-ld:T:1"):
        body = dict(body, id=body["id"].replace("T:1", "T:" + uid()[-8:]))
    assert_problem(cli.post("/entities", body), 400, "BadRequestData")


@pytest.mark.parametrize("name,attr", [
    ("bad name", prop(1)),
    ("bad<name", prop(1)),
    ("1abc", prop(1)),
    ("a", {"type": "Prop", "value": 1}),                         # unknown attribute type
    ("a", {"type": "Property"}),                                 # no value
    ("a", {"type": "Property", "value": None}),                  # 4.5.0: null is not a value
    ("a", {"type": "Property", "value": NGSI_NULL}),             # 5.5.4: NGSI-LD Null outside fragments
    ("a", NGSI_NULL),
    ("a", {"type": "Relationship"}),                             # no object
    ("a", {"type": "Relationship", "object": "not a uri"}),
    ("a", {"type": "Relationship", "object": 5}),
    ("a", {"type": "Relationship", "object": ["urn:a:1", "bad uri"]}),
    ("a", {"type": "Relationship", "object": NGSI_NULL}),
    ("a", {"type": "GeoProperty", "value": 5}),
    ("a", {"type": "LanguageProperty", "languageMap": "en"}),
    ("a", {"type": "LanguageProperty", "languageMap": {"en": 5}}),
    ("a", {"type": "LanguageProperty", "value": "x"}),
    ("a", {"type": "VocabProperty", "vocab": 5}),
    ("a", {"type": "ListProperty", "valueList": 5}),
    ("a", {"type": "ListRelationship", "objectList": ["not a uri"]}),
    ("a", {"type": "ListRelationship", "objectList": 5}),
    ("a", {"type": "JsonProperty"}),
    ("a", {"type": "Property", "value": 1, "observedAt": "yesterday"}),
    ("a", {"type": "Property", "value": 1, "observedAt": "2024-01-01T10:00:00"}),   # no Z
    ("a", {"type": "Property", "value": 1, "observedAt": 17}),
    ("a", {"type": "Property", "value": 1, "datasetId": "not a uri"}),
    ("a", {"type": "Property", "value": 1, "unitCode": 5}),
    ("a", {"type": "Relationship", "object": "urn:a:1", "unitCode": "CEL"}),         # 4.5.3.3 prohibited
    ("a", {"type": "Property", "value": 1, "object": "urn:a:1"}),                     # 4.5.2.3 prohibited
    ("a", {"type": "Property", "value": 1, "sub": {"type": "Nope", "value": 1}}),    # bad sub-attribute
    ("a", {"type": "Property", "value": 1, "bad name": prop(1)}),
    ("datasetId", prop(1)),                                                           # 4.5.1 reserved
    ("a", []),                                                                        # empty instance array
])
def test_5_2_invalid_attribute_is_400(cli, name, attr):
    eid = uid()
    assert_problem(cli.post("/entities", {"id": eid, "type": "T", name: attr}), 400, "BadRequestData")
    cli.ensure_tenant()
    assert_problem(cli.get("/entities/" + eid), 404, "ResourceNotFound")


def test_4_6_3_datetime_with_fraction_and_comma_accepted(cli):
    """4.6.3: up to six fractional digits; a comma is accepted in requests."""
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1, observedAt="2024-01-01T10:00:00.123456Z"),
                      b=prop(2, observedAt="2024-01-01T10:00:00,5Z")))
    e = cli.entity(eid)
    assert canon(e["a"]["observedAt"]) == "2024-01-01T10:00:00.123456Z"
    assert canon(e["b"]["observedAt"]) == "2024-01-01T10:00:00.500000Z"


def test_4_6_4_datetime_representation_preserved(cli):
    """4.6.4: "implementations shall preserve the representation of the content of
    the values provided ... and return the original content"."""
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1, observedAt="2024-01-01T10:00:00Z"),
                      d=prop("2024-01-01T10:00:00Z")))
    e = cli.entity(eid)
    assert e["d"]["value"] == "2024-01-01T10:00:00Z"
    assert e["a"]["observedAt"] == "2024-01-01T10:00:00Z"


# ---- 6.5.3.1 retrieve -------------------------------------------------------------

def test_6_5_3_1_retrieve_unknown_is_404(cli):
    cli.ensure_tenant()
    assert_problem(cli.get("/entities/urn:ngsi-ld:T:nope"), 404, "ResourceNotFound")


def test_6_5_3_1_retrieve_invalid_id_is_400(cli):
    cli.ensure_tenant()
    assert_problem(cli.get("/entities/not-a-uri"), 400, "BadRequestData")


def test_6_5_3_1_retrieve_with_type_selector(cli):
    eid = uid()
    cli.create(entity(eid, ["A", "B"]))
    assert cli.get("/entities/" + eid, params={"type": "A"}).status_code == 200
    assert cli.get("/entities/" + eid, params={"type": "C|B"}).status_code == 200
    assert_problem(cli.get("/entities/" + eid, params={"type": "C"}), 404, "ResourceNotFound")


def test_4_5_2_3_format_concise(cli):
    eid = uid()
    cli.create(full_entity(eid))
    e = cli.entity(eid, params={"format": "concise"})
    expected = {
        "id": eid, "type": "Vehicle",
        "speed": {"value": 80, "unitCode": "KMH", "observedAt": "2024-01-01T10:00:00Z",
                  "accuracy": 0.5, "source": {"object": "urn:ngsi-ld:Sensor:1"}},
        "brand": "Mercedes",
        "location": {"type": "Point", "coordinates": [13.3986, 52.5547]},
        "isParked": {"object": "urn:ngsi-ld:Park:1", "observedAt": "2024-01-01T10:00:00Z"},
        "owners": {"object": ["urn:ngsi-ld:Person:1", "urn:ngsi-ld:Person:2"]},
        "name": {"languageMap": {"en": "Car", "de": "Auto", "fr": ["Voiture", "Bagnole"]}},
        "category": {"vocab": "sedan"},
        "periods": {"valueList": ["First", "Second", 3]},
        "route": {"objectList": ["urn:ngsi-ld:Stop:1", "urn:ngsi-ld:Stop:2"]},
        "raw": {"json": {"id": "85a6", "value": "Overstay", "nested": [1, {"a": None}]}},
        "address": {"city": "Berlin", "street": "Ulrich Strasse"},
    }
    # 4.5.22.3 allows objectList as objects or strings in concise form
    if isinstance(e.get("route", {}).get("objectList", [None])[0], dict):
        expected["route"] = {"objectList": [{"object": "urn:ngsi-ld:Stop:1"}, {"object": "urn:ngsi-ld:Stop:2"}]}
    # 4.5.2.3: a Property whose value is an object with "type" must be reified to stay lossless
    assert_json_equal(e, expected)


def test_4_5_2_3_concise_value_object_with_type_stays_reified(cli):
    eid = uid()
    cli.create(entity(eid, "T", p=prop({"type": "x", "v": 1})))
    e = cli.entity(eid, params={"format": "concise"})
    assert e["p"] == {"value": {"type": "x", "v": 1}}


@pytest.mark.parametrize("params", [{"format": "keyValues"}, {"format": "simplified"},
                                    {"options": "keyValues"}, {"options": "simplified"}])
def test_4_5_4_simplified(cli, params):
    eid = uid()
    cli.create(full_entity(eid))
    e = cli.entity(eid, params=params)
    assert_json_equal(e, {
        "id": eid, "type": "Vehicle",
        "speed": 80, "brand": "Mercedes",
        "location": {"type": "Point", "coordinates": [13.3986, 52.5547]},
        "isParked": "urn:ngsi-ld:Park:1",
        "owners": ["urn:ngsi-ld:Person:1", "urn:ngsi-ld:Person:2"],
        "name": {"languageMap": {"en": "Car", "de": "Auto", "fr": ["Voiture", "Bagnole"]}},
        "category": {"vocab": "sedan"},
        "periods": ["First", "Second", 3],
        "route": ["urn:ngsi-ld:Stop:1", "urn:ngsi-ld:Stop:2"],
        "raw": {"json": {"id": "85a6", "value": "Overstay", "nested": [1, {"a": None}]}},
        "address": {"city": "Berlin", "street": "Ulrich Strasse"},
    })


def test_4_5_4_simplified_multi_attribute_dataset(cli):
    eid = uid()
    cli.create(entity(eid, "T", name=[prop("David"), prop("Bowie", datasetId="urn:ngsi-ld:ds:1")]))
    e = cli.entity(eid, params={"format": "keyValues"})
    assert_json_equal(e["name"], {"dataset": {"@none": "David", "urn:ngsi-ld:ds:1": "Bowie"}})


def test_6_3_7_format_normalized_explicit(cli):
    eid = uid()
    cli.create(full_entity(eid))
    assert_json_equal(cli.entity(eid, params={"format": "normalized"}), full_entity(eid))


def test_6_3_7_unknown_format_is_400(cli):
    eid = uid()
    cli.create(entity(eid, "T"))
    r = cli.get("/entities/" + eid, params={"format": "fancy"})
    assert r.status_code == 400


def test_6_3_11_sys_attrs(cli):
    eid = uid()
    before = time.time()
    cli.create(entity(eid, "T", a=prop(1, sub=prop(2)), r=rel("urn:ngsi-ld:X:1")))
    e = cli.entity(eid, params={"options": "sysAttrs"})
    for node in (e, e["a"], e["r"], e["a"]["sub"]):
        assert DATETIME_RE.match(node["createdAt"]), node
        assert DATETIME_RE.match(node["modifiedAt"]), node
    assert e["createdAt"][:4] == time.strftime("%Y", time.gmtime(before))
    assert_json_equal(strip_sys(e), entity(eid, "T", a=prop(1, sub=prop(2)), r=rel("urn:ngsi-ld:X:1")))
    # not shown unless asked (5.2.2)
    assert "createdAt" not in cli.entity(eid)


def test_6_3_11_sys_attrs_with_key_values(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1)))
    e = cli.entity(eid, params={"options": "sysAttrs,keyValues"})
    assert e["a"] == 1
    assert DATETIME_RE.match(e["createdAt"])


def test_4_21_pick(cli):
    eid = uid()
    cli.create(full_entity(eid))
    assert_json_equal(cli.entity(eid, params={"pick": "speed"}), {"speed": full_entity(eid)["speed"]})
    assert_json_equal(cli.entity(eid, params={"pick": "id,brand|isParked"}),
                      {"id": eid, "brand": prop("Mercedes"), "isParked": full_entity(eid)["isParked"]})
    assert_json_equal(cli.entity(eid, params={"pick": "id,type"}), {"id": eid, "type": "Vehicle"})


def test_4_21_omit(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1), b=prop(2), c=prop(3)))
    assert_json_equal(cli.entity(eid, params={"omit": "b,c"}), entity(eid, "T", a=prop(1)))
    assert_json_equal(cli.entity(eid, params={"omit": "id,type"}), {"a": prop(1), "b": prop(2), "c": prop(3)})


def test_6_5_3_1_attrs(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1), b=prop(2), c=prop(3)))
    assert_json_equal(cli.entity(eid, params={"attrs": "a,c"}), entity(eid, "T", a=prop(1), c=prop(3)))
    # Table 6.5.3.1-1: none of the attrs present -> 404
    assert_problem(cli.get("/entities/" + eid, params={"attrs": "zzz"}), 404, "ResourceNotFound")


def test_4_15_lang_on_retrieve(cli):
    eid = uid()
    cli.create(entity(eid, "T", name=langprop({"en": "Car", "de": "Auto"}), other=prop(1)))
    e = cli.entity(eid, params={"lang": "de"})
    assert_json_equal(e["name"], {"type": "Property", "value": "Auto", "lang": "de"})
    assert e["other"] == prop(1)
    e = cli.entity(eid, params={"lang": "fr-CH,fr;q=0.9,en;q=0.8"})
    assert_json_equal(e["name"], {"type": "Property", "value": "Car", "lang": "en"})
    # no matching language: any supported one, and lang says which
    e = cli.entity(eid, params={"lang": "ja"})
    assert e["name"]["type"] == "Property"
    assert (e["name"]["lang"], e["name"]["value"]) in (("en", "Car"), ("de", "Auto"))


def test_4_15_lang_with_key_values(cli):
    eid = uid()
    cli.create(entity(eid, "T", name=langprop({"en": "Car", "de": "Auto"})))
    assert cli.entity(eid, params={"lang": "en", "format": "keyValues"})["name"] == "Car"


def test_6_3_15_geojson_feature(cli):
    eid = uid()
    cli.create(entity(eid, "Vehicle", speed=prop(80), location=point(1, 2), other=geo("Point", [3, 4])))
    r = cli.get("/entities/" + eid, accept="application/geo+json")
    assert r.status_code == 200
    assert media_type(r) == "application/geo+json"
    f = r.json()
    assert f["type"] == "Feature"
    assert f["id"] == eid
    assert f["geometry"] == {"type": "Point", "coordinates": [1, 2]}
    assert f["properties"]["type"] == "Vehicle"
    assert f["properties"]["speed"] == prop(80)
    assert f["properties"]["location"] == point(1, 2)
    # 6.3.6: geo+json without Prefer -> @context in the body
    assert "@context" in f
    r = cli.get("/entities/" + eid, accept="application/geo+json", params={"geometryProperty": "other"})
    assert r.json()["geometry"] == {"type": "Point", "coordinates": [3, 4]}
    r = cli.get("/entities/" + eid, accept="application/geo+json", params={"format": "keyValues"})
    assert r.json()["properties"]["speed"] == 80


def test_4_5_16_1_geojson_without_location_has_null_geometry(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1)))
    f = cli.get("/entities/" + eid, accept="application/geo+json").json()
    assert "geometry" in f and f["geometry"] is None


def test_5_7_1_4_geometry_property_without_geojson_is_400(cli):
    eid = uid()
    cli.create(entity(eid, "T", location=point(1, 2)))
    assert_problem(cli.get("/entities/" + eid, params={"geometryProperty": "location"}), 400, "BadRequestData")


def test_6_3_20_unknown_parameter_on_retrieve_is_400(cli):
    eid = uid()
    cli.create(entity(eid, "T"))
    assert_problem(cli.get("/entities/" + eid, params={"bogus": "1"}), 400, "InvalidRequest")
    assert_problem(cli.get("/entities/" + eid, params={"options": "bogus"}), 400, "InvalidRequest")


# ---- 6.5.3.2 delete -----------------------------------------------------------

def test_6_5_3_2_delete(cli):
    eid = uid()
    cli.create(entity(eid, "T"))
    r = cli.delete("/entities/" + eid)
    assert r.status_code == 204
    assert_no_body(r)
    assert_problem(cli.get("/entities/" + eid), 404, "ResourceNotFound")
    assert_problem(cli.delete("/entities/" + eid), 404, "ResourceNotFound")
    # the id can be used again
    cli.create(entity(eid, "T2"))
    assert cli.entity(eid)["type"] == "T2"


def test_6_5_3_2_delete_invalid_id_is_400(cli):
    cli.ensure_tenant()
    assert_problem(cli.delete("/entities/notauri"), 400, "BadRequestData")


def test_6_5_3_2_delete_with_wrong_type_is_404(cli):
    eid = uid()
    cli.create(entity(eid, "T"))
    assert_problem(cli.delete("/entities/" + eid, params={"type": "Other"}), 404, "ResourceNotFound")
    assert cli.delete("/entities/" + eid, params={"type": "T"}).status_code == 204


# ---- 6.5.3.3 replace ----------------------------------------------------------

def test_6_5_3_3_replace(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1), b=prop(2)))
    created = cli.entity(eid, params={"options": "sysAttrs"})["createdAt"]
    time.sleep(0.01)
    r = cli.put("/entities/" + eid, entity(eid, "T2", c=prop(3)))
    assert r.status_code == 204, r.text
    assert_no_body(r)
    assert_json_equal(cli.entity(eid), entity(eid, "T2", c=prop(3)))
    # 5.6.18.4: createdAt of the entity unchanged
    assert cli.entity(eid, params={"options": "sysAttrs"})["createdAt"] == created


def test_6_5_3_3_replace_without_id_in_body(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1)))
    r = cli.put("/entities/" + eid, {"type": "T", "b": prop(2)})
    assert r.status_code == 204, r.text
    assert_json_equal(cli.entity(eid), entity(eid, "T", b=prop(2)))


def test_6_5_3_3_replace_unknown_is_404(cli):
    cli.ensure_tenant()
    eid = uid()
    assert_problem(cli.put("/entities/" + eid, entity(eid, "T")), 404, "ResourceNotFound")


def test_6_5_3_3_replace_with_null_is_400(cli):
    """5.6.18.4: NGSI-LD Nulls are not supported by Replace Entity."""
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1)))
    assert_problem(cli.put("/entities/" + eid, entity(eid, "T", a=prop(NGSI_NULL))), 400, "BadRequestData")
    assert cli.entity(eid)["a"] == prop(1)


def test_6_5_3_3_replace_with_invalid_content_changes_nothing(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1)))
    assert_problem(cli.put("/entities/" + eid, entity(eid, "T", b={"type": "Relationship", "object": "x y"})),
                   400, "BadRequestData")
    assert_json_equal(cli.entity(eid), entity(eid, "T", a=prop(1)))


# ---- 6.5.3.4 merge -------------------------------------------------------------

def test_6_5_3_4_merge_appends_and_merges(cli):
    """5.5.12 example 1: value and observedAt updated, unitCode kept."""
    eid = uid()
    cli.create(entity(eid, "T", temperature=prop(25, unitCode="CEL", observedAt="2022-03-14T01:59:26.535Z"),
                      other=prop("x")))
    r = cli.patch("/entities/" + eid, {"temperature": prop(100, observedAt="2022-03-14T13:00:00.000Z"),
                                       "newone": prop(1)})
    assert r.status_code == 204, r.text
    assert_no_body(r)
    assert_json_equal(cli.entity(eid), entity(
        eid, "T", temperature=prop(100, unitCode="CEL", observedAt="2022-03-14T13:00:00.000Z"),
        other=prop("x"), newone=prop(1)))


def test_5_5_12_merge_deep_into_value_with_null(cli):
    """5.5.12 example 2: RFC 7396 inside the value, NGSI-LD Null removes a member."""
    eid = uid()
    cli.create(entity(eid, "T", address=prop({"street": "Stra\u00dfe des 17. Juni", "city": "Berlin",
                                              "country": "Germany"})))
    r = cli.patch("/entities/" + eid, {"address": prop({"street": "Pariser Platz", "country": NGSI_NULL})})
    assert r.status_code == 204, r.text
    assert cli.entity(eid)["address"] == prop({"street": "Pariser Platz", "city": "Berlin"})


@pytest.mark.parametrize("null", [NGSI_NULL, prop(NGSI_NULL), {"value": NGSI_NULL}])
def test_6_5_3_4_merge_null_deletes_attribute(cli, null):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1), b=prop(2)))
    r = cli.patch("/entities/" + eid, {"a": null})
    assert r.status_code == 204, r.text
    assert_json_equal(cli.entity(eid), entity(eid, "T", b=prop(2)))


def test_6_5_3_4_merge_null_deletes_relationship_and_language_property(cli):
    eid = uid()
    cli.create(entity(eid, "T", r=rel("urn:ngsi-ld:X:1"), l=langprop({"en": "a"}), lr=listrel(["urn:a:1"]),
                      lp=listprop([1]), keep=prop(1)))
    r = cli.patch("/entities/" + eid, {
        "r": {"type": "Relationship", "object": NGSI_NULL},
        "l": {"type": "LanguageProperty", "languageMap": {"@none": NGSI_NULL}},
        "lr": {"type": "ListRelationship", "objectList": [NGSI_NULL]},
        "lp": {"type": "ListProperty", "valueList": [NGSI_NULL]},
    })
    assert r.status_code == 204, r.text
    assert_json_equal(cli.entity(eid), entity(eid, "T", keep=prop(1)))


def test_6_3_4_merge_with_merge_patch_json(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1)))
    r = cli.patch("/entities/" + eid, {"a": prop(2)}, ctype="application/merge-patch+json")
    assert r.status_code == 204, r.text
    assert cli.entity(eid)["a"] == prop(2)


def test_6_5_3_4_merge_key_values_keeps_attribute_type(cli):
    eid = uid()
    cli.create(entity(eid, "T", r=rel("urn:ngsi-ld:X:1"), n=prop(1, unitCode="CEL")))
    r = cli.patch("/entities/" + eid, {"r": "urn:ngsi-ld:X:2", "n": 5}, params={"format": "keyValues"})
    assert r.status_code == 204, r.text
    e = cli.entity(eid)
    assert e["r"] == rel("urn:ngsi-ld:X:2")
    assert e["n"] == prop(5, unitCode="CEL")


def test_6_5_3_4_merge_lang_parameter(cli):
    eid = uid()
    cli.create(entity(eid, "T", name=langprop({"en": "Car", "de": "Auto"})))
    r = cli.patch("/entities/" + eid, {"name": "Voiture"}, params={"lang": "fr"})
    assert r.status_code == 204, r.text
    assert cli.entity(eid)["name"] == langprop({"en": "Car", "de": "Auto", "fr": "Voiture"})


def test_6_5_3_4_merge_observed_at_parameter(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1, observedAt="2020-01-01T00:00:00Z"), b=prop(1)))
    r = cli.patch("/entities/" + eid, {"a": prop(2), "b": prop(2)},
                  params={"observedAt": "2024-06-01T00:00:00Z"})
    assert r.status_code == 204, r.text
    e = cli.entity(eid)
    assert e["a"] == prop(2, observedAt="2024-06-01T00:00:00Z")
    assert e["b"] == prop(2)


def test_6_5_3_4_merge_adds_types_and_replaces_scope(cli):
    eid = uid()
    cli.create(entity(eid, "A", scope="/Old"))
    r = cli.patch("/entities/" + eid, {"type": "B", "scope": "/New"})
    assert r.status_code == 204, r.text
    e = cli.entity(eid)
    assert sorted(e["type"]) == ["A", "B"]
    assert e["scope"] == "/New"


def test_6_5_3_4_merge_dataset_instances(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=[prop(1), prop(2, datasetId="urn:ngsi-ld:ds:1")]))
    r = cli.patch("/entities/" + eid, {"a": [prop(20, datasetId="urn:ngsi-ld:ds:1"),
                                             prop(30, datasetId="urn:ngsi-ld:ds:2")]})
    assert r.status_code == 204, r.text
    assert_json_equal(cli.entity(eid)["a"], [prop(1), prop(20, datasetId="urn:ngsi-ld:ds:1"),
                                             prop(30, datasetId="urn:ngsi-ld:ds:2")], unordered=True)


def test_6_5_3_4_merge_unknown_entity_is_404(cli):
    cli.ensure_tenant()
    assert_problem(cli.patch("/entities/" + uid(), {"a": prop(1)}), 404, "ResourceNotFound")


def test_6_5_3_4_merge_invalid_is_400_and_changes_nothing(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1)))
    assert_problem(cli.patch("/entities/" + eid, {"a": prop(2), "b": {"type": "Bad", "value": 1}}),
                   400, "BadRequestData")
    assert_json_equal(cli.entity(eid), entity(eid, "T", a=prop(1)))


def test_6_5_3_4_merge_updates_modified_at_only(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1)))
    e0 = cli.entity(eid, params={"options": "sysAttrs"})
    time.sleep(0.01)
    assert cli.patch("/entities/" + eid, {"a": prop(2)}).status_code == 204
    e1 = cli.entity(eid, params={"options": "sysAttrs"})
    assert e1["createdAt"] == e0["createdAt"]
    assert e1["a"]["createdAt"] == e0["a"]["createdAt"]
    assert e1["a"]["modifiedAt"] > e0["a"]["modifiedAt"]
    assert e1["modifiedAt"] > e0["modifiedAt"]


def test_6_5_3_4_merge_key_values_must_fit_the_attribute(cli):
    """5.6.17.4 with format=keyValues: a bare value keeps the attribute's type, so it
    must fit it (a LanguageProperty wants {"languageMap": ...}); nothing changes otherwise."""
    eid = uid()
    cli.create(entity(eid, "T", name=langprop({"en": "Main"}), r=rel("urn:ngsi-ld:X:1")))
    assert_problem(cli.patch("/entities/" + eid, {"name": "Broadway"}, params={"format": "keyValues"}),
                   400, "BadRequestData")
    assert_problem(cli.patch("/entities/" + eid, {"r": 42}, params={"format": "keyValues"}), 400, "BadRequestData")
    e = cli.entity(eid)
    assert e["name"] == langprop({"en": "Main"})
    assert e["r"] == rel("urn:ngsi-ld:X:1")
    r = cli.patch("/entities/" + eid, {"name": {"languageMap": {"fr": "Principale"}}}, params={"format": "keyValues"})
    assert r.status_code == 204, r.text
    assert cli.entity(eid)["name"]["languageMap"]["fr"] == "Principale"
