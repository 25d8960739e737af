"""Context source registrations (5.2.9-5.2.11, 5.2.34, 5.9, 5.10, 5.12, 6.8, 6.9):
register, retrieve, update, delete and discover, with the rules of the clauses."""

import datetime
import time

import pytest

from ngsi import CORE_CONTEXT_URL, assert_problem, entity, prop, uid

EX = "https://example.org/"


def reg(**members):
    r = {"type": "ContextSourceRegistration",
         "information": [{"entities": [{"type": "Vehicle"}]}],
         "endpoint": "http://127.0.0.1:9/source"}
    r.update(members)
    return r


def create(cli, body, **kw):
    r = cli.post("/csourceRegistrations", body, **kw)
    assert r.status_code == 201, r.text
    return r.headers["Location"].rsplit("/", 1)[1]


def future(seconds):
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# ---------------------------------------------------------------- 5.9.2 register

def test_5_9_2_register_answers_201_with_location_and_reads_back(cli, vctx):
    rid = uid("ContextSourceRegistration")
    body = reg(id=rid, information=[{"entities": [{"id": "urn:ngsi-ld:Vehicle:A1", "type": "Vehicle"}],
                                     "propertyNames": ["speed"], "relationshipNames": ["isParked"]}],
               registrationName="cars", description="the cars", contextSourceInfo=[{"key": "k", "value": "v"}],
               management={"localOnly": True, "timeout": 500, "cooldown": 100, "cacheDuration": "PT1M"},
               refreshRate="PT10S", scope=["/a/b"], location={"type": "Point", "coordinates": [1, 2]},
               observationSpace={"type": "Point", "coordinates": [1, 2]}, datasetId=["urn:ds:1", "@none"],
               tenant="other", contextSourceAlias="src1")
    r = cli.post("/csourceRegistrations", body, link=vctx)
    assert r.status_code == 201, r.text
    assert r.headers["Location"] == "/ngsi-ld/v1/csourceRegistrations/" + rid
    g = cli.get("/csourceRegistrations/" + rid, link=vctx)
    assert g.status_code == 200
    b = g.json()
    for k, v in body.items():
        assert b[k] == v, k
    assert b["mode"] == "inclusive" and b["operations"] == ["federationOps"]
    assert "status" not in b and "timesSent" not in b        # no distributed operation yet
    assert "createdAt" not in b
    s = cli.get("/csourceRegistrations/" + rid, link=vctx, params={"options": "sysAttrs"}).json()
    assert "createdAt" in s and "modifiedAt" in s


def test_5_10_1_names_compacted_with_the_readers_context(cli, vctx):
    rid = create(cli, reg(information=[{"entities": [{"type": "Vehicle"}], "propertyNames": ["speed"]}]), link=vctx)
    b = cli.get("/csourceRegistrations/" + rid).json()          # core context: expanded
    assert b["information"][0]["entities"][0]["type"] == EX + "Vehicle"
    assert b["information"][0]["propertyNames"] == [EX + "speed"]
    ld = cli.get("/csourceRegistrations/" + rid, accept="application/ld+json", link=vctx).json()
    assert ld["information"][0]["entities"][0]["type"] == "Vehicle"
    assert "@context" in ld


def test_5_9_2_generated_id(cli):
    rid = create(cli, reg())
    assert rid.startswith("urn:ngsi-ld:ContextSourceRegistration:")
    assert cli.get("/csourceRegistrations/" + rid).status_code == 200


def test_5_9_2_already_exists(cli):
    rid = create(cli, reg())
    assert_problem(cli.post("/csourceRegistrations", reg(id=rid)), 409, "AlreadyExists")


@pytest.mark.parametrize("bad", [
    {"information": []},
    {"information": [{}]},
    {"information": [{"entities": [{"id": "urn:x:1"}]}]},                        # EntityInfo without type
    {"information": [{"propertyNames": []}]},
    {"information": [{"bogus": 1}]},
    {"endpoint": "not a uri"},
    {"endpoint": None},
    {"mode": "sometimes"},
    {"operations": ["flyEntity"]},
    {"operations": []},
    {"type": "Subscription"},
    {"expiresAt": "2001-01-01T00:00:00Z"},
    {"expiresAt": "tomorrow"},
    {"location": {"type": "Point"}},
    {"management": {"timeout": -1}},
    {"management": {"what": 1}},
    {"refreshRate": "10s"},
    {"observationInterval": {"endAt": "2020-01-01T00:00:00Z"}},
    {"contextSourceInfo": [{"key": "accept", "value": "text/plain"}]},
    {"contextSourceInfo": [{"key": "ngsildConformance", "value": "one"}]},
    {"contextSourceAlias": ""},
    {"scope": "no scope"},
    {"datasetId": ["not a uri"]},
    # auxiliary only for retrieval operations (5.9.2.4)
    {"mode": "auxiliary", "operations": ["updateOps"]},
    {"mode": "auxiliary", "operations": ["federationOps"]},
    # exclusive needs entity ids and attributes (4.3.6.3)
    {"mode": "exclusive"},
    {"mode": "exclusive", "information": [{"entities": [{"id": "urn:x:1", "type": "T"}]}]},
])
def test_5_9_2_bad_registration_is_400(cli, bad):
    body = reg()
    for k, v in bad.items():
        if v is None:
            body.pop(k)
        else:
            body[k] = v
    assert_problem(cli.post("/csourceRegistrations", body), 400, "BadRequestData")


def test_5_9_2_auxiliary_with_retrieve_ops_is_accepted(cli):
    create(cli, reg(mode="auxiliary", operations=["retrieveOps"]))
    create(cli, reg(mode="auxiliary", operations=["retrieveEntity", "queryEntity"]))
    # 4.3.6.2: "always accepted"; without operations it serves consumption only: retrieveOps
    rid = create(cli, reg(mode="auxiliary"))
    assert cli.get("/csourceRegistrations/" + rid).json()["operations"] == ["retrieveOps"]


def test_5_9_2_operation_groups_and_names_accepted(cli):
    ops = ["federationOps", "associationOps", "updateOps", "retrieveOps", "redirectionOps", "createEntity",
           "queryBatch", "retrieveContextSourceIdentity", "createEntityMapQueryTemporal"]
    rid = create(cli, reg(operations=ops))
    assert cli.get("/csourceRegistrations/" + rid).json()["operations"] == ops


def exclusive(eid, attrs, **kw):
    return reg(mode="exclusive", information=[{"entities": [{"id": eid, "type": "Vehicle"}],
                                               "propertyNames": attrs}], **kw)


def test_5_9_2_exclusive_conflicts_with_exclusive_overlap(cli):
    create(cli, exclusive("urn:ngsi-ld:Vehicle:X", ["speed", "brand"]))
    assert_problem(cli.post("/csourceRegistrations", exclusive("urn:ngsi-ld:Vehicle:X", ["brand"])), 409, "Conflict")
    create(cli, exclusive("urn:ngsi-ld:Vehicle:X", ["color"]))           # other attributes
    create(cli, exclusive("urn:ngsi-ld:Vehicle:Y", ["speed"]))           # other entity


def test_4_3_6_3_redirect_conflicts_with_exclusive_and_not_with_redirect(cli):
    create(cli, exclusive("urn:ngsi-ld:Vehicle:X", ["speed"]))
    assert_problem(cli.post("/csourceRegistrations", reg(mode="redirect")), 409, "Conflict")
    create(cli, reg(mode="redirect", information=[{"entities": [{"type": "Car"}]}]))
    create(cli, reg(mode="redirect", information=[{"entities": [{"type": "Car"}]}]))
    # an exclusive one under an existing redirect one is a conflict too
    assert_problem(cli.post("/csourceRegistrations", reg(
        mode="exclusive", information=[{"entities": [{"id": "urn:c:1", "type": "Car"}], "propertyNames": ["a"]}])),
        409, "Conflict")


def test_5_9_2_exclusive_conflicts_with_local_data(cli):
    cli.create(entity("urn:ngsi-ld:Vehicle:L", "Vehicle", speed=prop(1)))
    assert_problem(cli.post("/csourceRegistrations", exclusive("urn:ngsi-ld:Vehicle:L", ["speed"])), 409, "Conflict")
    create(cli, exclusive("urn:ngsi-ld:Vehicle:L", ["brand"]))           # the entity has no brand here


def test_5_9_2_redirect_conflicts_with_local_data(cli):
    cli.create(entity("urn:ngsi-ld:Vehicle:R", "Vehicle", speed=prop(1)))
    assert_problem(cli.post("/csourceRegistrations", reg(mode="redirect")), 409, "Conflict")
    create(cli, reg(mode="redirect", information=[{"entities": [{"type": "Boat"}]}]))


# ---------------------------------------------------------------- 5.9.3 update

def test_5_9_3_update_replaces_members_and_null_removes(cli):
    rid = create(cli, reg(description="one", registrationName="n"))
    r = cli.patch("/csourceRegistrations/" + rid, {"description": "two", "registrationName": None,
                                                   "timesSent": 99})
    assert r.status_code == 204, r.text
    b = cli.get("/csourceRegistrations/" + rid).json()
    assert b["description"] == "two" and "registrationName" not in b and "timesSent" not in b


def test_5_9_3_update_errors(cli):
    rid = create(cli, reg())
    assert_problem(cli.patch("/csourceRegistrations/" + rid, {"information": None}), 400, "BadRequestData")
    assert_problem(cli.patch("/csourceRegistrations/" + rid, {"type": "Other"}), 400, "BadRequestData")
    assert_problem(cli.patch("/csourceRegistrations/" + rid, {"mode": "auxiliary", "operations": ["updateOps"]}),
                   400, "BadRequestData")
    assert_problem(cli.patch("/csourceRegistrations/" + rid, {}), 400, "BadRequestData")
    assert_problem(cli.patch("/csourceRegistrations/urn:x:none", {"description": "x"}), 404, "ResourceNotFound")
    assert_problem(cli.patch("/csourceRegistrations/not-a-uri", {"description": "x"}), 400, "BadRequestData")
    assert cli.get("/csourceRegistrations/" + rid).json()["information"]


def test_5_9_3_update_to_never_expire(cli):
    rid = create(cli, reg(expiresAt=future(3600)))
    assert cli.patch("/csourceRegistrations/" + rid, {"expiresAt": None}).status_code == 204
    assert "expiresAt" not in cli.get("/csourceRegistrations/" + rid).json()


def test_5_9_3_update_keeps_exclusive_rule(cli):
    create(cli, exclusive("urn:ngsi-ld:Vehicle:U", ["speed"]))
    rid = create(cli, exclusive("urn:ngsi-ld:Vehicle:U", ["brand"]))
    assert_problem(cli.patch("/csourceRegistrations/" + rid, {"information": [
        {"entities": [{"id": "urn:ngsi-ld:Vehicle:U", "type": "Vehicle"}], "propertyNames": ["speed"]}]}),
        409, "Conflict")


# ---------------------------------------------------------------- 5.9.4 delete, expiry

def test_5_9_4_delete(cli):
    rid = create(cli, reg())
    assert cli.delete("/csourceRegistrations/" + rid).status_code == 204
    assert_problem(cli.get("/csourceRegistrations/" + rid), 404, "ResourceNotFound")
    assert_problem(cli.delete("/csourceRegistrations/" + rid), 404, "ResourceNotFound")
    assert_problem(cli.delete("/csourceRegistrations/not-a-uri"), 400, "BadRequestData")


def test_5_9_2_expired_registration_is_removed(cli):
    rid = create(cli, reg(expiresAt=future(1)))
    assert cli.get("/csourceRegistrations/" + rid).status_code == 200
    time.sleep(1.3)
    assert_problem(cli.get("/csourceRegistrations/" + rid), 404, "ResourceNotFound")
    assert cli.get("/csourceRegistrations", params={"type": "Vehicle"}).json() == []


def test_4_14_registrations_are_per_tenant(cli, make_client, broker):
    rid = create(cli, reg())
    other = make_client(broker)
    other.ensure_tenant()
    assert_problem(other.get("/csourceRegistrations/" + rid), 404, "ResourceNotFound")
    assert other.get("/csourceRegistrations", params={"type": "Vehicle"}).json() == []
    assert_problem(make_client(broker).get("/csourceRegistrations", params={"type": "Vehicle"}),
                   404, "NonexistentTenant")


# ---------------------------------------------------------------- 5.10.2 discovery

def ids(resp):
    assert resp.status_code == 200, resp.text
    return [x["id"] for x in resp.json()]


def test_5_10_2_needs_type_attrs_q_or_geo(cli):
    create(cli, reg())
    assert_problem(cli.get("/csourceRegistrations"), 400, "BadRequestData")
    assert_problem(cli.get("/csourceRegistrations", params={"id": "urn:x:1"}), 400, "BadRequestData")


def test_5_12_match_by_type_id_pattern_and_attrs(cli, vctx):
    a = create(cli, reg(information=[{"entities": [{"id": "urn:ngsi-ld:Vehicle:A", "type": "Vehicle"}],
                                      "propertyNames": ["speed"]}]), link=vctx)
    b = create(cli, reg(information=[{"entities": [{"idPattern": "^urn:ngsi-ld:Vehicle:B.*", "type": "Vehicle"}],
                                      "propertyNames": ["brand"]}]), link=vctx)
    c = create(cli, reg(information=[{"propertyNames": ["speed"]}]), link=vctx)          # type-less
    d = create(cli, reg(information=[{"entities": [{"type": "Car"}]}]), link=vctx)
    q = lambda **p: ids(cli.get("/csourceRegistrations", params=p, link=vctx))
    assert q(type="Vehicle") == [a, b, c]
    assert q(type="Car") == [c, d]
    assert q(type="Vehicle,Car") == [a, b, c, d]
    assert q(type="Vehicle", id="urn:ngsi-ld:Vehicle:A") == [a, c]
    assert q(type="Vehicle", id="urn:ngsi-ld:Vehicle:B7") == [b, c]
    assert q(type="Vehicle", idPattern=".*A$") == [a, b, c]                 # two patterns may overlap
    assert q(attrs="speed") == [a, c, d]
    assert q(attrs="brand") == [b, d]
    assert q(type="Vehicle", attrs="brand") == [b]
    assert q(q="speed>3") == [a, c, d]
    assert q(type="Boat") == [c]


def test_5_10_2_5_only_matching_information_returned(cli, vctx):
    rid = create(cli, reg(information=[{"entities": [{"type": "Vehicle"}]}, {"entities": [{"type": "Car"}]}]),
                 link=vctx)
    b = cli.get("/csourceRegistrations", params={"type": "Car"}, link=vctx).json()
    assert [x["id"] for x in b] == [rid]
    assert b[0]["information"] == [{"entities": [{"type": "Car"}]}]


def test_5_10_2_csf_scope_and_geo(cli):
    a = create(cli, reg(csourceColor="red", scope="/city/north", location={"type": "Point", "coordinates": [10, 10]}))
    b = create(cli, reg(csourceColor="blue", scope="/city/south",
                        location={"type": "Polygon", "coordinates": [[[0, 0], [0, 1], [1, 1], [1, 0], [0, 0]]]}))
    q = lambda **p: ids(cli.get("/csourceRegistrations", params=dict(type="Vehicle", **p)))
    assert q(csf='csourceColor=="red"') == [a]
    assert q(scopeQ="/city/south") == [b]
    assert q(scopeQ="/city/#") == [a, b]
    assert q(georel="near;maxDistance==2000", geometry="Point", coordinates="[10,10]") == [a]
    assert q(georel="within", geometry="Polygon",
             coordinates="[[[0.5,0.5],[0.5,2],[2,2],[2,0.5],[0.5,0.5]]]") == [b]


def test_5_10_2_temporal(cli):
    latest = create(cli, reg())
    obs = create(cli, reg(observationInterval={"startAt": "2020-01-01T00:00:00Z", "endAt": "2021-01-01T00:00:00Z"}))
    mgmt = create(cli, reg(managementInterval={"startAt": "2020-01-01T00:00:00Z"}))
    q = lambda **p: ids(cli.get("/csourceRegistrations", params=dict(type="Vehicle", **p)))
    assert q() == [latest]
    assert q(timerel="after", timeAt="2020-06-01T00:00:00Z") == [obs]
    assert q(timerel="after", timeAt="2022-06-01T00:00:00Z") == []
    assert q(timerel="before", timeAt="2020-06-01T00:00:00Z", timeproperty="modifiedAt") == [mgmt]
    assert q(timerel="between", timeAt="2019-06-01T00:00:00Z", endTimeAt="2020-02-01T00:00:00Z") == [obs]
    assert_problem(cli.get("/csourceRegistrations", params={"type": "Vehicle", "timerel": "after"}),
                   400, "BadRequestData")
    assert_problem(cli.get("/csourceRegistrations", params={"type": "Vehicle", "timerel": "during",
                                                            "timeAt": "2020-06-01T00:00:00Z"}), 400, "BadRequestData")


def test_5_5_9_pagination_and_count(cli):
    rids = [create(cli, reg()) for _ in range(5)]
    r = cli.get("/csourceRegistrations", params={"type": "Vehicle", "limit": 2, "offset": 1, "count": "true"})
    assert ids(r) == rids[1:3]
    assert r.headers["NGSILD-Results-Count"] == "5"
    assert "next" in r.headers["Link"] and "prev" in r.headers["Link"]
    assert_problem(cli.get("/csourceRegistrations", params={"type": "Vehicle", "limit": 0}), 400, "BadRequestData")
    assert_problem(cli.get("/csourceRegistrations", params={"type": "Vehicle", "limit": 100000}),
                   403, "TooManyResults")


def test_5_10_2_bad_parameters(cli):
    assert_problem(cli.get("/csourceRegistrations", params={"type": "Vehicle", "id": "not a uri"}), 400, "BadRequestData")
    assert_problem(cli.get("/csourceRegistrations", params={"q": "speed>>"}), 400, "BadRequestData")
    assert_problem(cli.get("/csourceRegistrations", params={"type": "Vehicle", "bogus": 1}), 400, "InvalidRequest")


def test_cordb_disk_keeps_registrations(broker_factory, tmp_path):
    b = broker_factory("--dbDir", str(tmp_path))
    from conftest import Client
    c = Client(b, None)
    rid = create(c, reg(description="kept"))
    b.stop()
    b.start()
    g = c.get("/csourceRegistrations/" + rid)
    assert g.status_code == 200 and g.json()["description"] == "kept"
    b.stop()
