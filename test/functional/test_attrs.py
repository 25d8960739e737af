"""Attribute operations: 6.6.3.1 append, 6.6.3.2 update, 6.7.3.1 partial
update, 6.7.3.2 delete, 6.7.3.3 replace (behaviour of 5.6.2-5.6.5, 5.6.19)."""

import time

from ngsi import (DEFAULT_VOCAB, NGSI_NULL, assert_json_equal, assert_no_body, assert_problem,
                  entity, langprop, media_type, prop, rel, uid)


# ---- 6.6.3.1 append ---------------------------------------------------------

def test_6_6_3_1_append_adds_and_overwrites(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1, unitCode="CEL"), b=prop(2)))
    r = cli.post("/entities/%s/attrs" % eid, {"a": prop(10), "c": rel("urn:ngsi-ld:X:1")})
    assert r.status_code == 204, r.text
    assert_no_body(r)
    assert_json_equal(cli.entity(eid), entity(eid, "T", a=prop(10), b=prop(2), c=rel("urn:ngsi-ld:X:1")))


def test_6_6_3_1_append_keeps_created_at(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1)))
    c0 = cli.entity(eid, params={"options": "sysAttrs"})["a"]["createdAt"]
    time.sleep(0.01)
    assert cli.post("/entities/%s/attrs" % eid, {"a": prop(2)}).status_code == 204
    a = cli.entity(eid, params={"options": "sysAttrs"})["a"]
    assert a["createdAt"] == c0
    assert a["modifiedAt"] > c0


def test_6_6_3_1_append_no_overwrite_is_207_with_not_updated(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1)))
    r = cli.post("/entities/%s/attrs" % eid, {"a": prop(10), "b": prop(2)}, params={"options": "noOverwrite"})
    assert r.status_code == 207, r.text
    assert media_type(r) == "application/json"
    body = r.json()
    # 6.3.6: partial-success bodies use Fully Qualified Names only
    assert body["updated"] == [DEFAULT_VOCAB + "b"]
    assert len(body["notUpdated"]) == 1
    nu = body["notUpdated"][0]
    assert nu["attributeName"] == DEFAULT_VOCAB + "a"
    assert isinstance(nu["reason"], str) and nu["reason"]
    assert_json_equal(cli.entity(eid), entity(eid, "T", a=prop(1), b=prop(2)))


def test_6_6_3_1_append_no_overwrite_all_new_is_204(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1)))
    r = cli.post("/entities/%s/attrs" % eid, {"b": prop(2)}, params={"options": "noOverwrite"})
    assert r.status_code == 204, r.text


def test_5_6_3_append_dataset_instance_beside_default(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1)))
    r = cli.post("/entities/%s/attrs" % eid, {"a": prop(2, datasetId="urn:ngsi-ld:ds:1")})
    assert r.status_code == 204, r.text
    assert_json_equal(cli.entity(eid)["a"], [prop(1), prop(2, datasetId="urn:ngsi-ld:ds:1")], unordered=True)


def test_5_6_3_append_adds_types_and_scope(cli):
    eid = uid()
    cli.create(entity(eid, "A", scope="/X"))
    r = cli.post("/entities/%s/attrs" % eid, {"type": "B", "scope": "/Y"}, params={"options": "noOverwrite"})
    assert r.status_code in (204, 207), r.text
    e = cli.entity(eid)
    assert sorted(e["type"]) == ["A", "B"]
    assert sorted(e["scope"]) == ["/X", "/Y"]


def test_6_6_3_1_append_unknown_entity_is_404(cli):
    cli.ensure_tenant()
    assert_problem(cli.post("/entities/%s/attrs" % uid(), {"a": prop(1)}), 404, "ResourceNotFound")


def test_6_6_3_1_append_invalid_is_400_and_changes_nothing(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1)))
    assert_problem(cli.post("/entities/%s/attrs" % eid, {"b": prop(2), "c": {"type": "Relationship"}}),
                   400, "BadRequestData")
    assert_json_equal(cli.entity(eid), entity(eid, "T", a=prop(1)))


def test_6_6_3_1_append_invalid_entity_id_is_400(cli):
    cli.ensure_tenant()
    assert_problem(cli.post("/entities/notauri/attrs", {"a": prop(1)}), 400, "BadRequestData")


def test_6_6_3_1_append_with_type_selector(cli):
    eid = uid()
    cli.create(entity(eid, "T"))
    assert_problem(cli.post("/entities/%s/attrs" % eid, {"a": prop(1)}, params={"type": "U"}),
                   404, "ResourceNotFound")
    assert cli.post("/entities/%s/attrs" % eid, {"a": prop(1)}, params={"type": "T"}).status_code == 204


# ---- 6.6.3.2 update ---------------------------------------------------------

def test_6_6_3_2_update_replaces_whole_attribute(cli):
    """5.5.8 example 2: the whole attribute is replaced (unitCode goes)."""
    eid = uid()
    cli.create(entity(eid, "T", temperature=prop(25, unitCode="CEL", observedAt="2022-03-14T01:59:26.535Z"),
                      other=prop(1)))
    r = cli.patch("/entities/%s/attrs" % eid, {"temperature": prop(100, observedAt="2022-03-14T13:00:00.000Z")})
    assert r.status_code == 204, r.text
    assert_json_equal(cli.entity(eid), entity(eid, "T", temperature=prop(100, observedAt="2022-03-14T13:00:00.000Z"),
                                              other=prop(1)))


def _near(cli, lon, lat, typ):
    r = cli.get("/entities", params={"type": typ, "georel": "near;maxDistance==1000", "geometry": "Point",
                                     "coordinates": "[%s,%s]" % (lon, lat)})
    assert r.status_code == 200, r.text
    return sorted(e["id"] for e in r.json())


def test_6_6_3_2_update_keeps_and_moves_the_location_a_geo_query_sees(cli):
    """A write indexes each version's geometry once per reserve and update (corDB's geo index
    remembers the bboxes between the two): an update of other attributes keeps the entity where it
    was, an update of the location moves it, and a batch of several entities puts each in its place."""
    typ, a, b = "Geo%s" % uid().split(":")[-1], uid(), uid()

    def loc(lon, lat):
        return {"type": "GeoProperty", "value": {"type": "Point", "coordinates": [lon, lat]}}
    cli.create(entity(a, typ, location=loc(10, 50), speed=prop(1)))
    for i in range(3):
        r = cli.patch("/entities/%s/attrs" % a, {"speed": prop(i, observedAt="2024-01-01T00:00:0%d.000Z" % i)})
        assert r.status_code == 204, r.text
    assert _near(cli, 10, 50, typ) == [a]
    r = cli.patch("/entities/%s/attrs" % a, {"location": loc(20, 40)})
    assert r.status_code == 204, r.text
    assert _near(cli, 10, 50, typ) == [] and _near(cli, 20, 40, typ) == [a]
    r = cli.post("/entityOperations/upsert", [entity(a, typ, location=loc(30, 30)),
                                             entity(b, typ, location=loc(10, 50))])
    assert r.status_code in (201, 204), r.text
    assert _near(cli, 30, 30, typ) == [a] and _near(cli, 10, 50, typ) == [b] and _near(cli, 20, 40, typ) == []


def test_6_6_3_2_update_of_one_location_instance_moves_it_alone(cli):
    """corDB's geo index leaves an entity's cells alone when a write keeps every instance of a
    GeoProperty equal (a PATCH of other attributes, or of the same Point again); a PATCH of one
    instance (datasetId) of two moves that one and keeps the other where it was."""
    typ, a = "Geo%s" % uid().split(":")[-1], uid()

    def loc(lon, lat, ds=None):
        v = {"type": "GeoProperty", "value": {"type": "Point", "coordinates": [lon, lat]}}
        if ds:
            v["datasetId"] = ds
        return v
    cli.create(entity(a, typ, location=[loc(10, 50), loc(20, 40, "urn:ngsi-ld:d:1")], speed=prop(1)))
    assert _near(cli, 10, 50, typ) == [a] and _near(cli, 20, 40, typ) == [a]
    r = cli.patch("/entities/%s/attrs" % a, {"location": loc(10, 50)})
    assert r.status_code == 204, r.text
    assert _near(cli, 10, 50, typ) == [a] and _near(cli, 20, 40, typ) == [a]
    r = cli.patch("/entities/%s/attrs" % a, {"location": loc(30, 30, "urn:ngsi-ld:d:1")})
    assert r.status_code == 204, r.text
    assert _near(cli, 10, 50, typ) == [a] and _near(cli, 30, 30, typ) == [a] and _near(cli, 20, 40, typ) == []
    r = cli.patch("/entities/%s/attrs" % a, {"speed": prop(2)})
    assert r.status_code == 204, r.text
    assert _near(cli, 10, 50, typ) == [a] and _near(cli, 30, 30, typ) == [a]


def test_5_6_2_update_appends_non_existing(cli):
    """5.6.2.4 (V1.9.1): an attribute the entity lacks is appended."""
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1)))
    r = cli.patch("/entities/%s/attrs" % eid, {"a": prop(2), "b": prop(3)})
    assert r.status_code == 204, r.text
    assert_json_equal(cli.entity(eid), entity(eid, "T", a=prop(2), b=prop(3)))


def test_5_5_8_update_with_null_deletes_attribute(cli):
    """5.5.8 example 3."""
    eid = uid()
    cli.create(entity(eid, "T", temperature=prop(25), other=prop(1)))
    r = cli.patch("/entities/%s/attrs" % eid, {"temperature": prop(NGSI_NULL)})
    assert r.status_code == 204, r.text
    assert_json_equal(cli.entity(eid), entity(eid, "T", other=prop(1)))


def test_5_6_2_update_dataset_instance(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=[prop(1), prop(2, datasetId="urn:ngsi-ld:ds:1")]))
    r = cli.patch("/entities/%s/attrs" % eid, {"a": prop(20, datasetId="urn:ngsi-ld:ds:1")})
    assert r.status_code == 204, r.text
    assert_json_equal(cli.entity(eid)["a"], [prop(1), prop(20, datasetId="urn:ngsi-ld:ds:1")], unordered=True)
    r = cli.patch("/entities/%s/attrs" % eid, {"a": prop(NGSI_NULL, datasetId="urn:ngsi-ld:ds:1")})
    assert r.status_code == 204, r.text
    assert_json_equal(cli.entity(eid)["a"], prop(1))


def test_6_6_3_2_update_unknown_entity_is_404(cli):
    cli.ensure_tenant()
    assert_problem(cli.patch("/entities/%s/attrs" % uid(), {"a": prop(1)}), 404, "ResourceNotFound")


def test_6_6_3_2_update_invalid_is_400(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1)))
    assert_problem(cli.patch("/entities/%s/attrs" % eid, {"a": {"type": "Property"}}), 400, "BadRequestData")
    assert_problem(cli.patch("/entities/%s/attrs" % eid, [prop(1)]), 400, "BadRequestData")
    assert cli.entity(eid)["a"] == prop(1)


# ---- 6.7.3.1 partial attribute update -----------------------------------------

def test_6_7_3_1_partial_update_keeps_other_members(cli):
    """5.5.8 example 1."""
    eid = uid()
    cli.create(entity(eid, "T", temperature=prop(25, unitCode="CEL", observedAt="2022-03-14T01:59:26.535Z")))
    r = cli.patch("/entities/%s/attrs/temperature" % eid,
                  {"type": "Property", "value": 100, "observedAt": "2022-03-14T13:00:00.000Z"})
    assert r.status_code == 204, r.text
    assert_no_body(r)
    assert_json_equal(cli.entity(eid)["temperature"],
                      prop(100, unitCode="CEL", observedAt="2022-03-14T13:00:00.000Z"))


def test_6_7_3_1_partial_update_concise_value_only(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1, unitCode="CEL", sub=prop("s"))))
    r = cli.patch("/entities/%s/attrs/a" % eid, {"value": 2})
    assert r.status_code == 204, r.text
    assert_json_equal(cli.entity(eid)["a"], prop(2, unitCode="CEL", sub=prop("s")))


def test_5_6_4_partial_update_deletes_sub_attribute_with_null(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1, sub=prop("s"), keep=prop("k"))))
    r = cli.patch("/entities/%s/attrs/a" % eid, {"sub": prop(NGSI_NULL)})
    assert r.status_code == 204, r.text
    assert_json_equal(cli.entity(eid)["a"], prop(1, keep=prop("k")))


def test_5_6_4_partial_update_cannot_change_type(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1)))
    assert_problem(cli.patch("/entities/%s/attrs/a" % eid, rel("urn:ngsi-ld:X:1")), 400, "BadRequestData")
    assert cli.entity(eid)["a"] == prop(1)


def test_5_6_4_partial_update_without_type_is_checked_against_the_stored_kind(cli):
    """A fragment without "type" takes the stored attribute's kind, so its members must fit that
    kind as in a typed attribute (5.2.6: objectType only in a Relationship; unitCode not in a
    Relationship): 400 and nothing changed, also for a sub-attribute and a merge (found by
    fuzz_request: the Property kept an objectType no create would accept)."""
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1, sub=prop("s")), r=rel("urn:ngsi-ld:X:1")))
    before = cli.entity(eid)
    for path, body in (("a", {"value": 60, "objectType": "Car"}),
                       ("a", {"sub": {"objectType": "Car"}}),
                       ("r", {"unitCode": "CEL"})):
        assert_problem(cli.patch("/entities/%s/attrs/%s" % (eid, path), body), 400, "BadRequestData")
    assert_problem(cli.patch("/entities/%s" % eid, {"a": {"objectType": "Car"}}), 400, "BadRequestData")
    assert_json_equal(cli.entity(eid), before)
    r = cli.patch("/entities/%s/attrs/r" % eid, {"objectType": "Car"})
    assert r.status_code == 204, r.text
    assert cli.entity(eid)["r"]["objectType"] == "Car"


def test_5_6_4_partial_update_of_scope_is_400(cli):
    eid = uid()
    cli.create(entity(eid, "T", scope="/A"))
    assert_problem(cli.patch("/entities/%s/attrs/scope" % eid, {"value": "/B"}), 400, "BadRequestData")


def test_6_7_3_1_partial_update_unknown_attr_or_entity_is_404(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1)))
    assert_problem(cli.patch("/entities/%s/attrs/zz" % eid, prop(1)), 404, "ResourceNotFound")
    assert_problem(cli.patch("/entities/%s/attrs/a" % uid(), prop(1)), 404, "ResourceNotFound")


def test_5_6_4_partial_update_dataset_instance(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=[prop(1), prop(2, datasetId="urn:ngsi-ld:ds:1")]))
    r = cli.patch("/entities/%s/attrs/a" % eid, {"value": 22, "datasetId": "urn:ngsi-ld:ds:1"})
    assert r.status_code == 204, r.text
    assert_json_equal(cli.entity(eid)["a"], [prop(1), prop(22, datasetId="urn:ngsi-ld:ds:1")], unordered=True)
    # an instance that does not exist -> 404 (5.6.4.4)
    assert_problem(cli.patch("/entities/%s/attrs/a" % eid, {"value": 1, "datasetId": "urn:ngsi-ld:ds:9"}),
                   404, "ResourceNotFound")


def test_5_6_4_partial_update_language_property(cli):
    eid = uid()
    cli.create(entity(eid, "T", name=langprop({"en": "Car"})))
    r = cli.patch("/entities/%s/attrs/name" % eid, {"languageMap": {"en": "Auto", "de": "Wagen"}})
    assert r.status_code == 204, r.text
    assert cli.entity(eid)["name"]["languageMap"] == {"en": "Auto", "de": "Wagen"}


# ---- 6.7.3.2 delete attribute ---------------------------------------------------

def test_6_7_3_2_delete_attribute(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1), b=prop(2)))
    r = cli.delete("/entities/%s/attrs/a" % eid)
    assert r.status_code == 204
    assert_no_body(r)
    assert_json_equal(cli.entity(eid), entity(eid, "T", b=prop(2)))
    assert_problem(cli.delete("/entities/%s/attrs/a" % eid), 404, "ResourceNotFound")


def test_6_7_3_2_delete_attribute_unknown_entity_is_404(cli):
    cli.ensure_tenant()
    assert_problem(cli.delete("/entities/%s/attrs/a" % uid()), 404, "ResourceNotFound")


def test_6_7_3_2_delete_default_instance_only(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=[prop(1), prop(2, datasetId="urn:ngsi-ld:ds:1")]))
    assert cli.delete("/entities/%s/attrs/a" % eid).status_code == 204
    assert_json_equal(cli.entity(eid)["a"], prop(2, datasetId="urn:ngsi-ld:ds:1"))


def test_6_7_3_2_delete_by_dataset_id(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=[prop(1), prop(2, datasetId="urn:ngsi-ld:ds:1"),
                                   prop(3, datasetId="urn:ngsi-ld:ds:2")]))
    r = cli.delete("/entities/%s/attrs/a" % eid, params={"datasetId": "urn:ngsi-ld:ds:1"})
    assert r.status_code == 204, r.text
    assert_json_equal(cli.entity(eid)["a"], [prop(1), prop(3, datasetId="urn:ngsi-ld:ds:2")], unordered=True)
    assert_problem(cli.delete("/entities/%s/attrs/a" % eid, params={"datasetId": "urn:ngsi-ld:ds:1"}),
                   404, "ResourceNotFound")


def test_6_7_3_2_delete_all_instances(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=[prop(1), prop(2, datasetId="urn:ngsi-ld:ds:1")], b=prop(0)))
    r = cli.delete("/entities/%s/attrs/a" % eid, params={"deleteAll": "true"})
    assert r.status_code == 204, r.text
    assert_json_equal(cli.entity(eid), entity(eid, "T", b=prop(0)))


def test_5_6_5_delete_scope(cli):
    eid = uid()
    cli.create(entity(eid, "T", scope="/A", a=prop(1)))
    assert cli.delete("/entities/%s/attrs/scope" % eid).status_code == 204
    assert_json_equal(cli.entity(eid), entity(eid, "T", a=prop(1)))


def test_6_7_3_2_delete_invalid_dataset_id_is_400(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1)))
    assert_problem(cli.delete("/entities/%s/attrs/a" % eid, params={"datasetId": "not a uri"}),
                   400, "BadRequestData")


# ---- 6.7.3.3 replace attribute ---------------------------------------------------

def test_6_7_3_3_replace_attribute(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1, unitCode="CEL", sub=prop(2)), b=prop(0)))
    c0 = cli.entity(eid, params={"options": "sysAttrs"})["a"]["createdAt"]
    r = cli.put("/entities/%s/attrs/a" % eid, prop(5))
    assert r.status_code == 204, r.text
    assert_no_body(r)
    e = cli.entity(eid, params={"options": "sysAttrs"})
    assert e["a"]["createdAt"] == c0
    assert_json_equal(cli.entity(eid), entity(eid, "T", a=prop(5), b=prop(0)))


def test_6_7_3_3_replace_attribute_may_change_kind(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1)))
    assert cli.put("/entities/%s/attrs/a" % eid, rel("urn:ngsi-ld:X:1")).status_code == 204
    assert cli.entity(eid)["a"] == rel("urn:ngsi-ld:X:1")


def test_6_7_3_3_replace_attribute_errors(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1), scope="/A"))
    assert_problem(cli.put("/entities/%s/attrs/zz" % eid, prop(1)), 404, "ResourceNotFound")
    assert_problem(cli.put("/entities/%s/attrs/a" % uid(), prop(1)), 404, "ResourceNotFound")
    assert_problem(cli.put("/entities/%s/attrs/scope" % eid, prop("/B")), 400, "BadRequestData")
    assert_problem(cli.put("/entities/%s/attrs/a" % eid, {"type": "Property"}), 400, "BadRequestData")
    assert cli.entity(eid)["a"] == prop(1)


# ---- regressions found by fuzzing (test/fuzz/fuzz_request.c) ------------------

def test_5_6_4_partial_update_new_sub_attribute_must_be_whole(cli):
    """5.6.4: a sub-attribute that does not exist yet is added whole; without its
    type or value it is BadRequestData and nothing changes."""
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1)))
    assert_problem(cli.patch("/entities/%s/attrs/a" % eid, {"newSub": {"unitCode": "X"}}), 400, "BadRequestData")
    assert cli.entity(eid)["a"] == prop(1)


def test_5_5_4_null_inside_an_object_value_is_not_stored(cli):
    """5.6.2.4 / RFC 7396: an NGSI-LD Null member of an object value deletes
    nothing and is never stored, also when the old value was not an object."""
    eid = uid()
    cli.create(entity(eid, "T", a=prop("text"), b=prop({"x": 1, "y": 2})))
    r = cli.patch("/entities/%s/attrs" % eid, {"a": {"type": "Property", "value": {"k": NGSI_NULL, "m": 1}},
                                               "c": {"type": "Property", "value": {"k": NGSI_NULL, "n": 2}}})
    assert r.status_code == 204, r.text
    e = cli.entity(eid)
    assert e["a"] == prop({"m": 1})
    assert e["c"] == prop({"n": 2})
    r = cli.patch("/entities/" + eid, {"b": {"type": "Property", "value": {"x": NGSI_NULL}}})
    assert r.status_code == 204, r.text
    assert cli.entity(eid)["b"] == prop({"y": 2})
