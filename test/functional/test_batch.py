"""Batch operations: 6.14 create, 6.15 upsert, 6.16 update, 6.17 delete,
6.31 merge (behaviour 5.6.7-5.6.10, 5.6.20; BatchOperationResult 5.2.16-17)
and 6.23 Query Entities via POST (Query 5.2.23)."""

import pytest

from ngsi import (DEFAULT_VOCAB, NGSI_NULL, assert_json_equal, assert_problem, assert_problem_body,
                  entity, ids_of, link_header, media_type, point, prop, rel, uid)

OPS = "/entityOperations/"


def batch_result(r):
    """Checks a 207 BatchOperationResult and returns (success ids, {id: error})."""
    assert r.status_code == 207, r.text
    assert media_type(r) == "application/json"
    body = r.json()
    assert set(body) >= {"success", "errors"}, body
    errors = {}
    for e in body["errors"]:
        assert "entityId" in e and "error" in e, e
        errors[e["entityId"]] = e["error"]
    return sorted(body["success"]), errors


# ---- 6.14 create --------------------------------------------------------------

def test_6_14_create_all_ok_is_201_with_ids(cli):
    ids = [uid() for _ in range(3)]
    r = cli.post(OPS + "create", [entity(i, "T", n=prop(k)) for k, i in enumerate(ids)])
    assert r.status_code == 201, r.text
    assert sorted(r.json()) == sorted(ids)
    for k, i in enumerate(ids):
        assert cli.entity(i)["n"] == prop(k)


def test_6_14_create_partial_is_207(cli):
    old, new, bad = uid(), uid(), uid()
    cli.create(entity(old, "T", v=prop("old")))
    r = cli.post(OPS + "create", [entity(old, "T", v=prop("new")), entity(new, "T"),
                                  entity(bad, "T", x={"type": "Relationship", "object": "not a uri"})])
    success, errors = batch_result(r)
    assert success == [new]
    assert sorted(errors) == sorted([old, bad])
    assert_problem_body(errors[old], "AlreadyExists")
    assert_problem_body(errors[bad], "BadRequestData")
    # a failing entity changes nothing of itself
    assert cli.entity(old)["v"] == prop("old")
    assert_problem(cli.get("/entities/" + bad), 404, "ResourceNotFound")


def test_6_14_create_none_ok_is_207_with_empty_success(cli):
    eid = uid()
    cli.create(entity(eid, "T"))
    success, errors = batch_result(cli.post(OPS + "create", [entity(eid, "T")]))
    assert success == []
    assert list(errors) == [eid]


def test_4_6_6_create_same_id_twice_in_one_batch(cli):
    eid = uid()
    success, errors = batch_result(cli.post(OPS + "create", [entity(eid, "T", n=prop(1)),
                                                           entity(eid, "T", n=prop(2))]))
    assert success == [eid]
    assert_problem_body(errors[eid], "AlreadyExists")
    assert cli.entity(eid)["n"] == prop(1)


@pytest.mark.parametrize("op", ["create", "upsert", "update", "delete", "merge"])
@pytest.mark.parametrize("body", [[], [None], {"id": "urn:ngsi-ld:T:1", "type": "T"}, "x"])
def test_5_6_7_empty_or_null_batch_is_400(cli, op, body):
    """5.6.7-5.6.10: an empty array or a null item -> BadRequestData; not an array -> 400."""
    cli.ensure_tenant()
    if op == "delete" and body == [None]:
        body = [None]
    r = cli.post(OPS + op, body)
    assert_problem(r, 400, "BadRequestData")


def test_6_14_create_with_link_context(cli, vctx):
    eid = uid()
    r = cli.post(OPS + "create", [entity(eid, "Vehicle", speed=prop(1))], link=vctx)
    assert r.status_code == 201, r.text
    assert cli.entity(eid)["type"] == "https://example.org/Vehicle"


def test_6_14_create_ld_json_each_entity_has_context(cli, vctx):
    eid = uid()
    e = entity(eid, "Vehicle", speed=prop(1))
    e["@context"] = vctx
    r = cli.post(OPS + "create", [e], ctype="application/ld+json")
    assert r.status_code == 201, r.text
    assert cli.entity(eid, link=vctx)["speed"] == prop(1)


# ---- 6.15 upsert ----------------------------------------------------------------

def test_6_15_upsert_all_new_is_201(cli):
    ids = [uid(), uid()]
    r = cli.post(OPS + "upsert", [entity(i, "T") for i in ids])
    assert r.status_code == 201, r.text
    assert sorted(r.json()) == sorted(ids)


def test_6_15_upsert_all_existing_is_204_and_replaces(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1), b=prop(2)))
    r = cli.post(OPS + "upsert", [entity(eid, "T", a=prop(10))])
    assert r.status_code == 204, r.text
    assert r.content == b""
    # default mode replace (6.15.3.1)
    assert_json_equal(cli.entity(eid), entity(eid, "T", a=prop(10)))


def test_6_15_upsert_mixed_is_201_with_created_only(cli):
    old, new = uid(), uid()
    cli.create(entity(old, "T"))
    r = cli.post(OPS + "upsert", [entity(old, "T", a=prop(1)), entity(new, "T")])
    assert r.status_code == 201, r.text
    assert r.json() == [new]
    assert cli.entity(old)["a"] == prop(1)


def test_6_15_upsert_replace_option(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1), b=prop(2)))
    r = cli.post(OPS + "upsert", [entity(eid, "T", a=prop(10))], params={"options": "replace"})
    assert r.status_code == 204, r.text
    assert_json_equal(cli.entity(eid), entity(eid, "T", a=prop(10)))


def test_6_15_upsert_update_option(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1, unitCode="CEL"), b=prop(2)))
    r = cli.post(OPS + "upsert", [entity(eid, "T", a=prop(10), c=prop(3))], params={"options": "update"})
    assert r.status_code == 204, r.text
    assert_json_equal(cli.entity(eid), entity(eid, "T", a=prop(10), b=prop(2), c=prop(3)))


def test_6_15_upsert_partial_is_207(cli):
    good, bad = uid(), uid()
    success, errors = batch_result(cli.post(OPS + "upsert", [entity(good, "T"),
                                                           entity(bad, "T", a={"type": "Property"})]))
    assert success == [good]
    assert_problem_body(errors[bad], "BadRequestData")
    assert_problem(cli.get("/entities/" + bad), 404, "ResourceNotFound")


def test_6_15_upsert_invalid_option_is_400(cli):
    cli.ensure_tenant()
    assert_problem(cli.post(OPS + "upsert", [entity(uid(), "T")], params={"options": "sideways"}),
                   400, "InvalidRequest")


# ---- 6.16 update ------------------------------------------------------------------

def test_6_16_update_all_ok_is_204(cli):
    a, b = uid(), uid()
    cli.create(entity(a, "T", x=prop(1), y=prop(1)))
    cli.create(entity(b, "T", x=prop(1)))
    r = cli.post(OPS + "update", [{"id": a, "type": "T", "x": prop(2)}, {"id": b, "type": "T", "z": prop(3)}])
    assert r.status_code == 204, r.text
    assert_json_equal(cli.entity(a), entity(a, "T", x=prop(2), y=prop(1)))
    assert_json_equal(cli.entity(b), entity(b, "T", x=prop(1), z=prop(3)))


def test_6_16_update_no_overwrite(cli):
    eid = uid()
    cli.create(entity(eid, "T", x=prop(1)))
    r = cli.post(OPS + "update", [{"id": eid, "type": "T", "x": prop(2), "y": prop(3)}],
                 params={"options": "noOverwrite"})
    # 5.6.9 / 5.6.3: the existing attribute is left untouched, the new one appended;
    # whether that counts as success is not spelled out (204 or 207 accepted)
    assert r.status_code in (204, 207), r.text
    assert_json_equal(cli.entity(eid), entity(eid, "T", x=prop(1), y=prop(3)))


def test_6_16_update_missing_entity_is_207(cli):
    there, missing = uid(), uid()
    cli.create(entity(there, "T"))
    success, errors = batch_result(cli.post(OPS + "update", [{"id": there, "type": "T", "a": prop(1)},
                                                           {"id": missing, "type": "T", "a": prop(1)}]))
    assert success == [there]
    assert_problem_body(errors[missing], "ResourceNotFound")
    assert_problem(cli.get("/entities/" + missing), 404, "ResourceNotFound")


def test_6_16_update_failing_entity_changes_nothing_of_itself(cli):
    a, b = uid(), uid()
    cli.create(entity(a, "T", x=prop(1)))
    cli.create(entity(b, "T", x=prop(1)))
    success, errors = batch_result(cli.post(OPS + "update", [
        {"id": a, "type": "T", "x": prop(2)},
        {"id": b, "type": "T", "x": prop(2), "bad": {"type": "Relationship", "object": "no uri"}}]))
    assert success == [a]
    assert_problem_body(errors[b], "BadRequestData")
    assert cli.entity(a)["x"] == prop(2)
    assert_json_equal(cli.entity(b), entity(b, "T", x=prop(1)))


# ---- 6.17 delete --------------------------------------------------------------------

def test_6_17_delete_all_ok_is_204(cli):
    ids = [uid(), uid()]
    cli.batch_create([entity(i, "T") for i in ids])
    r = cli.post(OPS + "delete", ids)
    assert r.status_code == 204, r.text
    for i in ids:
        assert_problem(cli.get("/entities/" + i), 404, "ResourceNotFound")


def test_6_17_delete_partial_is_207(cli):
    there, missing = uid(), uid()
    cli.create(entity(there, "T"))
    success, errors = batch_result(cli.post(OPS + "delete", [there, missing, "not a uri"]))
    assert success == [there]
    assert_problem_body(errors[missing], "ResourceNotFound")
    assert_problem_body(errors["not a uri"], "BadRequestData")


def test_6_17_delete_items_must_be_strings(cli):
    cli.ensure_tenant()
    r = cli.post(OPS + "delete", [{"id": uid()}])
    assert r.status_code in (207, 400)
    if r.status_code == 400:
        assert_problem(r, 400, "BadRequestData")


# ---- 6.31 merge -----------------------------------------------------------------------

def test_6_31_merge_all_ok_is_204(cli):
    eid = uid()
    cli.create(entity(eid, "T", t=prop(25, unitCode="CEL"), gone=prop(1), addr=prop({"a": 1, "b": 2})))
    r = cli.post(OPS + "merge", [{"id": eid, "type": "T", "t": prop(30), "gone": NGSI_NULL,
                                  "addr": prop({"b": NGSI_NULL, "c": 3}), "new": prop(1)}])
    assert r.status_code == 204, r.text
    assert_json_equal(cli.entity(eid), entity(eid, "T", t=prop(30, unitCode="CEL"), addr=prop({"a": 1, "c": 3}),
                                              new=prop(1)))


def test_6_31_merge_missing_entity_is_207(cli):
    there, missing = uid(), uid()
    cli.create(entity(there, "T"))
    success, errors = batch_result(cli.post(OPS + "merge", [{"id": there, "type": "T", "a": prop(1)},
                                                          {"id": missing, "type": "T", "a": prop(1)}]))
    assert success == [there]
    assert_problem_body(errors[missing], "ResourceNotFound")


# ---- 6.23 query via POST ------------------------------------------------------------------

@pytest.fixture
def qdata(cli):
    ents = [
        entity("urn:ngsi-ld:V:1", "Vehicle", speed=prop(80), brand=prop("Mercedes"), location=point(10, 50)),
        entity("urn:ngsi-ld:V:2", "Vehicle", speed=prop(40), brand=prop("BMW"), location=point(20, 60)),
        entity("urn:ngsi-ld:B:1", "Bike", speed=prop(20)),
    ]
    cli.batch_create(ents)
    return cli


def test_6_23_query_by_type(qdata):
    r = qdata.post(OPS + "query", {"type": "Query", "entities": [{"type": "Vehicle"}]})
    assert r.status_code == 200, r.text
    assert ids_of(r.json()) == ["urn:ngsi-ld:V:1", "urn:ngsi-ld:V:2"]


def test_6_23_query_entities_selectors(qdata):
    body = {"type": "Query", "entities": [{"id": "urn:ngsi-ld:V:1", "type": "Vehicle"},
                                          {"idPattern": "^urn:ngsi-ld:B:.*", "type": "Bike"}]}
    r = qdata.post(OPS + "query", body)
    assert r.status_code == 200, r.text
    assert ids_of(r.json()) == ["urn:ngsi-ld:B:1", "urn:ngsi-ld:V:1"]


def test_6_23_query_q_attrs_geo(qdata):
    r = qdata.post(OPS + "query", {"type": "Query", "entities": [{"type": "Vehicle"}], "q": "speed>50",
                                   "attrs": ["brand"]})
    assert r.status_code == 200, r.text
    assert_json_equal(r.json(), [entity("urn:ngsi-ld:V:1", "Vehicle", brand=prop("Mercedes"))])
    r = qdata.post(OPS + "query", {"type": "Query", "geoQ": {"geometry": "Point", "coordinates": [10, 50],
                                                             "georel": "near;maxDistance==1000"}})
    assert r.status_code == 200, r.text
    assert ids_of(r.json()) == ["urn:ngsi-ld:V:1"]


def test_6_23_query_with_link_and_ld_json(cli, vctx):
    eid = uid()
    cli.create(entity(eid, "Vehicle", speed=prop(1)), link=vctx)
    r = cli.post(OPS + "query", {"type": "Query", "entities": [{"type": "Vehicle"}]}, link=vctx)
    assert ids_of(r.json()) == [eid]
    body = {"type": "Query", "entities": [{"type": "Vehicle"}], "@context": vctx}
    r = cli.post(OPS + "query", body, ctype="application/ld+json")
    assert r.status_code == 200, r.text
    assert ids_of(r.json()) == [eid]
    assert r.json()[0]["speed"] == prop(1)


def test_6_23_query_count_and_limit(qdata):
    r = qdata.post(OPS + "query", {"type": "Query", "entities": [{"type": "Vehicle"}]},
                   params={"count": "true", "limit": "1"})
    assert r.status_code == 200, r.text
    assert len(r.json()) == 1
    assert r.headers.get("NGSILD-Results-Count") == "2"


@pytest.mark.parametrize("body", [
    {"entities": [{"type": "Vehicle"}]},                        # no type
    {"type": "Subscription", "entities": [{"type": "Vehicle"}]},
    {"type": "Query", "entities": []},                          # empty array not allowed
    {"type": "Query", "attrs": []},
    {"type": "Query", "q": "speed>>1", "entities": [{"type": "Vehicle"}]},
    {"type": "Query"},                                          # too wide (5.7.2.4)
    [{"type": "Query"}],
])
def test_6_23_invalid_query_is_400(qdata, body):
    assert_problem(qdata.post(OPS + "query", body), 400, "BadRequestData")


def test_6_3_4_query_post_accept_html_is_406(qdata):
    r = qdata.post(OPS + "query", {"type": "Query", "entities": [{"type": "Vehicle"}]}, accept="text/html")
    assert r.status_code == 406


# ---- the batch bound (--maxBatchSize) -----------------------------------------------

@pytest.mark.parametrize("op", ["create", "upsert", "update", "merge", "delete"])
def test_5_6_7_batch_above_max_batch_size_is_400_and_changes_nothing(broker_factory, make_client, op):
    c = make_client(broker_factory("--maxBatchSize", "3"))
    ids = [uid() for _ in range(4)]
    c.batch_create([entity(i, "T", v=prop(1)) for i in ids[:3]])   # 3 is within the bound
    body = ids if op == "delete" else [entity(i, "T", v=prop(2)) for i in ids]
    r = c.post(OPS + op, body)
    assert_problem(r, 400, "BadRequestData")
    assert "maxBatchSize" in r.json()["detail"]
    for i in ids[:3]:
        assert c.entity(i)["v"] == prop(1)
    assert_problem(c.get("/entities/" + ids[3]), 404, "ResourceNotFound")


def test_6_16_batch_on_a_tenant_never_written_is_404_nonexistent_tenant(make_client, broker):
    c = make_client(broker)
    r = c.post(OPS + "update", [entity(uid(), "T", v=prop(1))])
    assert_problem(r, 404, "NonexistentTenant")
    r = c.post(OPS + "delete", [uid()])
    assert_problem(r, 404, "NonexistentTenant")
