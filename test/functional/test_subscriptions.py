"""Subscriptions (5.2.12-5.2.15, 5.8.1-5.8.5, 6.10, 6.11) and their
notifications (5.3.1, 5.8.6, 6.3.8), against the real receiver (tools/receiver)."""

import time

import pytest

from ngsi import NGSI_NULL, assert_problem, entity, prop, uid
from receiver import Receiver, wait_failed


@pytest.fixture
def rcv():
    r = Receiver()
    yield r
    r.stop()


def sub(uri, **members):
    s = {"type": "Subscription", "entities": [{"type": "Car"}],
         "notification": {"endpoint": {"uri": uri}, "sysAttrs": True}}
    notification = members.pop("notification", None)
    if notification is not None:
        s["notification"].update(notification)
    s.update(members)
    return s


def create_sub(cli, body):
    r = cli.post("/subscriptions", body)
    assert r.status_code == 201, r.text
    return r.headers["Location"].rsplit("/", 1)[1]


def data(rcv, n, timeout=10):
    rcv.wait(n, timeout)
    return [x["body"] for x in rcv.notifications()]


# ---------------------------------------------------------------- 5.8.1 create

def test_5_8_1_create_answers_201_with_location(cli, rcv):
    sid = uid("Subscription")
    r = cli.post("/subscriptions", sub(rcv.uri, id=sid))
    assert r.status_code == 201
    assert r.headers["Location"] == "/ngsi-ld/v1/subscriptions/" + sid
    g = cli.get("/subscriptions/" + sid)
    assert g.status_code == 200
    b = g.json()
    assert b["id"] == sid and b["type"] == "Subscription"
    assert b["status"] == "active"
    assert b["notification"]["endpoint"]["uri"] == rcv.uri
    assert b["notification"]["timesSent"] == 0 and b["notification"]["timesFailed"] == 0
    assert "status" not in b["notification"]          # no notification attempted yet
    assert "jsonldContext" in b
    assert "createdAt" not in b and "isActive" not in b
    s = cli.get("/subscriptions/" + sid, params={"options": "sysAttrs"}).json()
    assert "createdAt" in s and "modifiedAt" in s and s["notification"]["coraine:due"] == 0


def test_5_8_1_generated_id(cli, rcv):
    sid = create_sub(cli, sub(rcv.uri))
    assert sid.startswith("urn:ngsi-ld:Subscription:")


def test_5_8_1_duplicate_id_is_409(cli, rcv):
    sid = uid("Subscription")
    create_sub(cli, sub(rcv.uri, id=sid))
    assert_problem(cli.post("/subscriptions", sub(rcv.uri, id=sid)), 409, "AlreadyExists")


@pytest.mark.parametrize("members,why", [
    ({"entities": None, "watchedAttributes": None}, "neither entities nor watchedAttributes"),
    ({"entities": []}, "empty entities"),
    ({"watchedAttributes": []}, "empty watchedAttributes"),
    ({"timeInterval": 10, "watchedAttributes": ["speed"]}, "timeInterval with watchedAttributes"),
    ({"timeInterval": 10, "throttling": 5}, "timeInterval with throttling"),
    ({"throttling": 0}, "throttling 0"),
    ({"throttling": -1}, "throttling negative"),
    ({"expiresAt": "2000-01-01T00:00:00Z"}, "expiresAt in the past"),
    ({"expiresAt": "tomorrow"}, "expiresAt not a DateTime"),
    ({"q": "speed>>3"}, "invalid q"),
    ({"q": ""}, "empty q"),
    ({"scopeQ": "/a;;("}, "invalid scopeQ"),
    ({"geoQ": {"georel": "near;maxDistance==10", "geometry": "Point", "coordinates": [1]}}, "invalid geoQ"),
    ({"notificationTrigger": ["entityExploded"]}, "unknown trigger"),
    ({"notificationTrigger": []}, "empty triggers"),
    ({"unknownMember": 1}, "unknown member"),
    ({"type": "Subscriptions"}, "wrong type"),
    ({"id": "not a uri"}, "id not a URI"),
    ({"entities": [{"id": "urn:x"}]}, "entity selector without type"),
    ({"entities": [{"type": "Car", "idPattern": "(("}]}, "bad idPattern"),
    ({"notification": {"pick": ["speed"], "omit": ["speed"]}}, "pick and omit the same"),
    ({"notification": {"format": "fancy"}}, "unknown format"),
    ({"notification": {"endpoint": {"uri": "not a uri"}}}, "endpoint uri"),
    ({"notification": {"endpoint": {"uri": "http://x/", "accept": "text/plain"}}}, "endpoint accept"),
    ({"notification": {"endpoint": {"uri": "http://x/", "receiverInfo": [{"key": "a"}]}}}, "receiverInfo"),
    ({"notification": {"attributes": []}}, "empty attributes"),
    ({"notification": {"colour": "red"}}, "unknown notification member"),
    ({"isActive": "yes"}, "isActive not a boolean"),
])
def test_5_8_1_invalid_subscriptions_are_400(cli, rcv, members, why):
    body = sub(rcv.uri)
    for k, v in members.items():
        if k == "notification":
            body["notification"].update(v)
        elif v is None:
            body.pop(k, None)
        else:
            body[k] = v
    r = cli.post("/subscriptions", body)
    assert_problem(r, 400, "BadRequestData")
    # nothing was created (the tenant does not even exist)
    assert_problem(cli.get("/subscriptions"), 404, "NonexistentTenant")


def test_5_8_1_missing_notification_is_400(cli):
    assert_problem(cli.post("/subscriptions", {"type": "Subscription", "entities": [{"type": "Car"}]}),
                   400, "BadRequestData")


def test_5_8_1_unreachable_context_is_503(cli, rcv):
    r = cli.post("/subscriptions", sub(rcv.uri), headers={
        "Link": '<http://127.0.0.1:1/nothing.jsonld>; rel="http://www.w3.org/ns/json-ld#context"; '
                'type="application/ld+json"'})
    assert_problem(r, 503, "LdContextNotAvailable")


# ---------------------------------------------------------------- 5.8.3 / 5.8.4 / 5.8.5

def test_6_11_get_bad_id_is_400_and_unknown_is_404(cli):
    assert_problem(cli.get("/subscriptions/not%20a%20uri"), 400, "BadRequestData")
    cli.ensure_tenant()
    assert_problem(cli.get("/subscriptions/urn:nothing"), 404, "ResourceNotFound")
    assert_problem(cli.delete("/subscriptions/urn:nothing"), 404, "ResourceNotFound")
    assert_problem(cli.patch("/subscriptions/urn:nothing", {"isActive": False}), 404, "ResourceNotFound")


def test_5_8_4_query_pages_in_creation_order(cli, rcv):
    ids = [create_sub(cli, sub(rcv.uri, id=uid("Subscription"))) for _ in range(5)]
    r = cli.get("/subscriptions", params={"limit": 2, "offset": 1, "count": "true"})
    assert r.status_code == 200
    assert [s["id"] for s in r.json()] == ids[1:3]
    assert r.headers["NGSILD-Results-Count"] == "5"
    assert r.headers["Link"] == '</ngsi-ld/v1/subscriptions?count=true&limit=2&offset=3>;rel="next";type="application/json", ' \
        '</ngsi-ld/v1/subscriptions?count=true&limit=2&offset=0>;rel="prev";type="application/json"'
    last = cli.get("/subscriptions/", params={"limit": 2, "offset": 4})     # ETSI 031_02: no trailing slash
    assert last.headers["Link"] == '</ngsi-ld/v1/subscriptions?limit=2&offset=2>;rel="prev";type="application/json"'
    assert [s["id"] for s in cli.get("/subscriptions", params={"limit": 100}).json()] == ids
    assert_problem(cli.get("/subscriptions", params={"limit": -1}), 400, "BadRequestData")


def test_5_8_5_delete_stops_notifications(cli, rcv):
    sid = create_sub(cli, sub(rcv.uri))
    r = cli.delete("/subscriptions/" + sid)
    assert r.status_code == 204
    assert_problem(cli.get("/subscriptions/" + sid), 404, "ResourceNotFound")
    cli.create(entity(uid(), "Car", speed=prop(1)))
    time.sleep(0.3)
    assert rcv.count()["notifications"] == 0


def test_4_14_subscriptions_are_per_tenant(broker, make_client, rcv):
    a, b = make_client(broker), make_client(broker)
    sid = create_sub(a, sub(rcv.uri))
    b.ensure_tenant()
    assert_problem(b.get("/subscriptions/" + sid), 404, "ResourceNotFound")
    b.create(entity(uid(), "Car", speed=prop(1)))
    time.sleep(0.3)
    assert rcv.count()["notifications"] == 0
    a.create(entity(uid(), "Car", speed=prop(1)))
    n = data(rcv, 1)
    h = rcv.notifications()[0]["headers"]
    assert h.get("NGSILD-Tenant") == a.tenant
    assert n[0]["subscriptionId"] == sid


# ---------------------------------------------------------------- 5.8.2 update

def test_5_8_2_patch_replaces_top_level_members(cli, rcv):
    sid = create_sub(cli, sub(rcv.uri, subscriptionName="one"))
    r = cli.patch("/subscriptions/" + sid, {"subscriptionName": "two", "isActive": False})
    assert r.status_code == 204, r.text
    b = cli.get("/subscriptions/" + sid).json()
    assert b["subscriptionName"] == "two" and b["status"] == "paused"
    cli.create(entity(uid(), "Car", speed=prop(1)))
    time.sleep(0.3)
    assert rcv.count()["notifications"] == 0
    assert cli.patch("/subscriptions/" + sid, {"isActive": True}).status_code == 204
    cli.create(entity(uid(), "Car", speed=prop(1)))
    assert rcv.wait(1)["notifications"] == 1


def test_5_5_8_partial_notification_is_400(cli, rcv):
    sid = create_sub(cli, sub(rcv.uri))
    assert_problem(cli.patch("/subscriptions/" + sid, {"notification": {"format": "keyValues"}}),
                   400, "BadRequestData")
    # unchanged
    assert cli.get("/subscriptions/" + sid).json()["notification"]["endpoint"]["uri"] == rcv.uri


def test_5_8_2_patch_cannot_change_id_or_be_invalid(cli, rcv):
    sid = create_sub(cli, sub(rcv.uri))
    assert_problem(cli.patch("/subscriptions/" + sid, {"id": "urn:other"}), 400, "BadRequestData")
    assert_problem(cli.patch("/subscriptions/" + sid, {"throttling": -3}), 400, "BadRequestData")
    assert_problem(cli.patch("/subscriptions/" + sid, {"bogus": 1}), 400, "BadRequestData")
    assert_problem(cli.patch("/subscriptions/" + sid, {}), 400, "BadRequestData")


def test_5_8_2_patch_keeps_counters(cli, rcv):
    sid = create_sub(cli, sub(rcv.uri))
    cli.create(entity(uid(), "Car", speed=prop(1)))
    rcv.wait(1)
    assert cli.patch("/subscriptions/" + sid, {"description": "d"}).status_code == 204
    time.sleep(0.1)
    assert cli.get("/subscriptions/" + sid).json()["notification"]["timesSent"] == 1


# ---------------------------------------------------------------- notifications

def test_5_8_6_no_notification_on_subscription_creation(cli, rcv):
    cli.create(entity(uid(), "Car", speed=prop(1)))
    create_sub(cli, sub(rcv.uri))
    time.sleep(0.3)
    assert rcv.count()["notifications"] == 0


def test_5_3_1_notification_shape_and_headers(cli, rcv):
    sid = create_sub(cli, sub(rcv.uri, notification={"endpoint": {
        "uri": rcv.uri, "receiverInfo": [{"key": "X-Auth", "value": "secret"}]}}))
    eid = uid()
    cli.create(entity(eid, "Car", speed=prop(1)))
    rcv.wait(1)
    n = rcv.notifications()[0]
    b, h = n["body"], n["headers"]
    assert b["type"] == "Notification" and b["subscriptionId"] == sid
    assert b["id"].startswith("urn:ngsi-ld:Notification:")
    assert "notifiedAt" in b
    assert b["data"][0]["id"] == eid and b["data"][0]["speed"]["value"] == 1
    assert h["Content-Type"] == "application/json"
    assert "json-ld#context" in h["Link"]
    assert h["X-Auth"] == "secret"
    s = cli.get("/subscriptions/" + sid).json()["notification"]
    assert s["timesSent"] == 1 and "lastSuccess" in s and "lastNotification" in s


def test_6_3_8_ld_json_has_context_in_entities(cli, rcv):
    create_sub(cli, sub(rcv.uri, notification={"endpoint": {"uri": rcv.uri, "accept": "application/ld+json"}}))
    cli.create(entity(uid(), "Car", speed=prop(1)))
    rcv.wait(1)
    n = rcv.notifications()[0]
    assert n["headers"]["Content-Type"] == "application/ld+json"
    assert "@context" in n["body"]["data"][0]
    assert "Link" not in n["headers"]


def test_notification_formats(cli, rcv):
    create_sub(cli, sub(rcv.uri, notification={"format": "keyValues", "sysAttrs": False}))
    cli.create(entity(uid(), "Car", speed=prop(7)))
    d = data(rcv, 1)[0]["data"][0]
    assert d["speed"] == 7
    rcv.reset()
    cli2_sub = sub(rcv.uri, entities=[{"type": "Bike"}], notification={"format": "concise", "sysAttrs": False})
    create_sub(cli, cli2_sub)
    cli.create(entity(uid(), "Bike", speed=prop(8)))
    d = data(rcv, 1)[0]["data"][0]
    assert d["speed"] == 8 or d["speed"] == {"value": 8}


def test_notification_attributes_projection(cli, rcv):
    create_sub(cli, sub(rcv.uri, notification={"attributes": ["speed"]}))
    cli.create(entity(uid(), "Car", speed=prop(1), brand=prop("x")))
    d = data(rcv, 1)[0]["data"][0]
    assert "speed" in d and "brand" not in d and "id" in d and "type" in d


def test_notification_omit(cli, rcv):
    create_sub(cli, sub(rcv.uri, notification={"omit": ["brand"]}))
    cli.create(entity(uid(), "Car", speed=prop(1), brand=prop("x")))
    d = data(rcv, 1)[0]["data"][0]
    assert "speed" in d and "brand" not in d


def test_watched_attributes(cli, rcv):
    create_sub(cli, sub(rcv.uri, watchedAttributes=["speed"]))
    eid = uid()
    cli.create(entity(eid, "Car", brand=prop("x")))           # speed not created: nothing
    assert cli.patch("/entities/%s/attrs" % eid, {"brand": prop("y")}).status_code == 204
    time.sleep(0.3)
    assert rcv.count()["notifications"] == 0
    assert cli.post("/entities/%s/attrs" % eid, {"speed": prop(3)}).status_code == 204
    rcv.wait(1)
    assert rcv.count()["notifications"] == 1


def test_watched_attributes_without_entities(cli, rcv):
    body = sub(rcv.uri, watchedAttributes=["speed"])
    del body["entities"]
    create_sub(cli, body)
    cli.create(entity(uid(), "Anything", speed=prop(1)))
    assert rcv.wait(1)["notifications"] == 1


def test_entity_selectors_id_and_pattern(cli, rcv):
    eid = uid("Car")
    create_sub(cli, sub(rcv.uri, entities=[{"id": eid, "type": "Car"}]))
    create_sub(cli, sub(rcv.uri, entities=[{"idPattern": ".*:Special:.*", "type": "Car"}]))
    cli.create(entity(eid, "Car", speed=prop(1)))
    cli.create(entity(uid("Special"), "Car", speed=prop(1)))
    cli.create(entity(uid("Other"), "Truck", speed=prop(1)))
    c = rcv.settle()
    assert c["notifications"] == 2


def test_q_filters_and_is_percent_decoded(cli, rcv):
    create_sub(cli, sub(rcv.uri, q="speed%3E10"))
    cli.create(entity(uid(), "Car", speed=prop(5)))
    cli.create(entity(uid(), "Car", speed=prop(50)))
    c = rcv.settle()
    assert c["notifications"] == 1
    assert rcv.notifications()[0]["body"]["data"][0]["speed"]["value"] == 50


def test_triggers_entity_deleted(cli, rcv):
    create_sub(cli, sub(rcv.uri, notificationTrigger=["entityDeleted"]))
    eid = uid()
    cli.create(entity(eid, "Car", speed=prop(1)))
    assert cli.delete("/entities/" + eid).status_code == 204
    d = data(rcv, 1)[0]["data"]
    assert rcv.settle()["notifications"] == 1
    assert d[0]["id"] == eid and d[0]["type"] == "Car" and "deletedAt" in d[0]
    assert "speed" not in d[0]


def test_triggers_entity_deleted_sys_attrs(cli, rcv):
    create_sub(cli, sub(rcv.uri, notificationTrigger=["entityDeleted"],
                        notification={"format": "keyValues", "sysAttrs": True}))
    eid = uid()
    cli.create(entity(eid, "Car", speed=prop(1)))
    cli.delete("/entities/" + eid)
    d = data(rcv, 1)[0]["data"][0]
    assert sorted(d) == ["createdAt", "deletedAt", "id", "modifiedAt", "type"]


def test_entity_deleted_show_changes_previous_values(cli, rcv):
    create_sub(cli, sub(rcv.uri, notificationTrigger=["entityDeleted"],
                        notification={"showChanges": True, "sysAttrs": False}))
    eid = uid()
    cli.create(entity(eid, "Car", speed=prop(1), owner={"type": "Relationship", "object": "urn:a"}))
    cli.delete("/entities/" + eid)
    d = data(rcv, 1)[0]["data"][0]
    assert d["speed"] == {"type": "Property", "value": NGSI_NULL, "previousValue": 1}
    assert d["owner"] == {"type": "Relationship", "object": NGSI_NULL, "previousObject": "urn:a"}
    assert "deletedAt" in d


def test_entity_deletion_with_attribute_deleted_trigger(cli, rcv):
    create_sub(cli, sub(rcv.uri, notificationTrigger=["attributeDeleted"], watchedAttributes=["speed"],
                        notification={"sysAttrs": False}))
    eid = uid()
    cli.create(entity(eid, "Car", speed=prop(1), brand=prop("b")))
    cli.delete("/entities/" + eid)
    d = data(rcv, 1)[0]["data"][0]
    assert d["id"] == eid and "deletedAt" in d
    assert d["speed"] == {"type": "Property", "value": NGSI_NULL}
    assert "brand" not in d


def test_triggers_entity_created_only(cli, rcv):
    create_sub(cli, sub(rcv.uri, notificationTrigger=["entityCreated"]))
    eid = uid()
    cli.create(entity(eid, "Car", speed=prop(1)))
    cli.patch("/entities/%s/attrs" % eid, {"speed": prop(2)})
    assert rcv.settle()["notifications"] == 1


def test_triggers_attribute_deleted_sends_null(cli, rcv):
    create_sub(cli, sub(rcv.uri, notificationTrigger=["attributeDeleted"]))
    eid = uid()
    cli.create(entity(eid, "Car", speed=prop(1), brand=prop("b")))
    assert cli.delete("/entities/%s/attrs/brand" % eid).status_code == 204
    d = data(rcv, 1)[0]["data"][0]
    b = d["brand"]
    assert b["type"] == "Property" and b["value"] == NGSI_NULL   # with sysAttrs: its times, and deletedAt
    assert b["deletedAt"] >= b["modifiedAt"] and "createdAt" in b
    assert d["speed"]["value"] == 1
    assert rcv.settle()["notifications"] == 1


def test_attribute_deleted_keeps_its_type_and_show_changes(cli, rcv):
    create_sub(cli, sub(rcv.uri, notificationTrigger=["attributeDeleted"],
                        notification={"showChanges": True, "sysAttrs": False}))
    eid = uid()
    cli.create(entity(eid, "Car", owner={"type": "Relationship", "object": "urn:a"},
                      title={"type": "LanguageProperty", "languageMap": {"en": "x"}},
                      name=[prop("n0"), prop("n1", datasetId="urn:ds:1")]))
    cli.delete("/entities/%s/attrs/owner" % eid)
    d = data(rcv, 1)[0]["data"][0]
    assert d["owner"] == {"type": "Relationship", "object": NGSI_NULL, "previousObject": "urn:a"}
    cli.delete("/entities/%s/attrs/title" % eid)
    d = data(rcv, 2)[1]["data"][0]
    assert d["title"] == {"type": "LanguageProperty", "languageMap": {"@none": NGSI_NULL},
                          "previousLanguageMap": {"en": "x"}}
    cli.delete("/entities/%s/attrs/name" % eid, params={"datasetId": "urn:ds:1"})
    d = data(rcv, 3)[2]["data"][0]
    assert d["name"] == [{"type": "Property", "value": "n0"},
                         {"type": "Property", "value": NGSI_NULL, "datasetId": "urn:ds:1", "previousValue": "n1"}]


def test_attribute_deleted_key_values(cli, rcv):
    create_sub(cli, sub(rcv.uri, notificationTrigger=["attributeDeleted"],
                        notification={"format": "keyValues", "sysAttrs": False}))
    eid = uid()
    cli.create(entity(eid, "Car", speed=prop(1), brand=prop("b")))
    cli.delete("/entities/%s/attrs/brand" % eid)
    assert data(rcv, 1)[0]["data"][0] == {"id": eid, "type": "Car", "speed": 1, "brand": NGSI_NULL}


def test_5_8_6_all_instances_deleted_is_one_null(cli, rcv):
    """ETSI 046_22_08: deleting every instance of an attribute is one deletion:
    the attribute is sent once as NGSI-LD Null (doc/api.md, Decisions)."""
    create_sub(cli, sub(rcv.uri, notificationTrigger=["attributeDeleted"], notification={"sysAttrs": False}))
    eid = uid()
    cli.create(entity(eid, "Car", name=[prop("n0"), prop("n1", datasetId="urn:ds:1"), prop("n2", datasetId="urn:ds:2")]))
    assert cli.delete("/entities/%s/attrs/name" % eid, params={"deleteAll": "true"}).status_code == 204
    assert data(rcv, 1)[0]["data"][0]["name"] == {"type": "Property", "value": NGSI_NULL}


def test_5_8_6_instance_deleted_key_values_dataset_map(cli, rcv):
    """ETSI 046_22_07: in keyValues the deleted instance joins the {"dataset": {...}} map."""
    create_sub(cli, sub(rcv.uri, notificationTrigger=["attributeDeleted"],
                        notification={"format": "keyValues", "sysAttrs": False}))
    eid = uid()
    cli.create(entity(eid, "Car", name=[prop("n0"), prop("n1", datasetId="urn:ds:1"), prop("n2", datasetId="urn:ds:2")],
                      other=[prop("o0"), prop("o1", datasetId="urn:ds:1")]))
    cli.delete("/entities/%s/attrs/name" % eid, params={"datasetId": "urn:ds:1"})
    d = data(rcv, 1)[0]["data"][0]
    assert d["name"] == {"dataset": {"@none": "n0", "urn:ds:2": "n2", "urn:ds:1": NGSI_NULL}}
    cli.delete("/entities/%s/attrs/other" % eid, params={"datasetId": "urn:ds:1"})
    d = data(rcv, 2)[1]["data"][0]
    assert d["other"] == {"dataset": {"@none": "o0", "urn:ds:1": NGSI_NULL}}


def test_5_2_12_dataset_id_selects_the_notified_instances(cli, rcv):
    """ETSI 046_19: datasetId selects the instances that trigger and that are sent."""
    create_sub(cli, sub(rcv.uri, datasetId=["urn:ds:fr"], notification={"sysAttrs": False}))
    eid = uid()
    cli.create(entity(eid, "Car", name=[prop("Eiffel"), prop("Tour", datasetId="urn:ds:fr"),
                                        prop("Turm", datasetId="urn:ds:de")]))
    rcv.wait(1)
    rcv.reset()
    cli.patch("/entities/%s/attrs" % eid, {"name": prop("Le Tour", datasetId="urn:ds:fr")})
    d = data(rcv, 1)[0]["data"][0]
    assert d["name"] == {"type": "Property", "value": "Le Tour", "datasetId": "urn:ds:fr"}
    cli.patch("/entities/%s/attrs" % eid, {"name": prop("Der Turm", datasetId="urn:ds:de")})
    assert rcv.settle()["notifications"] == 1          # not a watched instance
    create_sub(cli, sub(rcv.uri, datasetId=["@none"], notification={"sysAttrs": False}))
    rcv.reset()
    cli.patch("/entities/%s/attrs" % eid, {"name": prop("Eiffel Tower")})
    assert data(rcv, 1)[0]["data"][0]["name"] == {"type": "Property", "value": "Eiffel Tower"}
    assert rcv.settle()["notifications"] == 1          # only the "@none" subscription watches the default one


def _linked(cli):
    city, country, eid = uid("City"), uid("Country"), uid("Building")
    cli.create(entity(country, "Country", name=prop("France")))
    cli.create(entity(city, "City", name=prop("Paris"), isInCountry={"type": "Relationship", "object": country}))
    cli.create(entity(eid, "Building", locatedAt={"type": "Relationship", "object": city}))
    return eid, city, country


def test_5_8_6_join_flat(cli, rcv):
    """ETSI 046_23: join=flat adds the linked entities to the notification's data."""
    eid, city, country = _linked(cli)
    create_sub(cli, sub(rcv.uri, entities=[{"type": "Building"}], notification={"join": "flat", "sysAttrs": False}))
    cli.patch("/entities/%s/attrs" % eid, {"name": prop("Tour Eiffel")})
    d = data(rcv, 1)[0]["data"]
    assert [e["id"] for e in d] == [eid, city]
    assert d[1]["name"] == {"type": "Property", "value": "Paris"}
    rcv.reset()
    create_sub(cli, sub(rcv.uri, entities=[{"id": eid, "type": "Building"}],
                        notification={"join": "flat", "joinLevel": 2, "format": "keyValues", "sysAttrs": False}))
    cli.patch("/entities/%s/attrs" % eid, {"name": prop("Tour")})
    bodies = data(rcv, 2)
    two = [b for b in bodies if len(b["data"]) == 3][0]["data"]
    assert [e["id"] for e in two] == [eid, city, country] and two[2] == {"id": country, "type": "Country",
                                                                         "name": "France"}


def test_5_8_6_join_inline_with_attributes(cli, rcv):
    """ETSI 046_27, 046_30: join=inline puts the linked entity in the
    relationship; notification.attributes selects the notified entity's
    attributes, the linked one is whole (doc/api.md)."""
    eid, city, country = _linked(cli)
    create_sub(cli, sub(rcv.uri, entities=[{"type": "Building"}],
                        notification={"join": "inline", "joinLevel": 1, "attributes": ["locatedAt"],
                                      "sysAttrs": False}))
    cli.patch("/entities/%s/attrs" % eid, {"name": prop("Tour Eiffel")})
    d = data(rcv, 1)[0]["data"]
    assert len(d) == 1 and "name" not in d[0]
    rel = d[0]["locatedAt"]
    assert rel["object"] == city and rel["entity"]["id"] == city
    assert rel["entity"]["name"] == {"type": "Property", "value": "Paris"}
    assert rel["entity"]["isInCountry"] == {"type": "Relationship", "object": country}


@pytest.mark.parametrize("bad", [{"join": "deep"}, {"join": 1}, {"joinLevel": 0}, {"joinLevel": 1.5},
                                 {"join": "flat", "joinLevel": 99}])
def test_5_2_14_join_validation(cli, rcv, bad):
    assert_problem(cli.post("/subscriptions", sub(rcv.uri, notification=bad)), 400, "BadRequestData")


X = "http://example.org/x#"


def test_5_8_2_patch_in_another_context_and_get_in_the_requests(cli, rcv):
    """5.8.2, 6.3.5 (ETSI 029_05_02): the names of a PATCH in another
    @context keep their meaning; a GET answers in the request's @context."""
    mine = {"T": X + "Truck", "sp": X + "speed", "other": X + "other"}
    body = sub(rcv.uri, entities=[{"type": "T"}], watchedAttributes=["other"], q="sp>3",
               notification={"attributes": ["sp"], "sysAttrs": False})
    body["@context"] = [mine, "https://uri.etsi.org/ngsi-ld/v1/ngsi-ld-core-context-v1.8.jsonld"]
    r = cli.post("/subscriptions", body, ctype="application/ld+json")
    assert r.status_code == 201, r.text
    sid = r.headers["Location"].rsplit("/", 1)[1]
    g = cli.get("/subscriptions/" + sid).json()            # no Link: the core context, full IRIs
    assert g["entities"] == [{"type": X + "Truck"}] and g["watchedAttributes"] == [X + "other"]
    assert g["q"] == X + "speed>3" and g["notification"]["attributes"] == [X + "speed"]
    # a PATCH whose context calls the same IRIs differently
    theirs = {"Lorry": X + "Truck", "velocity": X + "speed"}
    p = cli.patch("/subscriptions/" + sid, {"watchedAttributes": ["velocity"], "entities": [{"type": "Lorry"}],
                                            "@context": [theirs, "https://uri.etsi.org/ngsi-ld/v1/ngsi-ld-core-context-v1.8.jsonld"]},
                  ctype="application/ld+json")
    assert p.status_code == 204, p.text
    g = cli.get("/subscriptions/" + sid).json()
    assert g["entities"] == [{"type": X + "Truck"}] and g["watchedAttributes"] == [X + "speed"]
    listed = [x for x in cli.get("/subscriptions").json() if x["id"] == sid][0]
    assert listed["watchedAttributes"] == [X + "speed"]
    # and it notifies on what those names mean
    eid = uid()
    cli.create(entity(eid, X + "Truck", **{X + "speed": prop(1)}))
    cli.patch("/entities/%s/attrs" % eid, {X + "speed": prop(5)})
    d = data(rcv, 1)[0]["data"][0]
    assert d["sp"] == {"type": "Property", "value": 5} and d["type"] == "T"   # notified in its own context


@pytest.mark.parametrize("expand", [["gender"], "gender,other"])
def test_5_2_12_expand_values_expands_q_values(cli, rcv, expand):
    """4.9 example 12: q=gender==Male with expandValues=gender compares the
    value with Male's IRI; without expandValues the literal is compared."""
    ctx = [{"Male": X + "Male", "gender": X + "gender"}, "https://uri.etsi.org/ngsi-ld/v1/ngsi-ld-core-context-v1.8.jsonld"]
    for members in ({"expandValues": expand}, {}):
        body = sub(rcv.uri, q="gender==Male", notification={"sysAttrs": False}, **members)
        body["@context"] = ctx
        r = cli.post("/subscriptions", body, ctype="application/ld+json")
        assert r.status_code == 201, r.text
    eid = uid()
    cli.create(entity(eid, "Car", **{X + "gender": prop(X + "Male")}))
    c = rcv.settle()
    assert c["notifications"] == 1, c       # only the expandValues one matched the IRI


def test_5_2_12_json_keys_accepted(cli, rcv):
    create_sub(cli, sub(rcv.uri, q="data[k]==1", jsonKeys="data"))
    assert_problem(cli.post("/subscriptions", sub(rcv.uri, jsonKeys=[""])), 400, "BadRequestData")


def test_default_triggers_skip_attribute_deletion(cli, rcv):
    create_sub(cli, sub(rcv.uri))
    eid = uid()
    cli.create(entity(eid, "Car", speed=prop(1), brand=prop("b")))
    rcv.wait(1)
    cli.delete("/entities/%s/attrs/brand" % eid)
    assert rcv.settle()["notifications"] == 1


def test_expires_at_turns_expired(cli, rcv):
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 2))
    sid = create_sub(cli, sub(rcv.uri, expiresAt=at))
    assert cli.get("/subscriptions/" + sid).json()["status"] == "active"
    time.sleep(2.2)
    assert cli.get("/subscriptions/" + sid).json()["status"] == "expired"
    cli.create(entity(uid(), "Car", speed=prop(1)))
    time.sleep(0.3)
    assert rcv.count()["notifications"] == 0
    n = cli.get("/subscriptions/" + sid, params={"options": "sysAttrs"}).json()["notification"]
    assert n["coraine:dropped"]["expired"] == 1 and n["timesSent"] == 0


def test_throttling(cli, rcv):
    create_sub(cli, sub(rcv.uri, throttling=2))
    eid = uid()
    cli.create(entity(eid, "Car", speed=prop(0)))
    for i in range(5):
        cli.patch("/entities/%s/attrs" % eid, {"speed": prop(i + 1)})
    assert rcv.settle()["notifications"] == 1
    time.sleep(2.1)
    cli.patch("/entities/%s/attrs" % eid, {"speed": prop(9)})
    assert rcv.wait(2)["notifications"] == 2


def test_failing_endpoint_is_counted(cli):
    from ngsi import free_port
    sid = create_sub(cli, sub("http://127.0.0.1:%d/none" % free_port()))
    cli.create(entity(uid(), "Car", speed=prop(1)))
    n = wait_failed(cli, sid)
    assert n["timesFailed"] == 1 and n["status"] == "failed" and "lastFailure" in n


def test_dead_endpoint_retries_backs_off_and_counts(cli):
    from ngsi import free_port
    sid = create_sub(cli, sub("http://127.0.0.1:%d/none" % free_port()))
    eid = uid()
    cli.create(entity(eid, "Car", speed=prop(0)))
    for i in range(9):
        time.sleep(0.05)      # one at a time: each its own notification
        cli.patch("/entities/%s/attrs" % eid, {"speed": prop(i + 1)})
    deadline = time.time() + 10
    while time.time() < deadline:
        n = cli.get("/subscriptions/" + sid, params={"options": "sysAttrs"}).json()["notification"]
        d = n["coraine:dropped"]
        if d["retriesExhausted"] + d["endpointFailing"] == n["coraine:due"] == 10:
            break
        time.sleep(0.05)
    # the first notification is tried three times (--notifierRetries 2, its
    # lane waiting 0.5 s then 1 s, the later changes queued behind it); then
    # the endpoint backs off: the rest is dropped and counted, not tried
    assert n["coraine:due"] == 10
    assert d["retriesExhausted"] == 1 and d["endpointFailing"] == 9, n
    assert n["timesFailed"] == 3 and n["coraine:retried"] == 2 and n["timesSent"] == 0
    assert n["coraine:delivered"] == 0 and d["queueFull"] == d["cooldown"] == 0


def test_5_2_12_geo_q_scope_q_and_lang_select_and_shape(cli, rcv):
    """geoQ (5.2.13) and scopeQ (4.19) select the notified entities; lang
    (4.15) picks the language of a LanguageProperty; subscriptionName,
    description and localOnly are kept as given."""
    inside, outside, scoped = uid(), uid(), uid()
    create_sub(cli, sub(rcv.uri, geoQ={"georel": "within", "geometry": "Polygon",
                                       "coordinates": [[[0, 0], [0, 10], [10, 10], [10, 0], [0, 0]]]},
                        notification={"sysAttrs": False, "format": "keyValues"}))
    sid = create_sub(cli, sub(rcv.uri, entities=[{"type": "Bike"}], scopeQ="/city/#", lang="fr",
                              subscriptionName="bikes", description="scoped bikes", localOnly=True,
                              notification={"sysAttrs": False, "format": "keyValues"}))
    cli.create(entity(inside, "Car", location={"type": "GeoProperty", "value": {"type": "Point", "coordinates": [5, 5]}}))
    cli.create(entity(outside, "Car", location={"type": "GeoProperty", "value": {"type": "Point", "coordinates": [50, 5]}}))
    cli.create(entity(scoped, "Bike", scope="/city/north",
                      name={"type": "LanguageProperty", "languageMap": {"en": "red", "fr": "rouge"}}))
    cli.create(entity(uid(), "Bike", scope="/village"))
    rcv.settle()
    got = {e["id"]: e for n in rcv.notifications() for e in n["body"]["data"]}
    assert sorted(got) == sorted([inside, scoped])
    assert got[scoped]["name"] == "rouge"
    b = cli.get("/subscriptions/" + sid).json()
    assert (b["subscriptionName"], b["description"], b["localOnly"], b["lang"]) == ("bikes", "scoped bikes", True, "fr")


def test_5_8_1_4_jsonld_context_compacts_the_notifications(cli, rcv, ctxserver):
    """jsonldContext (5.2.12) is what notifications are compacted with and
    what their Link header names; without it, the subscription's @context."""
    mine = ctxserver.unique({"@context": {"vel": "urn:ex:speed", "Car": "urn:ex:Car"}})
    theirs = ctxserver.unique({"@context": {"speedOfCar": "urn:ex:speed", "Car": "urn:ex:Car"}})
    for jc in (None, theirs):
        rcv.reset()
        body = {"type": "Subscription", "entities": [{"type": "Car"}], "@context": mine,
                "notification": {"endpoint": {"uri": rcv.uri}, "format": "keyValues"}}
        if jc:
            body["jsonldContext"] = jc
        r = cli.post("/subscriptions", body, ctype="application/ld+json")
        assert r.status_code == 201, r.text
        sid = r.headers["Location"].rsplit("/", 1)[1]
        assert cli.get("/subscriptions/" + sid).json()["jsonldContext"] == (jc or mine)
        cli.create(entity(uid(), "urn:ex:Car", **{"urn:ex:speed": prop(7)}))
        data(rcv, 1)
        got = [x for x in rcv.notifications() if x["body"]["subscriptionId"] == sid][0]
        assert got["body"]["data"][0][("speedOfCar" if jc else "vel")] == 7, got
        assert (jc or mine) in got["headers"]["Link"]
        assert cli.delete("/subscriptions/" + sid).status_code == 204


def test_queue_full_is_counted_before_the_write_is_answered(broker_factory, make_client):
    """A change that finds its endpoint's queue full (--notifierQueueSize) is
    dropped and counted by the matcher, before the write is answered: read
    right after the writes, with no waiting, every due change is accounted."""
    never = Receiver("--never")
    try:
        b = broker_factory("--notifierQueueSize", "1")
        c = make_client(b)
        sid = create_sub(c, sub(never.uri))
        eid = uid()
        c.create(entity(eid, "Car", speed=prop(0)))
        for i in range(9):
            assert c.patch("/entities/%s/attrs" % eid, {"speed": prop(i + 1)}).status_code == 204
        n = c.get("/subscriptions/" + sid, params={"options": "sysAttrs"}).json()["notification"]
        # one in flight (never answered), at most one queued: the rest dropped
        assert n["coraine:due"] == 10 and n["coraine:dropped"]["queueFull"] >= 8, n
        st = c.get("/statistics").json()["notifications"]
        assert st["droppedQueueFull"] >= 8
    finally:
        never.stop()


def test_failed_notification_is_retried_in_order(cli):
    """A receiver refusing the first two attempts gets the notification at the
    third, and what was written meanwhile after it, in commit order."""
    r = Receiver("--fail", "2")
    try:
        sid = create_sub(cli, sub(r.uri))
        eid = uid()
        cli.create(entity(eid, "Car", speed=prop(0)))
        for i in range(3):
            cli.patch("/entities/%s/attrs" % eid, {"speed": prop(i + 1)})
        c = r.wait(4, timeout=10, key="entities")
        c = r.settle()
        assert c["refused"] == 2 and c["entities"] == 4 and c["outOfOrder"] == 0 and c["duplicates"] == 0, c
        n = cli.get("/subscriptions/" + sid, params={"options": "sysAttrs"}).json()["notification"]
        assert n["timesFailed"] == 2 and n["coraine:retried"] == 2 and n["coraine:delivered"] == 4
        assert n["status"] == "ok" and n["coraine:dropped"]["retriesExhausted"] == 0
    finally:
        r.stop()


def test_5_2_15_cooldown_sends_nothing_after_a_failure(broker_factory, make_client):
    """5.2.15: once a notification failed, nothing more is sent to the
    endpoint for cooldown ms: those notifications are dropped, counted."""
    from ngsi import free_port
    cli = make_client(broker_factory("--notifierRetries", "0"))
    sid = create_sub(cli, sub("http://127.0.0.1:%d/none" % free_port(),
                              notification={"endpoint": {"uri": "http://127.0.0.1:%d/none" % free_port(),
                                                         "cooldown": 1500}}))
    cli.create(entity(uid(), "Car", speed=prop(0)))
    assert wait_failed(cli, sid)["timesFailed"] == 1
    for _ in range(3):
        cli.create(entity(uid(), "Car", speed=prop(0)))
    deadline = time.time() + 5
    while time.time() < deadline:
        n = cli.get("/subscriptions/" + sid, params={"options": "sysAttrs"}).json()["notification"]
        if n["coraine:dropped"]["cooldown"] == 3:
            break
        time.sleep(0.05)
    assert n["coraine:dropped"]["cooldown"] == 3 and n["timesFailed"] == 1, n
    time.sleep(1.6)
    cli.create(entity(uid(), "Car", speed=prop(0)))
    deadline = time.time() + 5
    while time.time() < deadline and n["timesFailed"] < 2:
        n = cli.get("/subscriptions/" + sid, params={"options": "sysAttrs"}).json()["notification"]
        time.sleep(0.05)
    assert n["timesFailed"] == 2 and n["coraine:dropped"]["cooldown"] == 3
    st = cli.get("/statistics").json()["notifications"]
    assert st["droppedCooldown"] >= 3


def test_statistics_count_notifications(cli, rcv):
    create_sub(cli, sub(rcv.uri))
    cli.create(entity(uid(), "Car", speed=prop(1)))
    rcv.wait(1)
    st = cli.get("/statistics").json()["notifications"]
    assert st["sent"] >= 1 and st["subscriptions"] >= 1 and "droppedQueueFull" in st


def test_5_2_14_show_changes_previous_value(cli, rcv):
    create_sub(cli, sub(rcv.uri, notification={"showChanges": True, "sysAttrs": False}))
    eid = uid()
    cli.create(entity(eid, "Car", speed=prop(1), owner={"type": "Relationship", "object": "urn:a"}))
    rcv.wait(1)
    assert "previousValue" not in rcv.notifications()[0]["body"]["data"][0]["speed"]
    cli.patch("/entities/%s/attrs" % eid, {"speed": prop(2), "owner": {"type": "Relationship", "object": "urn:b"}})
    d = data(rcv, 2)[1]["data"][0]
    assert d["speed"]["value"] == 2 and d["speed"]["previousValue"] == 1
    assert d["owner"]["object"] == "urn:b" and d["owner"]["previousObject"] == "urn:a"


def test_notification_geojson(cli, rcv):
    create_sub(cli, sub(rcv.uri, notification={"endpoint": {"uri": rcv.uri, "accept": "application/geo+json"}}))
    cli.create(entity(uid(), "Car", location={"type": "GeoProperty", "value": {"type": "Point", "coordinates": [1, 2]}}))
    rcv.wait(1)
    n = rcv.notifications()[0]
    assert n["headers"]["Content-Type"] == "application/geo+json"
    assert n["body"]["data"]["type"] == "FeatureCollection"
    assert n["body"]["data"]["features"][0]["geometry"]["coordinates"] == [1, 2]


def test_5_2_12_time_interval_periodic(cli, rcv):
    a, b = uid(), uid()
    cli.create(entity(a, "Car", speed=prop(1)))
    cli.create(entity(b, "Car", speed=prop(2)))
    cli.create(entity(uid(), "Bike", speed=prop(3)))
    sid = create_sub(cli, sub(rcv.uri, timeInterval=2))   # 2 s: the checks below have margin on a loaded machine
    time.sleep(0.5)
    assert rcv.count()["notifications"] == 0          # none at creation, nor on changes
    cli.patch("/entities/%s/attrs" % a, {"speed": prop(5)})
    time.sleep(0.3)
    assert rcv.count()["notifications"] == 0
    c = rcv.wait(2, timeout=8)
    assert c["notifications"] >= 2
    body = rcv.notifications()[0]["body"]
    assert body["subscriptionId"] == sid
    assert sorted(e["id"] for e in body["data"]) == sorted([a, b])
    t0 = time.time()
    n0 = rcv.count()["notifications"]
    time.sleep(4.1)
    assert 1 <= rcv.count()["notifications"] - n0 <= 3
    assert cli.patch("/subscriptions/" + sid, {"isActive": False}).status_code == 204
    time.sleep(0.2)
    n1 = rcv.count()["notifications"]
    time.sleep(2.3)
    assert rcv.count()["notifications"] == n1


def test_5_8_1_names_unknown_until_later_still_match(cli, rcv):
    # a subscription is stored: its type, q and watched names must match the
    # entities written after it, even when nothing of those names existed yet
    # (a request's query only looks names up; a stored filter interns them)
    t, a = "T" + uid("x").replace(":", "")[-10:], "a" + uid("x").replace(":", "")[-10:]
    create_sub(cli, {"type": "Subscription", "entities": [{"type": t}], "q": a + ">1",
                     "watchedAttributes": [a], "notification": {"endpoint": {"uri": rcv.uri}}})
    cli.create(entity(uid(), t, **{a: prop(5)}))
    cli.create(entity(uid(), t, **{a: prop(0)}))
    c = rcv.settle()
    assert c["notifications"] == 1


def test_5_2_12_expand_values_and_json_keys_apply_to_q(cli, rcv):
    """expandValues / jsonKeys of a subscription change how its q compares
    the values of the named attributes (4.9), as on a query."""
    create_sub(cli, sub(rcv.uri, q='label=="Sedan"', expandValues=["label"]))
    create_sub(cli, sub(rcv.uri, q="kind==Sedan", jsonKeys=["kind"]))
    cli.create(entity(uid(), "Car", label=prop("Sedan")))          # as written: neither matches
    time.sleep(0.3)
    assert rcv.count()["notifications"] == 0
    cli.create(entity(uid(), "Car", label=prop("https://uri.etsi.org/ngsi-ld/default-context/Sedan"),
                      kind={"type": "VocabProperty", "vocab": "Sedan"}))   # expanded label matches; kind not
    assert rcv.wait(1)["notifications"] == 1
    time.sleep(0.3)
    assert rcv.count()["notifications"] == 1
