"""Attribute instances (4.5.5): the datasetId parameter of Retrieve Entity
(5.7.1.4, Table 6.5.3.1-1) and Query Entities (5.7.2.4, Table 6.4.3.2-1, the
Query member of 5.2.23), and the NGSI-LD Null of Partial Attribute Update
(5.6.4.4, 5.5.8) and Update Attributes (5.6.2.4)."""

from ngsi import (DEFAULT_VOCAB, NGSI_NULL, assert_json_equal, assert_problem, entity, langprop, prop,
                  rel, uid)

DS1 = "urn:ngsi-ld:ds:1"
DS2 = "urn:ngsi-ld:ds:2"


def three_instances(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=[prop(0), prop(1, datasetId=DS1), prop(2, datasetId=DS2)],
                      b=prop(5, datasetId=DS2), c=prop(7)))
    return eid


# ---- 5.6.4.4 / 5.5.8: NGSI-LD Null deletes the targeted instance ----------

def test_5_6_4_4_partial_update_null_value_deletes_default_instance(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=[prop(1), prop(2, datasetId=DS1)], b=prop(3)))
    r = cli.patch("/entities/%s/attrs/a" % eid, {"value": NGSI_NULL})
    assert r.status_code == 204, r.text
    assert_json_equal(cli.entity(eid), entity(eid, "T", a=prop(2, datasetId=DS1), b=prop(3)))


def test_5_6_4_4_partial_update_null_with_dataset_id_deletes_that_instance(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=[prop(1), prop(2, datasetId=DS1)]))
    r = cli.patch("/entities/%s/attrs/a" % eid, {"type": "Property", "value": NGSI_NULL, "datasetId": DS1})
    assert r.status_code == 204, r.text
    assert_json_equal(cli.entity(eid), entity(eid, "T", a=prop(1)))


def test_5_6_4_4_partial_update_null_object_deletes_relationship(cli):
    eid = uid()
    cli.create(entity(eid, "T", r=rel("urn:ngsi-ld:X:1"), b=prop(3)))
    r = cli.patch("/entities/%s/attrs/r" % eid, {"object": NGSI_NULL})
    assert r.status_code == 204, r.text
    assert_json_equal(cli.entity(eid), entity(eid, "T", b=prop(3)))


def test_5_6_4_4_partial_update_null_language_map_deletes_language_property(cli):
    eid = uid()
    cli.create(entity(eid, "T", l=langprop({"en": "x"}), b=prop(3)))
    r = cli.patch("/entities/%s/attrs/l" % eid, {"languageMap": {"@none": NGSI_NULL}})
    assert r.status_code == 204, r.text
    assert_json_equal(cli.entity(eid), entity(eid, "T", b=prop(3)))


def test_5_6_4_4_partial_update_null_on_missing_instance_is_404(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1)))
    assert_problem(cli.patch("/entities/%s/attrs/a" % eid, {"value": NGSI_NULL, "datasetId": DS1}),
                   404, "ResourceNotFound")
    assert_problem(cli.patch("/entities/%s/attrs/zz" % eid, {"value": NGSI_NULL}), 404, "ResourceNotFound")
    assert_json_equal(cli.entity(eid), entity(eid, "T", a=prop(1)))


def test_5_6_2_4_update_attrs_scope_on_entity_without_scope_is_207(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1)))
    r = cli.patch("/entities/%s/attrs" % eid, {"a": prop(2), "scope": "/A"})
    assert r.status_code == 207, r.text
    body = r.json()
    assert body["updated"] == [DEFAULT_VOCAB + "a"]
    assert len(body["notUpdated"]) == 1
    assert body["notUpdated"][0]["attributeName"].endswith("scope")
    assert_json_equal(cli.entity(eid), entity(eid, "T", a=prop(2)))


def test_5_6_2_4_update_attrs_scope_on_entity_with_scope_replaces(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1), scope="/A"))
    r = cli.patch("/entities/%s/attrs" % eid, {"scope": "/B"})
    assert r.status_code == 204, r.text
    assert cli.entity(eid)["scope"] == "/B"
