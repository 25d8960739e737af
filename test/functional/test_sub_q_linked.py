"""A subscription's q with terms into linked entities (4.9 EXAMPLES 13 and 14:
rel{attr}, rel{Type:attr}, nested terms), evaluated when a change of the
subscribed entity is matched, against the linked entities held here
(4.5.23.1). 5.2.12 makes q "a valid query string as per clause 4.9" and
5.8.6 matches the notified entities "as mandated by clauses 4.9, 4.10 and
4.19"; unlike a query (5.7.2.4) no clause of 5.8 asks for notification.join,
so such a q is valid without it. A malformed term is BadRequestData
(5.8.1.4)."""

import time

import pytest

from ngsi import assert_problem, entity, listrel, prop, rel, uid
from receiver import Receiver


@pytest.fixture
def rcv():
    r = Receiver()
    yield r
    r.stop()


def create_sub(cli, uri, q, etype="WS", **members):
    body = {"type": "Subscription", "entities": [{"type": etype}], "q": q,
            "notification": {"endpoint": {"uri": uri}, "format": "keyValues"}}
    body.update(members)
    r = cli.post("/subscriptions", body)
    assert r.status_code == 201, r.text
    return r.headers["Location"].rsplit("/", 1)[1]


def notified(rcv, quiet=0.3):
    rcv.settle(quiet)
    return sorted(e["id"] for n in rcv.notifications() for e in n["body"]["data"])


def world(cli):
    w = dict(site=uid("Site"), d1=uid("Device"), d2=uid("Device"), s1=uid("WS"), s2=uid("WS"), s3=uid("WS"))
    cli.create(entity(w["site"], "Site", name=prop("north")))
    cli.create(entity(w["d1"], "Device", humidity=prop(40), at=rel(w["site"])))
    cli.create(entity(w["d2"], "Sensor", humidity=prop(70)))
    cli.create(entity(w["s1"], "WS", sensor=rel(w["d1"]), n=prop(0)))
    cli.create(entity(w["s2"], "WS", sensor=rel(w["d2"]), n=prop(0)))
    cli.create(entity(w["s3"], "WS", sensors=listrel([uid("Nowhere"), w["d2"]]), n=prop(0)))
    return w


def touch(cli, *ids):
    for i, eid in enumerate(ids):
        assert cli.patch("/entities/%s/attrs" % eid, {"n": prop(i + 1 + int(time.time() * 1000))}).status_code == 204


def test_4_9_5_8_6_sub_q_linked_fires_when_linked_entity_matches(cli, rcv):
    w = world(cli)
    create_sub(cli, rcv.uri, "sensor{humidity}==40")
    touch(cli, w["s1"], w["s2"], w["s3"])
    assert notified(rcv) == [w["s1"]]              # s2's sensor has 70; s3 has no 'sensor'
    # the linked entity changes: the linking one notifies once it changes and matches
    rcv.reset()
    assert cli.patch("/entities/%s/attrs" % w["d1"], {"humidity": prop(41)}).status_code == 204
    assert cli.patch("/entities/%s/attrs" % w["d2"], {"humidity": prop(40)}).status_code == 204
    assert notified(rcv) == []                     # a Device is not a subscribed entity
    touch(cli, w["s1"], w["s2"])
    assert notified(rcv) == [w["s2"]]


def test_4_9_5_8_6_sub_q_linked_list_relationship_type_hint_and_nested(cli, rcv):
    w = world(cli)
    create_sub(cli, rcv.uri, "sensors{humidity}>50")               # a ListRelationship, one object not held
    create_sub(cli, rcv.uri, "sensor{Device:humidity}>0")          # only a Device target counts
    create_sub(cli, rcv.uri, "sensor{at{name}}==\"north\"")        # two hops
    create_sub(cli, rcv.uri, "sensor{humidity}==1|sensor{Sensor,Device:humidity}==70")
    touch(cli, w["s1"], w["s2"], w["s3"])
    assert notified(rcv) == sorted([w["s3"], w["s1"], w["s1"], w["s2"]])


def test_4_9_5_8_6_sub_q_linked_without_join_and_with_join(cli, rcv):
    """Valid without notification.join (no clause of 5.8 asks for it); with
    join=flat the notification carries the linked entity that matched."""
    w = world(cli)
    create_sub(cli, rcv.uri, "sensor{humidity}==40", notification={"endpoint": {"uri": rcv.uri},
                                                                   "format": "keyValues", "join": "flat"})
    touch(cli, w["s1"], w["s2"])
    rcv.settle()
    bodies = [n["body"]["data"] for n in rcv.notifications()]
    assert len(bodies) == 1 and [e["id"] for e in bodies[0]] == [w["s1"], w["d1"]]
    assert bodies[0][1]["humidity"] == 40


def test_4_9_5_8_6_sub_q_linked_periodic(cli, rcv):
    w = world(cli)
    create_sub(cli, rcv.uri, "sensor{humidity}==70", timeInterval=1)
    rcv.wait(1, timeout=8)
    body = rcv.notifications()[0]["body"]
    assert [e["id"] for e in body["data"]] == [w["s2"]]


def test_4_9_5_8_6_sub_q_linked_patch_and_delete_of_target(cli, rcv):
    w = world(cli)
    sid = create_sub(cli, rcv.uri, "sensor{humidity}==40")
    assert cli.delete("/entities/" + w["d1"]).status_code == 204
    touch(cli, w["s1"])
    assert notified(rcv) == []                     # the target is gone: no match
    assert cli.patch("/subscriptions/" + sid, {"q": "sensor{humidity}==70"}).status_code == 204
    touch(cli, w["s1"], w["s2"])
    assert notified(rcv) == [w["s2"]]


@pytest.mark.parametrize("bad", ["sensor{humidity", "sensor{}", "sensor.x{a}==1", "sensor{humidity}}==1",
                                 "sensor{,:humidity}==1"])
def test_5_8_1_4_sub_q_malformed_linked_term_is_bad_request(cli, rcv, bad):
    """5.8.1.4: q must be valid per 4.9 (5.2.12); a malformed linked term is BadRequestData."""
    body = {"type": "Subscription", "entities": [{"type": "WS"}], "q": bad,
            "notification": {"endpoint": {"uri": rcv.uri}}}
    assert_problem(cli.post("/subscriptions", body), 400, "BadRequestData")
    listed = cli.get("/subscriptions", params={"limit": 1000})
    assert listed.status_code != 200 or all(s.get("q") != bad for s in listed.json())   # nothing created


def test_5_8_1_4_sub_q_too_many_linked_terms_is_bad_request(cli, rcv):
    q = ";".join("r%d{a}==1" % i for i in range(17))
    body = {"type": "Subscription", "entities": [{"type": "WS"}], "q": q,
            "notification": {"endpoint": {"uri": rcv.uri}}}
    assert_problem(cli.post("/subscriptions", body), 400, "BadRequestData")


def test_5_2_12_sub_q_linked_rendered_as_given(cli, rcv):
    sid = create_sub(cli, rcv.uri, "sensor{Device:humidity}==40")
    assert cli.get("/subscriptions/" + sid).json()["q"] == "sensor{Device:humidity}==40"
