"""Multi-tenancy: 4.14, 5.5.10, 6.3.14 (NGSILD-Tenant)."""

from ngsi import assert_json_equal, assert_problem, entity, prop, uid


def test_4_14_tenants_are_isolated(broker, make_client):
    a, b = make_client(broker), make_client(broker)
    eid = uid()
    a.create(entity(eid, "T", v=prop("in a")))
    b.create(entity(eid, "T", v=prop("in b")))
    assert a.entity(eid)["v"]["value"] == "in a"
    assert b.entity(eid)["v"]["value"] == "in b"
    # a third tenant that exists but lacks the entity
    c = make_client(broker)
    c.ensure_tenant()
    assert_problem(c.get("/entities/" + eid), 404, "ResourceNotFound")


def test_4_14_default_tenant_does_not_see_named_tenants(cli, dcli):
    eid = uid()
    cli.create(entity(eid, "T"))
    dcli.create(entity(uid(), "T"))  # the default tenant always exists
    assert_problem(dcli.get("/entities/" + eid), 404, "ResourceNotFound")


def test_4_14_query_sees_only_its_tenant(broker, make_client):
    a, b = make_client(broker), make_client(broker)
    a.create(entity(uid(), "Iso", n=prop(1)))
    a.create(entity(uid(), "Iso", n=prop(2)))
    b.create(entity(uid(), "Iso", n=prop(3)))
    ra = a.get("/entities", params={"type": "Iso"}).json()
    rb = b.get("/entities", params={"type": "Iso"}).json()
    assert sorted(e["n"]["value"] for e in ra) == [1, 2]
    assert [e["n"]["value"] for e in rb] == [3]


def test_4_14_delete_in_one_tenant_leaves_the_other(broker, make_client):
    a, b = make_client(broker), make_client(broker)
    eid = uid()
    a.create(entity(eid, "T"))
    b.create(entity(eid, "T"))
    assert a.delete("/entities/" + eid).status_code == 204
    assert b.get("/entities/" + eid).status_code == 200


def test_6_3_14_tenant_header_echoed_in_responses(cli):
    eid = uid()
    r = cli.post("/entities", entity(eid, "T"))
    assert r.status_code == 201
    assert r.headers.get("NGSILD-Tenant") == cli.tenant
    r = cli.get("/entities/" + eid)
    assert r.headers.get("NGSILD-Tenant") == cli.tenant
    r = cli.get("/entities", params={"type": "T"})
    assert r.headers.get("NGSILD-Tenant") == cli.tenant
    r = cli.patch("/entities/" + eid, {"a": prop(1)})
    assert r.status_code == 204
    assert r.headers.get("NGSILD-Tenant") == cli.tenant
    # also on errors (6.3.14: "it shall also be present in HTTP response")
    r = cli.get("/entities/urn:ngsi-ld:T:nothere")
    assert r.status_code == 404
    assert r.headers.get("NGSILD-Tenant") == cli.tenant


def test_6_3_14_no_tenant_header_for_default_tenant(dcli):
    r = dcli.post("/entities", entity(uid(), "T"))
    assert r.status_code == 201
    assert "NGSILD-Tenant" not in r.headers


def test_5_5_10_nonexistent_tenant_on_read(cli):
    assert_problem(cli.get("/entities/urn:ngsi-ld:T:1"), 404, "NonexistentTenant")
    assert_problem(cli.get("/entities", params={"type": "T"}), 404, "NonexistentTenant")
    assert_problem(cli.get("/types"), 404, "NonexistentTenant")
    assert_problem(cli.get("/attributes"), 404, "NonexistentTenant")


def test_5_5_10_nonexistent_tenant_on_update_and_delete(cli):
    eid = "urn:ngsi-ld:T:1"
    assert_problem(cli.patch("/entities/%s/attrs" % eid, {"a": prop(1)}), 404, "NonexistentTenant")
    assert_problem(cli.post("/entities/%s/attrs" % eid, {"a": prop(1)}), 404, "NonexistentTenant")
    assert_problem(cli.patch("/entities/" + eid, {"a": prop(1)}), 404, "NonexistentTenant")
    assert_problem(cli.delete("/entities/" + eid), 404, "NonexistentTenant")
    assert_problem(cli.delete("/entities/%s/attrs/a" % eid), 404, "NonexistentTenant")
    # none of those created the tenant
    assert_problem(cli.get("/entities/" + eid), 404, "NonexistentTenant")


def test_5_5_10_create_implicitly_creates_tenant(cli):
    eid = uid()
    cli.create(entity(eid, "T", a=prop(1)))
    assert_json_equal(cli.entity(eid), entity(eid, "T", a=prop(1)))


def test_5_5_10_batch_create_implicitly_creates_tenant(cli):
    eid = uid()
    r = cli.post("/entityOperations/create", [entity(eid, "T")])
    assert r.status_code == 201, r.text
    assert cli.entity(eid)["id"] == eid


def test_5_5_10_failed_create_does_not_create_tenant(cli):
    r = cli.post("/entities", {"id": "not a uri", "type": "T"})
    assert_problem(r, 400, "BadRequestData")
    assert_problem(cli.get("/entities", params={"type": "T"}), 404, "NonexistentTenant")
