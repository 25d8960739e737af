"""The egress policy (--egressDeny / --egressAllow and the built-in refusals of
core/egress.c) on notification endpoints: a subscription whose endpoint's
literal host is refused is not made (BadRequestData, 5.8.1.4 / 5.8.2); a
host name is checked again on the address each connection actually goes to
(HTTP through libcurl, MQTT), so a DNS answer that changed since (rebinding)
does not get through: such a notification fails, counted, with its reason."""

import time

import pytest

from ngsi import assert_problem, entity, prop, uid
from receiver import Receiver

DENY_LOOPBACK = ("--egressDeny", "127.0.0.0/8,::1/128")


@pytest.fixture
def rcv():
    r = Receiver()
    yield r
    r.stop()


def sub(uri, etype):
    return {"type": "Subscription", "entities": [{"type": etype}],
            "notification": {"endpoint": {"uri": uri}}}


def wait_failure(cli, sid, timeout=10.0):
    deadline = time.time() + timeout
    while True:
        n = cli.get("/subscriptions/" + sid, params={"options": "sysAttrs"}).json()["notification"]
        if n["timesFailed"] or time.time() > deadline:
            return n
        time.sleep(0.05)


@pytest.mark.parametrize("uri", [
    "http://169.254.169.254/latest/meta-data",          # link-local (cloud metadata)
    "https://169.254.170.2:8443/x",
    "http://[fe80::1]:8080/notify",
    "http://metadata.google.internal/computeMetadata",  # a built-in host rule
    "http://user:pw@metadata.google.internal./x",      # user info and a trailing dot do not hide it
    "mqtt://169.254.169.254:1883/topic",
    "mqtts://user@[fe80::2]:8883/topic",
])
def test_5_8_1_4_endpoint_refused_by_egress_policy(cli, uri):
    et = "T" + uid("T").rsplit(":", 1)[1]
    r = cli.post("/subscriptions", sub(uri, et))
    assert_problem(r, 400, "BadRequestData")
    assert "egress policy" in r.json()["detail"]


def test_5_8_2_update_to_a_refused_endpoint(cli, rcv):
    et = "T" + uid("T").rsplit(":", 1)[1]
    r = cli.post("/subscriptions", sub(rcv.uri, et))
    assert r.status_code == 201, r.text
    sid = r.headers["Location"].rsplit("/", 1)[1]
    r = cli.patch("/subscriptions/" + sid, {"notification": {"endpoint": {"uri": "http://169.254.169.254/x"}}})
    assert_problem(r, 400, "BadRequestData")
    assert cli.get("/subscriptions/" + sid).json()["notification"]["endpoint"]["uri"] == rcv.uri


def test_egress_user_deny_refuses_a_literal_endpoint(broker_factory, make_client, rcv):
    c = make_client(broker_factory(*DENY_LOOPBACK))
    assert_problem(c.post("/subscriptions", sub(rcv.uri, "Car")), 400, "BadRequestData")
    # "localhost" is sent to 127.0.0.1 by the own client: that address is the one checked
    assert_problem(c.post("/subscriptions", sub("http://localhost:%d/notify" % rcv.port, "Car")), 400,
                   "BadRequestData")


@pytest.mark.parametrize("uri", ["http://u@localhost:{port}/notify",     # libcurl (user info)
                                 "mqtt://localhost:{port}/topic"])        # libmosquitto
def test_egress_checks_the_address_connected(broker_factory, make_client, rcv, uri):
    """A host name passes at creation (no name rule refuses it); its address,
    resolved when sending, is refused: the notification fails with the reason
    and nothing reaches the endpoint."""
    b = broker_factory(*DENY_LOOPBACK)
    c = make_client(b)
    et = "T" + uid("T").rsplit(":", 1)[1]
    r = c.post("/subscriptions", sub(uri.format(port=rcv.port), et))
    assert r.status_code == 201, r.text
    sid = r.headers["Location"].rsplit("/", 1)[1]
    c.create(entity(uid(), et, speed=prop(1)))
    n = wait_failure(c, sid)
    assert n["timesFailed"] >= 1 and n["timesSent"] == 0 and n["status"] == "failed"
    assert "lastFailure" in n and "lastSuccess" not in n
    assert "egress policy" in n["coraine:lastFailureReason"], n
    assert "127.0.0.1" in n["coraine:lastFailureReason"] or "::1" in n["coraine:lastFailureReason"]
    assert rcv.count()["notifications"] == 0
    assert "egress policy" in b.read_log()
    # the reason is a coraine member: shown with sysAttrs only
    assert "coraine:lastFailureReason" not in c.get("/subscriptions/" + sid).json()["notification"]


def test_failure_reason_of_an_http_status(cli):
    """Any failed notification says why (here: the endpoint's answer)."""
    r500 = Receiver("--fail", "1000")
    try:
        et = "T" + uid("T").rsplit(":", 1)[1]
        r = cli.post("/subscriptions", sub(r500.uri, et))
        assert r.status_code == 201, r.text
        sid = r.headers["Location"].rsplit("/", 1)[1]
        cli.create(entity(uid(), et, speed=prop(1)))
        n = wait_failure(cli, sid)
        assert n["timesFailed"] >= 1
        assert n["coraine:lastFailureReason"] == "the endpoint answered HTTP 500", n
    finally:
        r500.stop()
