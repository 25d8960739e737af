"""The temporal API (6.18-6.24, 5.6.11-5.6.16, 5.7.3, 5.7.4) and attribute
history: temporal representation (4.5.6-4.5.8), temporalValues (4.5.9),
aggregatedValues (4.5.19), the temporal query (4.11), lastN, pagination of
instances (6.3.10), and the history the core API writes.

Every test runs against both backends: --history corDB, and --history
timescale on a real PostgreSQL started for the session (pg.py; skipped only
when PostgreSQL is not installed or the build has no timescale backend).
CORAINE_TEST_HISTORY (e.g. "--history timescale --historyURI postgresql://...")
runs them against those flags alone."""

import os
from urllib.parse import quote

import pytest

from ngsi import NGSI_NULL, assert_problem, entity, prop, rel, uid

ENV_FLAGS = tuple((os.environ.get("CORAINE_TEST_HISTORY") or "").split())
DS1 = "urn:ngsi-ld:ds:1"
T0 = "2020-08-01T12:03:00Z"
T1 = "2020-08-01T12:05:00Z"
T2 = "2020-08-01T12:07:00Z"


@pytest.fixture(params=["corDB", "timescale"])
def history_flags(request):
    """The history backend's flags."""
    if ENV_FLAGS:
        return ENV_FLAGS
    if request.param == "corDB":
        return ("--history", "corDB")
    # the read-your-writes wait is --historyQueueTimeout + 1 s: generous on a loaded machine
    return ("--history", "timescale", "--historyURI", request.getfixturevalue("pg_uri"),
            "--historyQueueTimeout", "10000")


@pytest.fixture
def hcli(broker_factory, make_client, history_flags):
    return make_client(broker_factory(*history_flags))


@pytest.fixture
def lcli(broker_factory, make_client, history_flags):
    """A broker with a small instance limit (6.3.10 pagination)."""
    return make_client(broker_factory(*(history_flags + ("--temporalLimit", "5"))))


def tent(eid, typ="Vehicle", **attrs):
    e = {"id": eid, "type": typ}
    e.update(attrs)
    return e


def obs(value, t, **sub):
    p = {"type": "Property", "value": value, "observedAt": t}
    p.update(sub)
    return p


def vehicle(eid):
    return tent(eid, speed=[obs(120, T0), obs(80, T1), obs(100, T2)],
                fuelLevel=[obs(67, T0), obs(53, "2020-08-01T13:05:00Z"), obs(40, "2020-08-01T14:07:00Z")])


def tpath(eid, rest=""):
    return "/temporal/entities/" + quote(eid, safe=":") + rest


def create_vehicle(c, eid=None):
    eid = eid or uid("Vehicle")
    r = c.post("/temporal/entities", vehicle(eid))
    assert r.status_code == 201, r.text
    return eid


def values(attr):
    return [i["value"] for i in attr]


# ---- 5.6.11 / 6.18.3.1: create, upsert ------------------------------------

def test_5_6_11_create_201_with_location(hcli):
    eid = uid("Vehicle")
    r = hcli.post("/temporal/entities", vehicle(eid))
    assert r.status_code == 201, r.text
    assert r.headers["Location"] == "/ngsi-ld/v1/temporal/entities/" + eid


def test_5_6_11_instances_come_back_in_time_order_with_instance_ids(hcli):
    eid = create_vehicle(hcli)
    r = hcli.get(tpath(eid))
    assert r.status_code == 200, r.text
    b = r.json()
    assert b["id"] == eid and b["type"] == "Vehicle"
    assert values(b["speed"]) == [120, 80, 100]
    assert [i["observedAt"] for i in b["speed"]] == [T0, T1, T2]
    assert values(b["fuelLevel"]) == [67, 53, 40]
    ids = [i["instanceId"] for i in b["speed"] + b["fuelLevel"]]
    assert len(set(ids)) == 6 and all(i.startswith("urn:ngsi-ld:attribute:instance:") for i in ids)


def test_5_6_11_entity_exists_in_the_core_api_with_the_newest_instances(hcli):
    eid = create_vehicle(hcli)
    e = hcli.entity(eid)
    assert e["speed"]["value"] == 100 and e["speed"]["observedAt"] == T2
    assert e["fuelLevel"]["value"] == 40


def test_5_6_11_existing_entity_gets_instances_204(hcli):
    eid = create_vehicle(hcli)
    r = hcli.post("/temporal/entities", tent(eid, speed=[obs(55, "2020-08-01T12:04:00Z")]))
    assert r.status_code == 204, r.text
    b = hcli.get(tpath(eid), params={"attrs": "speed"}).json()
    assert values(b["speed"]) == [120, 55, 80, 100]
    # an older instance does not replace the entity's newer value
    assert hcli.entity(eid)["speed"]["value"] == 100


def test_5_6_11_an_instance_given_again_replaces_the_one_at_its_observed_at(hcli):
    eid = create_vehicle(hcli)
    before = hcli.get(tpath(eid), params={"attrs": "speed"}).json()["speed"]
    r = hcli.post("/temporal/entities", tent(eid, speed=[obs(121, T0), obs(80, T1), obs(100, T2)]))
    assert r.status_code == 204, r.text
    after = hcli.get(tpath(eid), params={"attrs": "speed"}).json()["speed"]
    assert values(after) == [121, 80, 100]
    assert [i["instanceId"] for i in after] == [i["instanceId"] for i in before]


def test_5_6_12_one_body_with_repeated_observed_at_and_new_series(hcli):
    """5.6.12: instances given in one body are applied in their order (the
    PostgreSQL backend applies a batch set by set): an observedAt given
    twice in the body and already held keeps the held instance's id and
    takes the body's last value; one given twice and new is one instance
    (the last value); other series and datasetIds are untouched; an
    instance without observedAt is added."""
    eid = create_vehicle(hcli)
    before = hcli.get(tpath(eid), params={"attrs": "speed", "options": "sysAttrs"}).json()["speed"]
    t3, t4 = "2020-08-01T12:09:00Z", "2020-08-01T12:11:00Z"
    r = hcli.post(tpath(eid) + "/attrs", {
        "speed": [obs(1, T0), obs(2, t3), obs(3, T0), obs(4, t3), obs(5, t4),
                  obs(6, T1, datasetId=DS1)],
        "load": [{"type": "Property", "value": 7}]})
    assert r.status_code == 204, r.text
    got = hcli.get(tpath(eid), params={"attrs": "speed,load", "options": "sysAttrs"}).json()
    default = [i for i in got["speed"] if "datasetId" not in i]
    assert values(default) == [3, 80, 100, 4, 5]
    assert default[0]["instanceId"] == before[0]["instanceId"]
    assert default[0]["createdAt"] == before[0]["createdAt"]
    assert len({i["instanceId"] for i in got["speed"]}) == len(got["speed"])
    assert values([i for i in got["speed"] if i.get("datasetId") == DS1]) == [6]
    assert values(got["load"]) == [7]


def test_5_6_11_bad_bodies_400_and_nothing_written(hcli):
    eid = uid("Vehicle")
    for body in ({"type": "Vehicle"}, {"id": "not a uri", "type": "V"}, {"id": eid},
                 tent(eid, speed=[]), tent(eid, speed=[3]), tent(eid, speed=[{"type": "Property"}])):
        r = hcli.post("/temporal/entities", body)
        assert_problem(r, 400, "BadRequestData")
    assert_problem(hcli.get(tpath(eid)), 404, "ResourceNotFound")
    assert hcli.get("/entities/" + eid).status_code == 404


# ---- the core API writes history -------------------------------------------

def test_core_writes_are_history(hcli):
    eid = uid("Room")
    hcli.create(entity(eid, "Room", temperature=obs(20, T0)))
    for v, t in ((21, T1), (22, T2)):
        r = hcli.patch("/entities/%s/attrs" % eid, {"temperature": obs(v, t)})
        assert r.status_code == 204, r.text
    b = hcli.get(tpath(eid)).json()
    assert values(b["temperature"]) == [20, 21, 22]


def test_core_delete_keeps_history_with_deleted_at(hcli):
    eid = uid("Room")
    hcli.create(entity(eid, "Room", temperature=obs(20, T0), name=prop("x")))
    assert hcli.delete("/entities/" + eid).status_code == 204
    b = hcli.get(tpath(eid)).json()
    assert values(b["temperature"]) == [20]
    d = hcli.get(tpath(eid), params={"timeproperty": "deletedAt", "options": "sysAttrs"}).json()
    assert "deletedAt" in d
    for name in ("temperature", "name"):
        assert len(d[name]) == 1 and d[name][0]["value"] == NGSI_NULL and "deletedAt" in d[name][0]


def test_core_attribute_delete_is_a_deleted_at_instance(hcli):
    eid = uid("Room")
    hcli.create(entity(eid, "Room", temperature=obs(20, T0), name=prop("x")))
    assert hcli.delete("/entities/%s/attrs/name" % eid).status_code == 204
    d = hcli.get(tpath(eid), params={"timeproperty": "deletedAt"}).json()
    assert list(k for k in d if k not in ("id", "type")) == ["name"]


# ---- 4.11 temporal query ---------------------------------------------------

@pytest.mark.parametrize("timerel,at,end,expected", [
    ("before", T1, None, [120]),                 # before: exclusive
    ("after", T1, None, [80, 100]),              # after: inclusive
    ("between", T0, T2, [120, 80]),              # [start, end)
])
def test_4_11_timerel(hcli, timerel, at, end, expected):
    eid = create_vehicle(hcli)
    params = {"timerel": timerel, "timeAt": at, "attrs": "speed"}
    if end:
        params["endTimeAt"] = end
    b = hcli.get(tpath(eid), params=params).json()
    assert values(b["speed"]) == expected


@pytest.mark.parametrize("params", [
    {"timerel": "after"},                                     # no timeAt
    {"timerel": "between", "timeAt": T0},                     # no endTimeAt
    {"timerel": "between", "timeAt": T2, "endTimeAt": T0},    # end before start
    {"timerel": "during", "timeAt": T0},
    {"timerel": "after", "timeAt": "yesterday"},
    {"timeAt": T0},                                           # timeAt without timerel
    {"timeproperty": "seenAt"},
    {"lastN": "0"}, {"lastN": "-3"}, {"lastN": "x"},
    {"options": "aggregatedValues"},                          # no aggrMethods
    {"options": "aggregatedValues", "aggrMethods": "median"},
    {"options": "aggregatedValues", "aggrMethods": "avg", "aggrPeriodDuration": "1 hour"},
    {"join": "inline"},
])
def test_4_11_bad_temporal_parameters_400(hcli, params):
    eid = create_vehicle(hcli)
    assert_problem(hcli.get(tpath(eid), params=params), 400, "BadRequestData")


@pytest.mark.parametrize("params", [{"format": "table"}, {"options": "fancy"},
                                    {"options": "temporalValues,fancy"}, {"colour": "red"}])
def test_6_3_20_unsupported_format_options_parameters_400_invalid_request(hcli, params):
    eid = create_vehicle(hcli)
    assert_problem(hcli.get(tpath(eid), params=params), 400, "InvalidRequest")


def test_timeproperty_created_at(hcli):
    eid = create_vehicle(hcli)
    b = hcli.get(tpath(eid), params={"timeproperty": "createdAt", "timerel": "after",
                                    "timeAt": "2000-01-01T00:00:00Z", "attrs": "speed",
                                    "options": "sysAttrs"}).json()
    assert len(b["speed"]) == 3 and all("createdAt" in i for i in b["speed"])
    b = hcli.get(tpath(eid), params={"timeproperty": "createdAt", "timerel": "before",
                                    "timeAt": "2000-01-01T00:00:00Z"}).json()
    assert "speed" not in b


# ---- lastN -----------------------------------------------------------------

def test_last_n(hcli):
    eid = create_vehicle(hcli)
    b = hcli.get(tpath(eid), params={"lastN": "2"}).json()
    assert values(b["speed"]) == [80, 100]
    assert values(b["fuelLevel"]) == [53, 40]


# ---- 5.7.3 retrieve ---------------------------------------------------------

def test_5_7_3_unknown_entity_404_and_bad_id_400(hcli):
    hcli.ensure_tenant()
    assert_problem(hcli.get(tpath("urn:ngsi-ld:Vehicle:none")), 404, "ResourceNotFound")
    assert_problem(hcli.get("/temporal/entities/notauri"), 400, "BadRequestData")


def test_5_7_3_attrs_naming_no_attribute_404(hcli):
    eid = create_vehicle(hcli)
    assert_problem(hcli.get(tpath(eid), params={"attrs": "unknown"}), 404, "ResourceNotFound")


def test_5_7_3_attrs_projection(hcli):
    eid = create_vehicle(hcli)
    b = hcli.get(tpath(eid), params={"attrs": "fuelLevel"}).json()
    assert set(b) == {"id", "type", "fuelLevel"}


def test_4_21_pick_and_omit(hcli):
    eid = create_vehicle(hcli)
    b = hcli.get(tpath(eid), params={"pick": "id,speed"}).json()
    assert set(b) == {"id", "speed"}
    b = hcli.get(tpath(eid), params={"omit": "type,speed"}).json()
    assert set(b) == {"id", "fuelLevel"}
    assert_problem(hcli.get(tpath(eid), params={"pick": "speed", "omit": "type"}), 400, "BadRequestData")
    assert_problem(hcli.get(tpath(eid), params={"pick": "speed", "attrs": "speed"}), 400, "BadRequestData")


def test_4_5_5_dataset_id(hcli):
    eid = uid("Vehicle")
    r = hcli.post("/temporal/entities", tent(eid, speed=[obs(1, T0), obs(2, T1, datasetId=DS1),
                                                        obs(3, T2, datasetId=DS1)]))
    assert r.status_code == 201, r.text
    b = hcli.get(tpath(eid), params={"datasetId": DS1}).json()
    assert values(b["speed"]) == [2, 3] and all(i["datasetId"] == DS1 for i in b["speed"])
    b = hcli.get(tpath(eid), params={"datasetId": "@none"}).json()
    assert values(b["speed"]) == [1]


# ---- 4.5.9 temporalValues ---------------------------------------------------

def test_4_5_9_temporal_values(hcli):
    eid = create_vehicle(hcli)
    for params in ({"options": "temporalValues"}, {"format": "temporalValues"},
                   {"format": "temporalValues", "options": "aggregatedValues"}):
        b = hcli.get(tpath(eid), params=dict(params, attrs="speed")).json()
        assert b["speed"] == {"type": "Property", "values": [[120, T0], [80, T1], [100, T2]]}, params


def test_4_5_9_temporal_values_of_an_instance_without_observed_at(hcli):
    """A value written through the core API without observedAt: its pair's
    time is when it was recorded (createdAt), a DateTime (before, the time of
    no time, INT64_MIN, was formatted: undefined behaviour, caught by UBSan)."""
    eid = uid("Vehicle")
    r = hcli.post("/entities", {"id": eid, "type": "Vehicle", "speed": {"type": "Property", "value": 7}})
    assert r.status_code == 201, r.text
    b = hcli.get(tpath(eid), params={"options": "temporalValues,sysAttrs"}).json()
    n = hcli.get(tpath(eid), params={"options": "sysAttrs"}).json()
    pair = b["speed"]["values"][0]
    assert pair[0] == 7 and pair[1][:4] == n["speed"][0]["createdAt"][:4] and pair[1].endswith("Z"), b


def test_4_5_9_temporal_values_of_a_relationship(hcli):
    eid = uid("Vehicle")
    r = hcli.post("/temporal/entities", tent(eid, owner=[
        {"type": "Relationship", "object": "urn:ngsi-ld:P:1", "observedAt": T0},
        {"type": "Relationship", "object": "urn:ngsi-ld:P:2", "observedAt": T1}]))
    assert r.status_code == 201, r.text
    b = hcli.get(tpath(eid), params={"options": "temporalValues"}).json()
    assert b["owner"] == {"type": "Relationship", "objects": [["urn:ngsi-ld:P:1", T0], ["urn:ngsi-ld:P:2", T1]]}


# ---- 4.5.19 aggregatedValues ------------------------------------------------

def test_4_5_19_aggregated_values_per_hour(hcli):
    eid = create_vehicle(hcli)
    b = hcli.get(tpath(eid), params={"options": "aggregatedValues", "aggrMethods": "avg,max",
                                    "aggrPeriodDuration": "PT1H", "timerel": "after",
                                    "timeAt": "2020-01-01T12:03:00Z"}).json()
    assert b["speed"] == {"type": "Property",
                          "avg": [[100.0, T0, "2020-08-01T13:03:00Z"]],
                          "max": [[120.0, T0, "2020-08-01T13:03:00Z"]]}
    assert b["fuelLevel"]["avg"] == [[67.0, T0, "2020-08-01T13:03:00Z"],
                                     [53.0, "2020-08-01T13:03:00Z", "2020-08-01T14:03:00Z"],
                                     [40.0, "2020-08-01T14:03:00Z", "2020-08-01T15:03:00Z"]]
    r = hcli.get(tpath(eid), params={"options": "aggregatedValues", "aggrMethods": "avg,max",
                                    "aggrPeriodDuration": "PT1H"})
    assert '"avg":[[100.0,' in r.text.replace(" ", "")      # a number with a fraction


def test_4_5_19_every_method_whole_range(hcli):
    eid = create_vehicle(hcli)
    b = hcli.get(tpath(eid), params={"format": "aggregatedValues", "attrs": "speed",
                                    "aggrMethods": "totalCount,distinctCount,sum,avg,min,max,stddev,sumsq",
                                    "aggrPeriodDuration": "PT0S"}).json()
    s = b["speed"]
    assert s["totalCount"][0][0] == 3 and s["distinctCount"][0][0] == 3
    assert s["sum"][0][0] == 300 and s["avg"][0][0] == 100
    assert s["min"][0][0] == 80 and s["max"][0][0] == 120
    assert abs(s["stddev"][0][0] - 16.3299316) < 1e-6
    assert s["sumsq"][0][0] == 120 * 120 + 80 * 80 + 100 * 100
    assert s["sum"][0][1:] == [T0, T2]


def test_5_7_4_4_aggregation_that_does_not_apply_is_invalid_request(hcli):
    eid = uid("Vehicle")
    r = hcli.post("/temporal/entities", tent(eid, name=[obs("a", T0), obs("b", T1)],
                                            sizes=[obs([1, 2], T0), obs([1, 2, 3, 4], T1)]))
    assert r.status_code == 201, r.text
    agg = {"format": "aggregatedValues", "aggrPeriodDuration": "PT0S"}
    assert_problem(hcli.get(tpath(eid), params=dict(agg, aggrMethods="avg", attrs="name")), 400, "InvalidRequest")
    b = hcli.get(tpath(eid), params=dict(agg, aggrMethods="max,totalCount", attrs="name")).json()
    assert b["name"]["max"][0][0] == "b" and b["name"]["totalCount"][0][0] == 2
    b = hcli.get(tpath(eid), params=dict(agg, aggrMethods="avg,max", attrs="sizes")).json()
    assert b["sizes"]["avg"][0][0] == 3 and b["sizes"]["max"][0][0] == 4      # arrays by their size


# ---- 5.7.4 query, 6.24 POST query -----------------------------------------

def test_5_7_4_query_by_type_and_id(hcli):
    a, b = create_vehicle(hcli), create_vehicle(hcli)
    r = hcli.get("/temporal/entities", params={"type": "Vehicle", "timerel": "after", "timeAt": T1})
    assert r.status_code == 200, r.text
    got = {e["id"]: values(e["speed"]) for e in r.json()}
    assert got == {a: [80, 100], b: [80, 100]}
    r = hcli.get("/temporal/entities", params={"type": "Vehicle", "id": a, "lastN": "1"})
    assert [e["id"] for e in r.json()] == [a]


def test_5_7_4_query_needs_a_selection_400(hcli):
    hcli.ensure_tenant()
    assert_problem(hcli.get("/temporal/entities", params={"timerel": "after", "timeAt": T0}), 400,
                   "BadRequestData")


def test_5_7_4_query_q_and_pagination(hcli):
    ids = [create_vehicle(hcli) for _ in range(3)]
    r = hcli.get("/temporal/entities", params={"type": "Vehicle", "limit": "2", "count": "true"})
    assert r.status_code == 200 and len(r.json()) == 2
    assert r.headers["NGSILD-Results-Count"] == "3"
    assert 'rel="next"' in r.headers.get("Link", "")
    r = hcli.get("/temporal/entities", params={"type": "Vehicle", "q": "speed==100"})
    assert sorted(e["id"] for e in r.json()) == sorted(ids)
    r = hcli.get("/temporal/entities", params={"type": "Vehicle", "q": "speed==7"})
    assert r.json() == []


def test_6_24_post_query(hcli):
    a = create_vehicle(hcli)
    body = {"type": "Query", "entities": [{"type": "Vehicle"}],
            "temporalQ": {"timerel": "before", "timeAt": T1}, "attrs": ["speed"]}
    r = hcli.post("/temporal/entityOperations/query", body)
    assert r.status_code == 200, r.text
    assert [(e["id"], values(e["speed"])) for e in r.json()] == [(a, [120])]
    del body["temporalQ"]
    assert_problem(hcli.post("/temporal/entityOperations/query", body), 400, "BadRequestData")
    body["temporalQ"] = {"timerel": "between", "timeAt": T0}
    assert_problem(hcli.post("/temporal/entityOperations/query", body), 400, "BadRequestData")


# ---- 6.3.10 pagination of instances -----------------------------------------

def test_6_3_10_partial_content_forwards(lcli):
    eid = create_vehicle(lcli)
    r = lcli.get(tpath(eid), params={"timerel": "after", "timeAt": "2020-01-01T00:00:00Z"})
    assert r.status_code == 206, r.text
    b = r.json()
    assert len(b["speed"]) + len(b["fuelLevel"]) == 5
    assert r.headers["Content-Range"] == "DateTime 2020-01-01T00:00:00Z-2020-08-01T13:05:00Z/*"


def test_6_3_10_partial_content_backwards_with_last_n(lcli):
    eid = create_vehicle(lcli)
    r = lcli.get(tpath(eid), params={"lastN": "3", "timerel": "before", "timeAt": "2021-01-01T00:00:00Z"})
    assert r.status_code == 206, r.text
    b = r.json()
    # the last 5 by time: the two instances at 12:03 are both in or both out (out)
    assert values(b["fuelLevel"]) == [53, 40] and values(b["speed"]) == [80, 100]
    assert r.headers["Content-Range"] == "DateTime 2021-01-01T00:00:00Z-2020-08-01T12:05:00Z/3"


def test_6_3_10_full_answer_is_200(lcli):
    eid = create_vehicle(lcli)
    r = lcli.get(tpath(eid), params={"attrs": "speed"})
    assert r.status_code == 200 and "Content-Range" not in r.headers


# ---- 5.6.12 - 5.6.16 --------------------------------------------------------

def test_5_6_12_add_attributes(hcli):
    eid = create_vehicle(hcli)
    r = hcli.post(tpath(eid, "/attrs"), {"speed": [obs(90, "2020-08-01T12:09:00Z")],
                                         "load": [obs(1, T0), obs(2, T1)]})
    assert r.status_code == 204, r.text
    b = hcli.get(tpath(eid)).json()
    assert values(b["speed"]) == [120, 80, 100, 90] and values(b["load"]) == [1, 2]
    assert hcli.entity(eid)["load"]["value"] == 2
    assert_problem(hcli.post(tpath("urn:ngsi-ld:Vehicle:none", "/attrs"), {"load": [obs(1, T0)]}), 404,
                   "ResourceNotFound")


def test_5_6_13_delete_attribute(hcli):
    eid = uid("Vehicle")
    hcli.post("/temporal/entities", tent(eid, speed=[obs(1, T0), obs(2, T1, datasetId=DS1)], load=[obs(3, T0)]))
    r = hcli.delete(tpath(eid, "/attrs/speed"), params={"datasetId": DS1})
    assert r.status_code == 204, r.text
    assert values(hcli.get(tpath(eid)).json()["speed"]) == [1]
    assert hcli.delete(tpath(eid, "/attrs/speed"), params={"deleteAll": "true"}).status_code == 204
    assert "speed" not in hcli.get(tpath(eid)).json()
    assert_problem(hcli.delete(tpath(eid, "/attrs/speed")), 404, "ResourceNotFound")
    assert_problem(hcli.delete(tpath(eid, "/attrs/load"), params={"deleteAll": "maybe"}), 400, "BadRequestData")


def test_5_6_14_modify_and_5_6_15_delete_instance(hcli):
    eid = create_vehicle(hcli)
    inst = hcli.get(tpath(eid), params={"attrs": "speed"}).json()["speed"]
    iid = inst[1]["instanceId"]
    r = hcli.patch(tpath(eid, "/attrs/speed/" + iid), {"speed": [{"type": "Property", "value": 81}]})
    assert r.status_code == 204, r.text
    after = hcli.get(tpath(eid), params={"attrs": "speed"}).json()["speed"]
    assert values(after) == [120, 81, 100] and after[1]["instanceId"] == iid and after[1]["observedAt"] == T1
    assert hcli.delete(tpath(eid, "/attrs/speed/" + iid)).status_code == 204
    assert values(hcli.get(tpath(eid), params={"attrs": "speed"}).json()["speed"]) == [120, 100]
    assert_problem(hcli.delete(tpath(eid, "/attrs/speed/" + iid)), 404, "ResourceNotFound")
    assert_problem(hcli.patch(tpath(eid, "/attrs/speed/urn:ngsi-ld:attribute:instance:00000000000000ff"),
                              {"value": 1}), 404, "ResourceNotFound")
    assert_problem(hcli.delete(tpath(eid, "/attrs/speed/notauri")), 400, "BadRequestData")


def test_5_6_14_4_attribute_name_not_present_is_bad_request_data(hcli):
    """5.6.14.4 (and 5.6.15.4): an Attribute name that is not present (an
    empty path segment, .../attrs//{instanceId}) is BadRequestData, as an
    entity id that is not present is; the ETSI case 016_02_06 expects 405
    (doc/api.md)."""
    eid = create_vehicle(hcli)
    iid = hcli.get(tpath(eid), params={"attrs": "speed"}).json()["speed"][0]["instanceId"]
    assert_problem(hcli.patch(tpath(eid, "/attrs//" + iid), {"value": 1}), 400, "BadRequestData")
    assert_problem(hcli.delete(tpath(eid, "/attrs//" + iid)), 400, "BadRequestData")
    assert_problem(hcli.patch(tpath(eid, "/attrs/invalid(Id/" + iid), {"value": 1}), 400, "BadRequestData")
    assert values(hcli.get(tpath(eid), params={"attrs": "speed"}).json()["speed"]) == [120, 80, 100]


def test_5_6_16_delete_temporal_entity(hcli):
    eid = create_vehicle(hcli)
    r = hcli.delete(tpath(eid))
    assert r.status_code == 204 and r.content == b""
    assert_problem(hcli.get(tpath(eid)), 404, "ResourceNotFound")
    assert_problem(hcli.delete(tpath(eid)), 404, "ResourceNotFound")
    # the entity as a whole: the core version is gone too, and the id is new again
    assert hcli.get("/entities/" + eid).status_code == 404
    assert hcli.post("/temporal/entities", vehicle(eid)).status_code == 201


def test_5_6_16_delete_of_an_entity_with_only_a_core_version(hcli):
    eid = uid("Room")
    hcli.create(entity(eid, "Room", t=obs(1, T0)))
    assert hcli.delete(tpath(eid)).status_code == 204
    assert hcli.get("/entities/" + eid).status_code == 404


def test_deleted_language_property_instance_carries_a_null_language_map(hcli):
    eid = uid("Room")
    hcli.create(entity(eid, "Room", name={"type": "LanguageProperty", "languageMap": {"en": "x"}}))
    assert hcli.delete("/entities/%s/attrs/name" % eid).status_code == 204
    d = hcli.get(tpath(eid), params={"timeproperty": "deletedAt"}).json()
    assert d["name"][0]["languageMap"] == {"@none": NGSI_NULL}


# ---- bounds -----------------------------------------------------------------

def test_history_max_instances_bounds_every_series(broker_factory, make_client, history_flags):
    c = make_client(broker_factory(*(history_flags + ("--historyMaxInstances", "3"))))
    eid = uid("Room")
    c.create(entity(eid, "Room", t=obs(0, "2020-01-01T00:00:00Z")))
    for i in range(1, 10):
        r = c.patch("/entities/%s/attrs" % eid, {"t": obs(i, "2020-01-01T00:00:%02dZ" % i)})
        assert r.status_code == 204
    assert values(c.get(tpath(eid)).json()["t"]) == [7, 8, 9]


def test_history_retention_drops_old_instances(broker_factory, make_client, history_flags):
    c = make_client(broker_factory(*(history_flags + ("--historyRetention", "P1D"))))
    eid = uid("Room")
    r = c.post("/temporal/entities", tent(eid, "Room", t=[obs(1, "2001-01-01T00:00:00Z"),
                                                          obs(2, "2001-01-02T00:00:00Z")]))
    assert r.status_code == 201, r.text
    c.patch("/entities/%s/attrs" % eid, {"t": obs(3, "2099-01-01T00:00:00Z")})
    r = c.get(tpath(eid))
    assert "t" in r.json(), r.text
    assert values(r.json()["t"]) == [3]


def test_history_none_refuses_the_temporal_api(cli):
    cli.ensure_tenant()
    assert_problem(cli.get("/temporal/entities/urn:ngsi-ld:X:1"), 422, "OperationNotSupported")


def test_tenants_are_apart(hcli, make_client, broker_factory, history_flags):
    eid = create_vehicle(hcli)
    other = make_client(broker_factory(*history_flags))
    other.ensure_tenant()
    assert_problem(other.get(tpath(eid)), 404, "ResourceNotFound")


def test_4_5_6_scope_as_a_temporal_property(hcli):
    eid = uid("Vehicle")
    r = hcli.post("/temporal/entities", tent(eid, scope=["/a/b", "/c"], speed=[obs(1, T0)]))
    assert r.status_code == 201, r.text
    b = hcli.get(tpath(eid), params={"timeproperty": "createdAt", "timerel": "after",
                                    "timeAt": "2000-01-01T00:00:00Z"}).json()
    assert b["scope"][0]["value"] == ["/a/b", "/c"] and b["scope"][0]["type"] == "Property"
    assert hcli.delete("/entities/%s/attrs/scope" % eid).status_code == 204
    d = hcli.get(tpath(eid), params={"timeproperty": "deletedAt"}).json()
    assert [i["value"] for i in d["scope"]] == [[]] and "deletedAt" in d["scope"][0]
    v = hcli.get(tpath(eid), params={"timeproperty": "deletedAt", "options": "temporalValues"}).json()
    assert v["scope"]["values"][0][0] == []


def test_relationship_instances(hcli):
    eid = uid("Car")
    hcli.create(entity(eid, "Car", owner=rel("urn:ngsi-ld:P:1")))
    hcli.patch("/entities/%s/attrs" % eid, {"owner": rel("urn:ngsi-ld:P:2")})
    b = hcli.get(tpath(eid)).json()
    assert [i["object"] for i in b["owner"]] == ["urn:ngsi-ld:P:1", "urn:ngsi-ld:P:2"]


def test_concurrent_writers_and_temporal_readers(hcli, make_client, broker_factory, history_flags):
    """Writers of several entities and temporal readers at once: every write is
    one instance, none lost or doubled (the hook runs per tenant in commit
    order; queries take the history's read lock)."""
    import threading
    ids = [uid("Room") for _ in range(4)]
    for eid in ids:
        hcli.create(entity(eid, "Room", t=obs(-1, "2019-01-01T00:00:00Z")))
    errors = []

    def writer(eid):
        c = make_client(broker_factory(*history_flags), tenant=hcli.tenant)
        for i in range(50):
            r = c.patch("/entities/%s/attrs" % eid, {"t": obs(i, "2020-01-01T00:00:%02dZ" % i)})
            if r.status_code != 204:
                errors.append(r.text)

    def reader():
        c = make_client(broker_factory(*history_flags), tenant=hcli.tenant)
        for _ in range(30):
            r = c.get("/temporal/entities", params={"type": "Room", "lastN": "5"})
            if r.status_code != 200:
                errors.append(r.text)

    threads = [threading.Thread(target=writer, args=(e,)) for e in ids] + \
        [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    for eid in ids:
        v = values(hcli.get(tpath(eid), params={"attrs": "t"}).json()["t"])
        assert v == [-1] + list(range(50))


@pytest.mark.parametrize("body", [
    [], "x", 3, None,
    {"speed": [obs(1, T0)]},                                   # no id
    tent("urn:ngsi-ld:V:x", speed={"type": "Property"}),
    tent("urn:ngsi-ld:V:x", speed=[{"type": "Property", "value": 1, "observedAt": "yesterday"}]),
    tent("urn:ngsi-ld:V:x", speed=[[obs(1, T0)]]),
    tent("urn:ngsi-ld:V:x", **{"bad name!": [obs(1, T0)]}),
    tent("urn:ngsi-ld:V:x", speed=[{"type": "Relationship", "value": 1}]),
])
def test_5_6_11_every_bad_body_is_400_and_writes_nothing(hcli, body):
    hcli.ensure_tenant()
    r = hcli.request("POST", "/temporal/entities", data=json_text(body), ctype="application/json")
    assert r.status_code == 400, r.text
    assert r.json()["type"].endswith(("BadRequestData", "InvalidRequest"))
    assert hcli.get(tpath("urn:ngsi-ld:V:x")).status_code == 404


def json_text(v):
    import json
    return json.dumps(v).encode()


def test_bad_paths_and_bodies_of_attrs_and_instances(hcli):
    eid = create_vehicle(hcli)
    iid = hcli.get(tpath(eid), params={"attrs": "speed"}).json()["speed"][0]["instanceId"]
    assert_problem(hcli.post(tpath(eid, "/attrs"), {"speed": "x"}), 400, "BadRequestData")
    assert_problem(hcli.post(tpath(eid, "/attrs"), {"speed": []}), 400, "BadRequestData")
    assert_problem(hcli.post(tpath("notauri", "/attrs"), {"speed": [obs(1, T0)]}), 400, "BadRequestData")
    r = hcli.request("PATCH", tpath(eid, "/attrs/speed/" + iid), data=b"[1,2]", ctype="application/json")
    assert r.status_code == 400, r.text
    assert_problem(hcli.patch(tpath(eid, "/attrs/speed/" + iid), {"speed": [obs(1, T0), obs(2, T1)]}), 400,
                   "BadRequestData")
    assert_problem(hcli.patch(tpath(eid, "/attrs/speed/" + iid), {"value": 1, "datasetId": DS1}), 400,
                   "BadRequestData")
    assert_problem(hcli.patch(tpath(eid, "/attrs/fuelLevel/" + iid), {"value": 1}), 404, "ResourceNotFound")
    assert_problem(hcli.delete(tpath(eid, "/attrs/bad name!")), 400, "BadRequestData")
    assert_problem(hcli.delete(tpath(eid, "/attrs/speed"), params={"datasetId": "not a uri"}), 400,
                   "BadRequestData")
    # nothing of the above changed the history
    assert values(hcli.get(tpath(eid), params={"attrs": "speed"}).json()["speed"]) == [120, 80, 100]


@pytest.mark.parametrize("params", [{"lastN": "99999999999999999999"}, {"lastN": "18446744073709551615"},
                                    {"timeAt": "9999-12-31T23:59:59Z", "timerel": "before"},
                                    {"timeAt": "0001-01-01T00:00:00Z", "timerel": "after"},
                                    {"aggrMethods": "avg", "format": "aggregatedValues",
                                     "aggrPeriodDuration": "P99999999Y"},
                                    {"aggrMethods": "avg,avg,max", "format": "aggregatedValues",
                                     "aggrPeriodDuration": "PT0.000001S"}])
def test_extreme_parameters_answer_cleanly(hcli, params):
    eid = create_vehicle(hcli)
    r = hcli.get(tpath(eid), params=params)
    assert r.status_code in (200, 400), r.text


def test_query_of_many_entities_in_chunks_while_writers_delete_and_create(make_client, broker_factory, history_flags):
    """A temporal query over more entities than one chunk (256: the history's
    read lock is released between chunks, so writers are not held back)
    answers every entity once, in creation order, while other entities of the
    tenant are deleted and created meanwhile."""
    import threading
    b = broker_factory(*history_flags)
    hcli = make_client(b)
    ids = [uid("Pile") for _ in range(700)]
    for k in range(0, len(ids), 100):
        r = hcli.post("/entityOperations/create",
                      [entity(i, "Pile", t=obs(n, T0)) for n, i in enumerate(ids[k:k + 100], k)])
        assert r.status_code == 201, r.text
    churn = [uid("Pile") for _ in range(40)]
    errors, stop = [], []

    def writer():
        c = make_client(b, tenant=hcli.tenant)
        while not stop:
            for i in churn:
                r = c.post("/entities", entity(i, "Pile", t=obs(0, T1)))
                if r.status_code != 201:
                    errors.append(r.text)
            for i in churn:
                r = c.delete("/temporal/entities/" + i)
                if r.status_code != 204:
                    errors.append(r.text)

    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(8):
            r = hcli.get("/temporal/entities", params={"type": "Pile", "limit": "1000", "lastN": "1"})
            assert r.status_code == 200, r.text
            got = [e["id"] for e in r.json()]
            assert [i for i in got if i not in churn] == ids
            assert len(set(got)) == len(got)
    finally:
        stop.append(1)
        t.join()
    assert not errors, errors[:3]


def test_4_15_lang_reduces_languagemaps_in_temporal_values(hcli):
    """lang with temporalValues (4.5.9, 4.15): a LanguageProperty's
    languageMaps become a Property's values, strings in the language asked
    for; without lang the languageMaps are kept."""
    eid = uid("Room")
    says = [{"type": "LanguageProperty", "languageMap": {"en": "yes", "fr": "oui"}, "observedAt": T0},
            {"type": "LanguageProperty", "languageMap": {"en": "no", "fr": "non"}, "observedAt": T1}]
    r = hcli.post("/temporal/entities", tent(eid, "Room", says=says))
    assert r.status_code == 201, r.text
    r = hcli.get(tpath(eid), params={"format": "temporalValues", "lang": "fr"})
    assert r.status_code == 200, r.text
    assert r.json()["says"] == {"type": "Property", "values": [["oui", T0], ["non", T1]]}
    r = hcli.get("/temporal/entities", params={"type": "Room", "id": eid, "options": "temporalValues",
                                               "lang": "en"})
    assert r.json()[0]["says"]["values"] == [["yes", T0], ["no", T1]]
    r = hcli.get(tpath(eid), params={"format": "temporalValues"})
    assert r.json()["says"] == {"type": "LanguageProperty", "languageMaps": [
        [{"languageMap": {"en": "yes", "fr": "oui"}}, T0], [{"languageMap": {"en": "no", "fr": "non"}}, T1]]}


def test_5_7_4_4_orderby_orders_the_temporal_query_as_the_entity_query(hcli):
    """orderBy (4.23) on GET /temporal/entities and in the Query body of POST
    /temporal/entityOperations/query: the entities in the order of the entity
    query (the newest version's values), paged after ordering."""
    typ = "Ord" + "".join(c for c in uid("x") if c.isalnum())[-8:]
    speeds = [30, 10, 50, 20, 40]
    ids = []
    for v in speeds:
        eid = uid(typ)
        ids.append(eid)
        assert hcli.post("/temporal/entities", tent(eid, typ, speed=[obs(v, T0)])).status_code == 201
    by_speed_desc = [i for _, i in sorted(zip(speeds, ids), reverse=True)]
    r = hcli.get("/temporal/entities", params={"type": typ, "orderBy": "speed;desc"})
    assert r.status_code == 200, r.text
    assert [e["id"] for e in r.json()] == by_speed_desc
    r = hcli.get("/temporal/entities", params={"type": typ, "orderBy": "speed", "limit": "2", "offset": "1",
                                               "count": "true"})
    assert [e["id"] for e in r.json()] == by_speed_desc[::-1][1:3]
    assert r.headers.get("NGSILD-Results-Count") == "5"
    # the entity query orders the same way
    core = hcli.get("/entities", params={"type": typ, "orderBy": "speed;desc"})
    assert [e["id"] for e in core.json()] == by_speed_desc
    r = hcli.post("/temporal/entityOperations/query", {
        "type": "Query", "entities": [{"type": typ}], "temporalQ": {"timerel": "after", "timeAt": T0},
        "ordering": {"orderBy": ["speed;desc"]}})
    assert r.status_code == 200, r.text
    assert [e["id"] for e in r.json()] == by_speed_desc
    r = hcli.get("/temporal/entities", params={"type": typ, "orderBy": "speed;sideways"})
    assert r.status_code == 400


def test_6_3_20_unknown_parameter_first(hcli):
    """6.3.20: an unknown parameter is InvalidRequest, checked before the body
    and the other parameters (ETSI 059_01_03, 059_01_04)."""
    r = hcli.post("/temporal/entities", {"id": "not a uri"}, params={"invalidParams": "invalidValue"})
    assert_problem(r, 400, "InvalidRequest")
    r = hcli.get("/temporal/entities", params={"invalidParams": "invalidValue", "type": "Building"})
    assert_problem(r, 400, "InvalidRequest")
    r = hcli.get("/temporal/entities", params={"type": "Building", "timerel": "before",
                                               "timeAt": "2020-01-01T00:00:00Z", "lastN": "2", "local": "true"})
    assert r.status_code == 200, r.text
