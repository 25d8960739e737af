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


# ---- 4.5.5 / 5.7.1.4 / 5.7.2.4: the datasetId parameter --------------------

def test_5_7_1_4_dataset_id_keeps_only_listed_instances(cli):
    eid = three_instances(cli)
    e = cli.entity(eid, params={"datasetId": DS1})
    # b has no DS1 instance and c only the default: left out, the entity still returned
    assert_json_equal(e, entity(eid, "T", a=prop(1, datasetId=DS1)))


def test_5_7_1_4_dataset_id_none_is_the_default_instance(cli):
    eid = three_instances(cli)
    e = cli.entity(eid, params={"datasetId": "@none," + DS2})
    assert_json_equal(e, entity(eid, "T", a=[prop(0), prop(2, datasetId=DS2)], b=prop(5, datasetId=DS2),
                                c=prop(7)), unordered=True)


def test_5_7_1_4_dataset_id_matching_nothing_returns_entity(cli):
    eid = three_instances(cli)
    assert cli.entity(eid, params={"datasetId": "urn:ngsi-ld:ds:none"}) == {"id": eid, "type": "T"}


def test_5_7_1_4_dataset_id_key_values(cli):
    eid = three_instances(cli)
    e = cli.entity(eid, params={"datasetId": "@none," + DS1, "format": "keyValues"})
    assert e == {"id": eid, "type": "T", "a": {"dataset": {"@none": 0, DS1: 1}}, "c": 7}


def test_5_7_2_4_query_dataset_id(cli):
    eid = three_instances(cli)
    got = cli.get("/entities", params={"type": "T", "datasetId": DS2}).json()
    assert_json_equal(got, [entity(eid, "T", a=prop(2, datasetId=DS2), b=prop(5, datasetId=DS2))])


def test_5_2_23_query_body_dataset_id(cli):
    eid = three_instances(cli)
    r = cli.post("/entityOperations/query", {"type": "Query", "entities": [{"type": "T"}], "datasetId": [DS1]})
    assert r.status_code == 200, r.text
    assert_json_equal(r.json(), [entity(eid, "T", a=prop(1, datasetId=DS1))])


def test_6_5_3_1_dataset_id_must_be_uris(cli):
    eid = three_instances(cli)
    assert_problem(cli.get("/entities/" + eid, params={"datasetId": "not a uri"}), 400, "BadRequestData")
    assert_problem(cli.get("/entities", params={"type": "T", "datasetId": ""}), 400, "BadRequestData")


def test_5_7_1_4_dataset_id_is_not_cached_as_plain_rendering(cli):
    eid = three_instances(cli)
    full = cli.entity(eid)
    cli.entity(eid, params={"datasetId": DS1})
    assert cli.entity(eid) == full
