"""Context source registration subscriptions (5.11, 6.12, 6.13) and their
CSourceNotifications (5.3.2, 5.11.7): newlyMatching, updated, noLongerMatching."""

import time

import pytest

from ngsi import assert_problem, uid
from receiver import Receiver


@pytest.fixture
def rcv():
    r = Receiver()
    yield r
    r.stop()


def reg(**members):
    r = {"type": "ContextSourceRegistration", "information": [{"entities": [{"type": "Building"}]}],
         "endpoint": "http://127.0.0.1:9/source"}
    r.update(members)
    return r


def csub(uri, **members):
    s = {"type": "Subscription", "entities": [{"type": "Building"}], "notification": {"endpoint": {"uri": uri}}}
    s.update(members)
    return s


def create(cli, path, body):
    r = cli.post(path, body)
    assert r.status_code == 201, r.text
    return r.headers["Location"].rsplit("/", 1)[1]


def bodies(rcv, n, timeout=10):
    rcv.wait(n, timeout)
    return [x["body"] for x in rcv.notifications()]


# ---------------------------------------------------------------- 5.11.2 create, 5.11.4 retrieve

def test_5_11_2_create_retrieve_query_delete(cli, rcv):
    sid = uid("Subscription")
    r = cli.post("/csourceSubscriptions", csub(rcv.uri, id=sid))
    assert r.status_code == 201, r.text
    assert r.headers["Location"] == "/ngsi-ld/v1/csourceSubscriptions/" + sid
    g = cli.get("/csourceSubscriptions/" + sid)
    assert g.status_code == 200 and g.json()["id"] == sid and g.json()["status"] == "active"
    q = cli.get("/csourceSubscriptions")
    assert [x["id"] for x in q.json()] == [sid]
    assert cli.get("/subscriptions").json() == []                    # not an entity subscription
    assert cli.delete("/csourceSubscriptions/" + sid).status_code == 204
    assert_problem(cli.get("/csourceSubscriptions/" + sid), 404, "ResourceNotFound")
    assert_problem(cli.delete("/csourceSubscriptions/" + sid), 404, "ResourceNotFound")


@pytest.mark.parametrize("bad", [
    {"notification": None},
    {"type": "ContextSourceRegistration"},
    {"temporalQ": {"timerel": "during", "timeAt": "2020-01-01T00:00:00Z"}},
    {"temporalQ": {"timerel": "after"}},
    {"csf": "a>>"},
    {"entities": []},
])
def test_5_11_2_bad_subscription_is_400(cli, rcv, bad):
    body = csub(rcv.uri)
    for k, v in bad.items():
        if v is None:
            body.pop(k)
        else:
            body[k] = v
    assert_problem(cli.post("/csourceSubscriptions", body), 400, "BadRequestData")


# ---------------------------------------------------------------- 5.11.7 notifications

def test_5_11_7_initially_then_newly_matching_updated_no_longer_matching(cli, rcv):
    first = create(cli, "/csourceRegistrations", reg())
    create(cli, "/csourceRegistrations", reg(information=[{"entities": [{"type": "Bus"}]}]))
    sid = create(cli, "/csourceSubscriptions", csub(rcv.uri))
    b = bodies(rcv, 1)
    assert b[0]["type"] == "ContextSourceNotification" and b[0]["subscriptionId"] == sid   # 5.3.2
    assert b[0]["triggerReason"] == "newlyMatching"
    assert [x["id"] for x in b[0]["data"]] == [first]
    second = create(cli, "/csourceRegistrations", reg())
    b = bodies(rcv, 2)
    assert b[1]["triggerReason"] == "newlyMatching" and [x["id"] for x in b[1]["data"]] == [second]
    assert cli.patch("/csourceRegistrations/" + second, {"description": "x"}).status_code == 204
    b = bodies(rcv, 3)
    assert b[2]["triggerReason"] == "updated" and b[2]["data"][0]["description"] == "x"
    assert cli.patch("/csourceRegistrations/" + second,
                     {"information": [{"entities": [{"type": "Bus"}]}]}).status_code == 204
    b = bodies(rcv, 4)
    assert b[3]["triggerReason"] == "noLongerMatching"
    assert cli.delete("/csourceRegistrations/" + first).status_code == 204
    b = bodies(rcv, 5)
    assert b[4]["triggerReason"] == "noLongerMatching" and b[4]["data"][0]["id"] == first
    # a registration it never matched: nothing
    create(cli, "/csourceRegistrations", reg(information=[{"entities": [{"type": "Bus"}]}]))
    rcv.settle()
    assert rcv.count()["notifications"] == 5
    s = cli.get("/csourceSubscriptions/" + sid).json()
    assert s["notification"]["timesSent"] == 5 and s["notification"]["status"] == "ok"


def test_5_11_7_only_matching_information_elements(cli, rcv):
    create(cli, "/csourceRegistrations", reg(information=[{"entities": [{"type": "Bus"}]},
                                                          {"entities": [{"type": "Building"}]}]))
    create(cli, "/csourceSubscriptions", csub(rcv.uri))
    b = bodies(rcv, 1)
    assert b[0]["data"][0]["information"] == [{"entities": [{"type": "Building"}]}]


def test_5_12_watched_and_notification_attributes(cli, rcv):
    a = create(cli, "/csourceRegistrations", reg(information=[{"entities": [{"type": "Building"}],
                                                               "propertyNames": ["name"]}]))
    create(cli, "/csourceRegistrations", reg(information=[{"entities": [{"type": "Building"}],
                                                           "propertyNames": ["height"]}]))
    create(cli, "/csourceSubscriptions", csub(rcv.uri, watchedAttributes=["name"],
                                             notification={"attributes": ["name"], "endpoint": {"uri": rcv.uri}}))
    b = bodies(rcv, 1)
    assert [x["id"] for x in b[0]["data"]] == [a]


def test_5_11_2_temporal_and_latest(cli, rcv):
    create(cli, "/csourceRegistrations", reg())
    obs = create(cli, "/csourceRegistrations", reg(observationInterval={"startAt": "2020-08-01T22:07:00Z",
                                                                        "endAt": "2021-08-01T21:07:00Z"}))
    create(cli, "/csourceSubscriptions", csub(rcv.uri, temporalQ={"timerel": "after",
                                                                  "timeAt": "2020-06-01T22:07:00Z"}))
    b = bodies(rcv, 1)
    assert [x["id"] for x in b[0]["data"]] == [obs]


def test_5_11_2_csf_and_geo(cli, rcv):
    red = create(cli, "/csourceRegistrations", reg(colour="red", location={"type": "Point", "coordinates": [1, 1]}))
    create(cli, "/csourceRegistrations", reg(colour="blue", location={"type": "Point", "coordinates": [50, 50]}))
    create(cli, "/csourceSubscriptions", csub(rcv.uri, csf='colour=="red"'))
    assert [x["id"] for x in bodies(rcv, 1)[0]["data"]] == [red]
    rcv.reset()
    create(cli, "/csourceSubscriptions", csub(rcv.uri, geoQ={"georel": "near;maxDistance==1000",
                                                             "geometry": "Point", "coordinates": [1, 1]}))
    assert [x["id"] for x in bodies(rcv, 1)[0]["data"]] == [red]


def test_5_11_3_update_sends_every_matching_registration(cli, rcv):
    create(cli, "/csourceRegistrations", reg())
    bus = create(cli, "/csourceRegistrations", reg(information=[{"entities": [{"type": "Bus"}]}]))
    sid = create(cli, "/csourceSubscriptions", csub(rcv.uri))
    bodies(rcv, 1)
    r = cli.patch("/csourceSubscriptions/" + sid, {"entities": [{"type": "Bus"}]})
    assert r.status_code == 204, r.text
    b = bodies(rcv, 2)
    assert [x["id"] for x in b[1]["data"]] == [bus]
    assert cli.get("/csourceSubscriptions/" + sid).json()["notification"]["timesSent"] == 2


def test_5_11_7_paused_and_expired_send_nothing(cli, rcv):
    create(cli, "/csourceSubscriptions", csub(rcv.uri, isActive=False))
    create(cli, "/csourceRegistrations", reg())
    rcv.settle()
    assert rcv.count()["notifications"] == 0


def test_5_11_7_periodic(cli, rcv):
    create(cli, "/csourceRegistrations", reg())
    sid = create(cli, "/csourceSubscriptions", csub(rcv.uri, timeInterval=1))
    b = bodies(rcv, 2, timeout=5)
    assert all(x["subscriptionId"] == sid and len(x["data"]) == 1 for x in b)
    assert cli.delete("/csourceSubscriptions/" + sid).status_code == 204


def test_5_11_7_periodic_regardless_of_matches(cli, rcv):
    # 5.11.7: with timeInterval, sent initially and periodically regardless of the registrations (none match)
    create(cli, "/csourceRegistrations", reg(information=[{"entities": [{"type": "Bus"}]}]))
    sid = create(cli, "/csourceSubscriptions", csub(rcv.uri, timeInterval=1))
    b = bodies(rcv, 2, timeout=5)
    assert all(x["type"] == "ContextSourceNotification" and x["subscriptionId"] == sid and x["data"] == []
               and "triggerReason" not in x for x in b)
    assert cli.delete("/csourceSubscriptions/" + sid).status_code == 204


def test_5_11_7_failed_endpoint_counts(cli):
    sid = create(cli, "/csourceSubscriptions", csub("http://127.0.0.1:9/nobody"))
    create(cli, "/csourceRegistrations", reg())
    deadline = time.time() + 10
    while time.time() < deadline:
        n = cli.get("/csourceSubscriptions/" + sid).json()["notification"]
        if n.get("timesFailed"):
            break
        time.sleep(0.1)
    assert n["status"] == "failed" and n["timesFailed"] == 1 and "lastFailure" in n


def test_cordb_disk_keeps_csource_subscriptions(broker_factory, tmp_path, rcv):
    from conftest import Client
    b = broker_factory("--dbDir", str(tmp_path))
    c = Client(b, None)
    sid = create(c, "/csourceSubscriptions", csub(rcv.uri, description="kept"))
    b.stop()
    b.start()
    g = c.get("/csourceSubscriptions/" + sid)
    assert g.status_code == 200 and g.json()["description"] == "kept"
    create(c, "/csourceRegistrations", reg())
    assert bodies(rcv, 1)[0]["subscriptionId"] == sid
    b.stop()
